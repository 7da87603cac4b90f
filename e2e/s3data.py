#!/usr/bin/env python3
"""Seed the e2e bucket and check a scan's merged result against it.

    s3data.py seed   ENDPOINT BUCKET COUNT EXPECTED.json
    s3data.py verify ENDPOINT BUCKET KEY EXPECTED.json [--head N]
    s3data.py manifest ENDPOINT BUCKET KEY

Credentials come from AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY. The seeded
set mixes layouts on purpose: one skewed prefix holding most objects (so
planning by prefix alone cannot balance the work), nested team/project
prefixes, objects at the root, and keys with spaces, unicode and URL-special
characters; a third of the objects have no user metadata, the others one to
three entries. `verify` fails unless every seeded object is in the result
exactly once, with its size and metadata, and nothing else is.
"""
import gzip
import json
import os
import sys
from concurrent.futures import ProcessPoolExecutor, ThreadPoolExecutor

import boto3
from botocore.config import Config

ODD = ["with space", "plus+sign", "percent%20literal", "équipe/données", "日本語/ファイル", "emoji-🙂",
       "amp&eq=q?hash#", "quote'double\"", "tilde~star*", "brackets[1](2){3}", " leading-space",
       "comma,semi;colon:", "dollar$at@caret^", "back\\slash"]
TEAMS = ["genomics", "imaging", "finance", "legal"]


def client(endpoint):
    return boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1",
                        config=Config(s3={"addressing_style": "path"}, max_pool_connections=32,
                                      retries={"max_attempts": 10, "mode": "adaptive"}))


def key_of(i, count):
    """The i-th key: 55 % skewed prefix, 25 % nested, a few odd, the rest at the root."""
    share = i / count
    if share < 0.55:
        return f"skewed/2026/11/22/part-{i:07d}.parquet"
    if share < 0.80:
        team = TEAMS[i % len(TEAMS)]
        return f"teams/{team}/project-{i % 7}/run-{i % 13:02d}/file-{i:07d}.bin"
    if i % 20 == 0:
        return f"odd/{ODD[(i // 20) % len(ODD)]}-{i:07d}"
    return f"root-{i:07d}.txt"


def metadata_of(i):
    if i % 3 == 0:
        return {}
    meta = {"team": TEAMS[i % len(TEAMS)], "sample-id": f"S{i:07d}"}
    if i % 3 == 2:
        meta["note"] = f"batch {i % 11} & more=+/ text"
    return meta


def seed(endpoint, bucket, count, expected_path):
    s3 = client(endpoint)
    for b in (bucket, bucket + "-results"):
        try:
            s3.create_bucket(Bucket=b)
        except s3.exceptions.BucketAlreadyOwnedByYou:
            pass
    expected = {}
    for i in range(count):
        expected[key_of(i, count)] = {"size": i % 257, "metadata": metadata_of(i)}
    # boto3 is CPU-bound well before the server: one process per core, each
    # with its own client and threads.
    items = list(expected.items())
    procs = os.cpu_count() or 2
    chunks = [(endpoint, bucket, items[i::procs]) for i in range(procs)]
    with ProcessPoolExecutor(procs) as pool:
        list(pool.map(put_all, chunks))
    with open(expected_path, "w") as f:
        json.dump(expected, f)
    print(f"seeded s3://{bucket}: {len(expected)} objects "
          f"({sum(1 for o in expected.values() if o['metadata'])} with metadata)")


def put_all(chunk):
    endpoint, bucket, items = chunk
    s3 = client(endpoint)

    def put(item):
        key, obj = item
        s3.put_object(Bucket=bucket, Key=key, Body=b"b" * obj["size"], Metadata=obj["metadata"])

    with ThreadPoolExecutor(16) as threads:
        list(threads.map(put, items))


def read_object(s3, bucket, key):
    body = s3.get_object(Bucket=bucket, Key=key)["Body"].read()
    return gzip.decompress(body) if key.endswith(".gz") else body


def verify(endpoint, bucket, key, expected_path, head=0):
    s3 = client(endpoint)
    with open(expected_path) as f:
        expected = json.load(f)
    lines = read_object(s3, bucket, key).decode().splitlines()
    seen, problems = {}, []
    for line in lines:
        record = json.loads(line)
        k = record["key"]
        if k in seen:
            problems.append(f"twice: {k!r}")
        seen[k] = record
    for k, want in expected.items():
        got = seen.get(k)
        if got is None:
            problems.append(f"missing: {k!r}")
        elif got["status"] != "ok" or got["size"] != want["size"] or got.get("metadata", {}) != want["metadata"]:
            problems.append(f"wrong: {k!r}: got {got}, want {want}")
    problems += [f"not seeded: {k!r}" for k in seen if k not in expected]
    if problems:
        print(f"FAIL: s3://{bucket}/{key}: {len(problems)} problems, first: " + "; ".join(problems[:5]))
        sys.exit(1)
    print(f"ok: s3://{bucket}/{key} has all {len(expected)} objects exactly once, sizes and metadata equal")
    for line in lines[:head]:
        print("  " + line)


def manifest(endpoint, bucket, key):
    print(read_object(client(endpoint), bucket, key).decode())


if __name__ == "__main__":
    cmd, args = sys.argv[1], sys.argv[2:]
    if cmd == "seed":
        seed(args[0], args[1], int(args[2]), args[3])
    elif cmd == "verify":
        verify(args[0], args[1], args[2], args[3], int(args[5]) if len(args) > 5 and args[4] == "--head" else 0)
    elif cmd == "manifest":
        manifest(*args)
    else:
        sys.exit(__doc__)
