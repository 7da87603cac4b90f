#!/usr/bin/env python3
"""Peer: naive boto3, as the case study's first version: LIST the bucket,
then HEAD every object one at a time in one process. Prints one JSON line:
{"peer", "objects", "with_metadata", "seconds"}.

Usage: boto3_naive.py ENDPOINT BUCKET
"""
import json
import sys
import time

import boto3
from botocore.config import Config


def main():
    endpoint, bucket = sys.argv[1], sys.argv[2]
    s3 = boto3.client(
        "s3",
        endpoint_url=endpoint,
        region_name="us-east-1",
        config=Config(s3={"addressing_style": "path"}, retries={"max_attempts": 10, "mode": "standard"}),
    )
    started = time.monotonic()
    objects = with_metadata = 0
    for page in s3.get_paginator("list_objects_v2").paginate(Bucket=bucket):
        for obj in page.get("Contents", []):
            head = s3.head_object(Bucket=bucket, Key=obj["Key"])
            objects += 1
            with_metadata += bool(head.get("Metadata"))
    print(json.dumps({"peer": "boto3-naive", "objects": objects, "with_metadata": with_metadata,
                      "seconds": time.monotonic() - started}))


if __name__ == "__main__":
    main()
