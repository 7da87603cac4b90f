#!/usr/bin/env python3
"""Write a container image as an OCI image archive that is also a `docker
save` tarball, without Docker.

    image_tar.py REF OUT.tar [--entrypoint JSON] [--user UID:GID]
                 [--file SRC=DST ...] [--binary SRC=DST ...] [--dir PATH ...]
                 [--label KEY=VALUE ...]

--file copies one file; --binary copies an executable and every shared
library `ldd` says it loads (at the path ldd reports, so the dynamic loader
finds them without a cache). The image has one layer, fixed timestamps and
sorted entries, so the same inputs give the same image digest. `ctr images
import`, `docker load` and `skopeo copy oci-archive:` read it.
"""
import argparse
import hashlib
import io
import json
import os
import re
import subprocess
import sys
import tarfile

EPOCH = "1970-01-01T00:00:00Z"


def shared_libraries(binary):
    """Paths of the libraries (and the loader) a dynamic executable needs."""
    out = subprocess.run(["ldd", binary], capture_output=True, text=True)
    if "not a dynamic executable" in out.stdout + out.stderr:
        return []
    if out.returncode != 0:
        sys.exit(f"image_tar: ldd {binary} failed: {out.stderr.strip()}")
    paths = []
    for line in out.stdout.splitlines():
        if "not found" in line:
            sys.exit(f"image_tar: {binary} needs a library that is missing: {line.strip()}")
        match = re.search(r"(/\S+) \(0x", line)
        if match:
            paths.append(match.group(1))
    return paths


def entry(name, **attrs):
    info = tarfile.TarInfo(name)
    info.mtime, info.uid, info.gid, info.uname, info.gname = 0, 0, 0, "root", "root"
    for key, value in attrs.items():
        setattr(info, key, value)
    return info


def layer_bytes(files, dirs):
    """files: {dest: source}, dirs: set of dest dirs. Returns the layer tar."""
    all_dirs = set()
    for path in list(dirs) + [os.path.dirname(d) for d in files]:
        while path not in ("", "/"):
            all_dirs.add(path.strip("/"))
            path = os.path.dirname(path)
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for d in sorted(all_dirs):
            mode = 0o1777 if d == "tmp" else 0o755
            tar.addfile(entry(d + "/", type=tarfile.DIRTYPE, mode=mode))
        for dest in sorted(files):
            with open(files[dest], "rb") as f:
                data = f.read()
            mode = os.stat(files[dest]).st_mode & 0o777
            tar.addfile(entry(dest.lstrip("/"), size=len(data), mode=mode), io.BytesIO(data))
    return buf.getvalue()


def blob(data):
    """The digest of a content-addressed blob and its path in the archive."""
    digest = "sha256:" + hashlib.sha256(data).hexdigest()
    return digest, "blobs/sha256/" + digest[len("sha256:"):]


def write_image(ref, out, layer, entrypoint, user, labels):
    """One archive that is both an OCI image layout (index.json, oci-layout,
    blobs/: what `skopeo copy oci-archive:`, `crane push` and registries
    take) and a `docker save` tarball (manifest.json naming the same blobs,
    as Docker 25 writes them: what `docker load` and `ctr images import`
    read)."""
    diff_id, layer_path = blob(layer)
    config = {
        "architecture": "amd64",
        "os": "linux",
        "created": EPOCH,
        "config": {
            "Env": ["PATH=/usr/local/bin:/usr/bin:/bin"],
            "Entrypoint": entrypoint,
            "User": user,
            "WorkingDir": "/",
            "Labels": labels,
        },
        "rootfs": {"type": "layers", "diff_ids": [diff_id]},
        "history": [{"created": EPOCH, "created_by": "e2e/images/image_tar.py"}],
    }
    config_bytes = json.dumps(config, sort_keys=True, separators=(",", ":")).encode()
    config_digest, config_path = blob(config_bytes)
    manifest = {
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "config": {"mediaType": "application/vnd.oci.image.config.v1+json", "digest": config_digest,
                   "size": len(config_bytes)},
        "layers": [{"mediaType": "application/vnd.oci.image.layer.v1.tar", "digest": diff_id,
                    "size": len(layer)}],
    }
    if labels:
        manifest["annotations"] = labels
    manifest_bytes = json.dumps(manifest, sort_keys=True, separators=(",", ":")).encode()
    manifest_digest, manifest_path = blob(manifest_bytes)
    tag = ref.rsplit(":", 1)[1] if ":" in ref.rsplit("/", 1)[-1] else "latest"
    full_name = ref if "/" in ref else "docker.io/library/" + ref
    index = {
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.index.v1+json",
        "manifests": [{
            "mediaType": "application/vnd.oci.image.manifest.v1+json", "digest": manifest_digest,
            "size": len(manifest_bytes),
            "annotations": {"org.opencontainers.image.ref.name": tag, "io.containerd.image.name": full_name},
        }],
    }
    docker = [{"Config": config_path, "RepoTags": [ref], "Layers": [layer_path]}]
    files = (
        (config_path, config_bytes),
        (layer_path, layer),
        (manifest_path, manifest_bytes),
        ("index.json", json.dumps(index, sort_keys=True).encode()),
        ("oci-layout", b'{"imageLayoutVersion":"1.0.0"}'),
        ("manifest.json", json.dumps(docker).encode()),
    )
    tmp = out + ".tmp"
    with tarfile.open(tmp, "w") as tar:
        for d in ("blobs/", "blobs/sha256/"):
            tar.addfile(entry(d, type=tarfile.DIRTYPE, mode=0o755))
        for name, data in files:
            tar.addfile(entry(name, size=len(data), mode=0o644), io.BytesIO(data))
    os.replace(tmp, out)
    return manifest_digest


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("ref")
    parser.add_argument("out")
    parser.add_argument("--entrypoint", default="null", help="JSON list")
    parser.add_argument("--user", default="")
    parser.add_argument("--file", action="append", default=[], help="SRC=DST")
    parser.add_argument("--binary", action="append", default=[], help="SRC=DST, with its libraries")
    parser.add_argument("--dir", action="append", default=[])
    parser.add_argument("--label", action="append", default=[], help="KEY=VALUE (image label and annotation)")
    args = parser.parse_args()

    files = {}
    for spec in args.file + args.binary:
        src, dest = spec.split("=", 1)
        if not os.path.isfile(src):
            sys.exit(f"image_tar: {src} does not exist")
        files[dest] = src
    for spec in args.binary:
        for lib in shared_libraries(spec.split("=", 1)[0]):
            files[lib] = os.path.realpath(lib)
    layer = layer_bytes(files, set(args.dir))
    labels = dict(label.split("=", 1) for label in args.label)
    digest = write_image(args.ref, args.out, layer, json.loads(args.entrypoint), args.user, labels)
    print(f"{args.ref}: {len(files)} files, {len(layer) // 1024} KiB, manifest {digest}")


if __name__ == "__main__":
    main()
