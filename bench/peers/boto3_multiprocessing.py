#!/usr/bin/env python3
"""Peer: boto3 with a multiprocessing pool, as the case study's second
version: the parent lists the bucket, a pool of processes (each with its own
client, made once per process) HEADs the keys in chunks. Prints one JSON
line: {"peer", "objects", "with_metadata", "seconds", "processes"}.

Usage: boto3_multiprocessing.py ENDPOINT BUCKET [PROCESSES]
"""
import json
import multiprocessing
import os
import sys
import time

import boto3
from botocore.config import Config

_client = None
_bucket = None


def _make_client(endpoint):
    return boto3.client(
        "s3",
        endpoint_url=endpoint,
        region_name="us-east-1",
        config=Config(s3={"addressing_style": "path"}, retries={"max_attempts": 10, "mode": "standard"}),
    )


def _init(endpoint, bucket):
    global _client, _bucket
    _client = _make_client(endpoint)
    _bucket = bucket


def _head_chunk(keys):
    with_metadata = 0
    for key in keys:
        with_metadata += bool(_client.head_object(Bucket=_bucket, Key=key).get("Metadata"))
    return len(keys), with_metadata


def main():
    endpoint, bucket = sys.argv[1], sys.argv[2]
    processes = int(sys.argv[3]) if len(sys.argv) > 3 else 2 * (os.cpu_count() or 1)
    started = time.monotonic()
    s3 = _make_client(endpoint)
    keys = [o["Key"] for page in s3.get_paginator("list_objects_v2").paginate(Bucket=bucket)
            for o in page.get("Contents", [])]
    chunks = [keys[i:i + 100] for i in range(0, len(keys), 100)]
    objects = with_metadata = 0
    with multiprocessing.Pool(processes, initializer=_init, initargs=(endpoint, bucket)) as pool:
        for n, m in pool.imap_unordered(_head_chunk, chunks):
            objects += n
            with_metadata += m
    print(json.dumps({"peer": "boto3-multiprocessing", "objects": objects, "with_metadata": with_metadata,
                      "seconds": time.monotonic() - started, "processes": processes}))


if __name__ == "__main__":
    main()
