#!/usr/bin/env python3
"""`--metadata-source head` against `auto` on a real MinIO (not part of
`just bench`: it needs scripts/with-test-servers.sh's MinIO).

    scripts/with-test-servers.sh python3 bench/metadata_source.py WORKER_BINARY [OBJECTS]

Seeds OBJECTS objects (default 5,000; half with two metadata headers) over
16 prefixes, then scans them three times in each mode, alternating, and
prints each run's wall time and the worker's summary line (HEADs sent,
records taken from the listing)."""

import concurrent.futures
import os
import subprocess
import sys
import time

import boto3


def main():
    worker = sys.argv[1]
    n = int(sys.argv[2]) if len(sys.argv) > 2 else 5000
    ep = os.environ["BUCKETSCAN_TEST_MINIO_ENDPOINT"]
    ak = os.environ["BUCKETSCAN_TEST_MINIO_ACCESS_KEY"]
    sk = os.environ["BUCKETSCAN_TEST_MINIO_SECRET_KEY"]
    s3 = boto3.client("s3", endpoint_url=ep, aws_access_key_id=ak, aws_secret_access_key=sk,
                      region_name="us-east-1")
    s3.create_bucket(Bucket="bench-metadata-source")

    def put(i):
        meta = {"team": f"t{i % 7}", "id": str(i)} if i % 2 == 0 else {}
        s3.put_object(Bucket="bench-metadata-source", Key=f"d{i % 16:x}/obj-{i:06d}",
                      Body=b"x" * (i % 100), Metadata=meta)

    with concurrent.futures.ThreadPoolExecutor(32) as pool:
        list(pool.map(put, range(n)))
    env = dict(os.environ, AWS_ACCESS_KEY_ID=ak, AWS_SECRET_ACCESS_KEY=sk, AWS_REGION="us-east-1")
    for round_ in range(3):
        for mode in ["head", "auto"]:
            started = time.monotonic()
            out = subprocess.run(
                [worker, "scan", "--bucket", "bench-metadata-source", "--endpoint", ep, "--path-style",
                 "--quiet", "-o", "/dev/null", "--metadata-source", mode, "--concurrency", "64",
                 "--target-shards", "16"],
                env=env, capture_output=True, text=True, check=True)
            wall = time.monotonic() - started
            print(f"round {round_} {mode}: wall {wall:.2f} s: {out.stderr.strip().splitlines()[-1]}", flush=True)


if __name__ == "__main__":
    main()
