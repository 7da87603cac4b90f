"""The incremental section (issue 30, item 7): on synthetic-s3, a full scan
of N objects, the bucket changed by 1 % (synthetic-s3 `--change-share 0.01`:
added, deleted, content rewritten and metadata replaced in equal parts), an
incremental scan against the full one (`scan --baseline`), and a full scan of
the changed bucket to judge it by. Owns the section's flow, its claims, the
record-by-record and change-set comparisons and its table; the run's Bench
(binaries, temporary directory, environment) is passed in.

The scans write their datasets to a MinIO behind synthetic-s3's `--forward`
(the store check's canary goes there, and MinIO moves LastModified on a
metadata replace; versitygw, the other sections' output, does not, and an
incremental scan on it would HEAD everything). HEADs are synthetic-s3's own
count (`/_stats`) and the changes made its own list (`/_changes`).

Run only this section:

    python3 bench/run.py --only incremental --bin-dir DIR [--incremental-objects 1000000,10000000] \\
        --markdown BENCHMARKS.md

May import: common, processes, bench.
"""
import gzip
import json
import os
import subprocess
import tempfile
import time
import urllib.request

from .common import CONCURRENCY, CREDENTIALS, log
from .processes import Endpoint, free_port, run_client, wait_until

CHANGE_SHARE = 0.01
CHANGE_SEED = 30
BUCKET = "bench-incremental"
# Bytes a JSON Lines record of synthetic-s3's takes (254 at 10^6), and the
# datasets MinIO holds at once: the incremental result and the changed
# bucket's full scan (the baseline is deleted once the incremental scan ran).
RECORD_BYTES = 260
DATASETS_AT_ONCE = 2
# What an incremental scan of a bucket changed by 1 % must reach (issue 30).
LIMITS = {"heads_share": 0.02, "wall_ratio": 0.15}
HEADING = "## Incremental scans: 1 % changed (issue 30, item 7)"


def judge(row):
    """[(claim, met)] of one measured size."""
    return [
        (f"HEADs <= {LIMITS['heads_share'] * 100:.0f} % of the full scan's", row["heads_share"] <= LIMITS["heads_share"]),
        (f"wall time <= {LIMITS['wall_ratio']}x the full scan's", row["wall_ratio"] <= LIMITS["wall_ratio"]),
        ("result equal to a full scan, record by record", row["records_equal"]),
        ("change set exactly the changes made", row["changes_exact"]),
    ]


def first_difference(a, b):
    """Compare two record streams (key order): None when equal, else where
    they first differ, in words."""
    n = 0
    for n, (x, y) in enumerate(zip_longest_marked(a, b)):
        if x != y:
            if x is MISSING or y is MISSING:
                return f"record {n}: one side ends ({(x if y is MISSING else y)['key']!r} has no counterpart)"
            return f"record {n} ({x.get('key')!r} against {y.get('key')!r}) differs"
    return None


MISSING = object()


def zip_longest_marked(a, b):
    a, b = iter(a), iter(b)
    while True:
        x, y = next(a, MISSING), next(b, MISSING)
        if x is MISSING and y is MISSING:
            return
        yield x, y


def change_set_difference(found, made):
    """found and made: [(key, change)] in key order. None when the same, else
    the first few differences in words."""
    found, made = list(found), list(made)
    if found == made:
        return None
    extra = sorted(set(found) - set(made))[:3]
    missing = sorted(set(made) - set(found))[:3]
    return (f"{len(found):,} changes found, {len(made):,} made; found and not made: {extra}; "
            f"made and not found: {missing}")


def jsonl_records(s3, files):
    """The records of dataset `files` (JSON Lines, gzip or not, listed in key
    order), one file in memory at a time."""
    for f in files:
        bucket, key = f["location"][len("s3://"):].split("/", 1)
        body = s3.get_object(Bucket=bucket, Key=key)["Body"].read()
        if key.endswith(".gz"):
            body = gzip.decompress(body)
        for line in body.splitlines():
            if line:
                yield json.loads(line)


def manifest(s3, prefix):
    return json.loads(s3.get_object(Bucket=BUCKET, Key=f"{prefix}manifest.json")["Body"].read())


def start_minio(binary, tmp, credentials):
    """A MinIO of its own (the section's output): (process, url, boto3 client)."""
    import boto3
    from botocore.config import Config
    port = free_port()
    data = tempfile.mkdtemp(prefix="minio-", dir=tmp)
    env = dict(os.environ, MINIO_ROOT_USER=credentials[0], MINIO_ROOT_PASSWORD=credentials[1],
               MINIO_BROWSER="off", MINIO_CI_CD="1")
    proc = subprocess.Popen([binary, "server", "--quiet", "--address", f"127.0.0.1:{port}", data], env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=tmp)
    url = f"http://127.0.0.1:{port}"
    s3 = boto3.client("s3", endpoint_url=url, region_name="us-east-1", aws_access_key_id=credentials[0],
                      aws_secret_access_key=credentials[1], config=Config(s3={"addressing_style": "path"}))
    wait_until(lambda: s3.list_buckets() is not None, "minio")
    s3.create_bucket(Bucket=BUCKET)
    return proc, url, s3


def fetch(url):
    with urllib.request.urlopen(url, timeout=600) as r:
        return r.read()


def disk_needed(objects):
    """Bytes of MinIO's disk a row of `objects` needs at its peak."""
    return objects * RECORD_BYTES * DATASETS_AT_ONCE * 11 // 10


def measure(bench, args, sizes):
    """One row per size in `sizes`: full scan, change, incremental scan, full
    scan of the changed bucket, compared."""
    import shutil
    need, free = disk_needed(max(sizes)), shutil.disk_usage(bench.tmp).free
    if need > free:
        raise RuntimeError(f"the incremental section's {max(sizes):,} objects need about {need / 2**30:.1f} GiB "
                           f"of disk under {bench.tmp} for MinIO's datasets; {free / 2**30:.1f} GiB are free "
                           "(TMPDIR moves it; --incremental-objects chooses smaller sizes)")
    minio, minio_url, s3 = start_minio(args.minio, bench.tmp, CREDENTIALS)
    rows = []
    try:
        for n in sizes:
            rows.append(measure_one(bench, args, n, minio_url, s3))
    finally:
        minio.kill()
        minio.wait()
    return {"rows": rows, "limits": LIMITS, "share": CHANGE_SHARE, "seed": CHANGE_SEED,
            "latency_us": args.latency_us, "concurrency": CONCURRENCY,
            "build": os.path.basename(os.path.normpath(args.bin_dir))}


def measure_one(bench, args, n, minio_url, s3):
    worker = bench.binary("bucketscan-worker")
    synthetic = bench.binary("synthetic-s3")
    changed = ["--change-share", str(CHANGE_SHARE), "--change-seed", str(CHANGE_SEED)]

    def scan(ep, prefix, *extra):
        argv = [worker, "scan", "--endpoint", ep.url, "--path-style", "--bucket", "synthetic",
                "--layout", "dataset", "-o", f"s3://{BUCKET}/{n}/{prefix}", "--concurrency", str(CONCURRENCY),
                "--metadata-source", "head", *extra]
        before = ep.stats()["heads"]
        wall, cpu, rss, _, stderr = run_client(argv, env=bench.env, timeout=7200)
        said = [line for line in stderr.strip().splitlines() if line.strip()]
        return {"wall_s": wall, "cpu_s": cpu, "rss_kb": rss, "heads": ep.stats()["heads"] - before,
                "summary": " / ".join(said[-2:])}

    log(f"incremental: {n:,} objects, full scan")
    ep = Endpoint(synthetic, n, args.latency_us, forward=minio_url)
    try:
        full = scan(ep, "full/")
    finally:
        ep.stop()
    log(f"    {full['wall_s']:.1f} s, {full['heads']:,} HEADs")
    # The changed bucket's changes are modified the second after its server
    # started: later than the full scan's start by the store's clock.
    time.sleep(1)
    ep = Endpoint(synthetic, n, args.latency_us, forward=minio_url, model=changed)
    try:
        log(f"incremental: {n:,} objects, {CHANGE_SHARE * 100:g} % changed, incremental scan")
        inc = scan(ep, "inc/", "--baseline", f"s3://{BUCKET}/{n}/full/manifest.json")
        log(f"    {inc['wall_s']:.1f} s, {inc['heads']:,} HEADs: {inc['summary']}")
        made = [(c["key"], c["change"]) for c in map(json.loads, fetch(ep.url + "/_changes").splitlines())]
        # The baseline is read; its disk is the full scan's to come.
        delete_prefix(s3, f"{n}/full/")
        log(f"incremental: {n:,} objects, full scan of the changed bucket")
        full2 = scan(ep, "full2/")
        log(f"    {full2['wall_s']:.1f} s, {full2['heads']:,} HEADs")
    finally:
        ep.stop()
    inc_manifest = manifest(s3, f"{n}/inc/")
    full2_manifest = manifest(s3, f"{n}/full2/")
    records_diff = first_difference(jsonl_records(s3, inc_manifest["files"]),
                                    jsonl_records(s3, full2_manifest["files"]))
    summary = inc_manifest.get("incremental") or {}
    found = [(r["key"], r["change"]) for r in jsonl_records(s3, summary.get("change_files", []))]
    changes_diff = change_set_difference(found, made)
    row = {
        "objects": n,
        "full": full,
        "incremental": inc,
        "full_changed": full2,
        "changes_made": len(made),
        "counts": summary.get("counts"),
        "reused_records": summary.get("reused_records"),
        "detail": summary.get("detail"),
        "baseline_bytes_read": summary.get("baseline_bytes_read"),
        "heads_share": inc["heads"] / max(1, full["heads"]),
        "wall_ratio": inc["wall_s"] / full["wall_s"],
        "wall_ratio_changed": inc["wall_s"] / full2["wall_s"],
        "records_equal": records_diff is None,
        "records_diff": records_diff,
        "changes_exact": changes_diff is None,
        "changes_diff": changes_diff,
    }
    row["claims"] = judge(row)
    for claim, met in row["claims"]:
        log(f"    {'met   ' if met else 'MISSED'} {claim}")
    for what in ("records_diff", "changes_diff"):
        if row[what]:
            log(f"    {what}: {row[what]}")
    delete_prefix(s3, f"{n}/")
    return row


def delete_prefix(s3, prefix):
    """Free the section's disk (a 10^7-object dataset is a few GB)."""
    paginator = s3.get_paginator("list_objects_v2")
    for page in paginator.paginate(Bucket=BUCKET, Prefix=prefix):
        keys = [{"Key": o["Key"]} for o in page.get("Contents", [])]
        if keys:
            s3.delete_objects(Bucket=BUCKET, Delete={"Objects": keys})


def render(section):
    """The section's Markdown lines (its '## ' heading first)."""
    if not section or not section.get("rows"):
        return []
    lines = [
        HEADING,
        "",
        f"Measured {section['date']} (load average {section['load']} on a machine shared with other builds "
        f"and tests: wall times are of that machine, the ratios of one run; binaries of the "
        f"`{section.get('build', 'release')}` build). synthetic-s3, "
        f"{section['latency_us']} µs per request, one `bucketscan-worker scan` process with "
        f"{section['concurrency']} HEADs in flight, datasets (JSON Lines) to a MinIO behind `--forward`. A full "
        f"scan, then the bucket changed by {section['share'] * 100:g} % (`--change-share {section['share']} "
        f"--change-seed {section['seed']}`: added, deleted, content rewritten, metadata replaced in equal "
        "parts), an incremental scan against the full one (`--baseline`), and a full scan of the changed bucket "
        "it is compared with, record by record; its change set is compared with synthetic-s3's own list of the "
        "changes (`/_changes`). HEADs are synthetic-s3's count. Wall time is the whole process, store check "
        "(1.1 s), LIST, baseline reads and writing the result and change set included.",
        "",
        "| objects | full scan | HEADs | incremental scan | HEADs | HEADs, of the full scan's | wall time, of the "
        "full scan's | of the changed bucket's full scan | baseline read | result = full scan | change set "
        "exact | claims met |",
        "| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- | --- | ---: |",
    ]
    for r in section["rows"]:
        met = sum(1 for _, m in r["claims"] if m)
        lines.append(
            f"| {r['objects']:,} | {r['full']['wall_s']:.1f} s | {r['full']['heads']:,} | "
            f"{r['incremental']['wall_s']:.1f} s | {r['incremental']['heads']:,} | {r['heads_share'] * 100:.2f} % | "
            f"{r['wall_ratio']:.3f}x | {r['wall_ratio_changed']:.3f}x | "
            f"{(r['baseline_bytes_read'] or 0) / 2**20:,.0f} MiB | {'yes' if r['records_equal'] else 'NO'} | "
            f"{'yes' if r['changes_exact'] else 'NO'} | {met}/{len(r['claims'])} |")
    lines += ["", "| objects | claim | met |", "| ---: | --- | --- |"]
    for r in section["rows"]:
        for claim, met in r["claims"]:
            lines.append(f"| {r['objects']:,} | {claim} | {'met' if met else 'MISSED'} |")
    problems = [(r["objects"], r[k]) for r in section["rows"] for k in ("records_diff", "changes_diff") if r[k]]
    for n, text in problems:
        lines += ["", f"{n:,} objects: {text}"]
    return lines
