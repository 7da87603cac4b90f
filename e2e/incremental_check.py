#!/usr/bin/env python3
"""The e2e cluster's incremental figure (issue 30, item 7), as JSON for
BENCHMARKS.md: an incremental scan in the cluster judged against a full scan
of the same changed bucket, record by record, and its change set against the
changes the store made.

    incremental_check.py ENDPOINT FULL.json INC.json FULL2_MANIFEST CHANGES.jsonl \\
        FULL_HEADS STATS_BEFORE STATS_AFTER CLUSTER

FULL.json and INC.json are `kubectl get bucketscan -o json` of the full scan
(the baseline) and the incremental one; FULL2_MANIFEST the s3:// location of
the changed bucket's full scan's manifest; CHANGES.jsonl synthetic-s3's
`/_changes`; FULL_HEADS the HEADs the store served the full scan, and
STATS_BEFORE/AFTER its `/_stats` around the incremental scan (the HEADs it
sent). Credentials come from AWS_ACCESS_KEY_ID and
AWS_SECRET_ACCESS_KEY. The comparisons are bench/harness/incremental.py's, so the
cluster's row is judged as the single-process rows are.
"""
import json
import os
import sys

import boto3
from botocore.config import Config

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "bench"))
from harness import incremental  # noqa: E402  (bench/harness/incremental.py: its claims, comparisons and reader)
from timeline import when  # noqa: E402  (beside this file)


def wall(scan):
    status = scan["status"]
    return (when(status["completionTime"]) - when(status["startTime"])).total_seconds()


def split(location):
    bucket, key = location[len("s3://"):].split("/", 1)
    return bucket, key


def read_json(s3, location):
    bucket, key = split(location)
    return json.loads(s3.get_object(Bucket=bucket, Key=key)["Body"].read())


def result_files(s3, scan):
    """A cluster scan's result files, from the manifest its status names."""
    output = scan["status"]["output"]
    manifest = read_json(s3, output.rsplit("/", 1)[0] + "/manifest.json")
    return manifest, manifest.get("files") or [{"location": output}]


def main():
    endpoint, full_path, inc_path, full2_manifest, changes_path, full_heads, before, after, cluster = sys.argv[1:10]
    full_heads = int(full_heads)
    s3 = boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1",
                      config=Config(s3={"addressing_style": "path"}))
    with open(full_path) as f:
        full = json.load(f)
    with open(inc_path) as f:
        inc = json.load(f)
    with open(changes_path) as f:
        made = [(c["key"], c["change"]) for c in map(json.loads, f) if c]
    heads = json.loads(after)["heads"] - json.loads(before)["heads"]
    inc_manifest, inc_files = result_files(s3, inc)
    full2 = read_json(s3, full2_manifest)
    records_diff = incremental.first_difference(incremental.jsonl_records(s3, inc_files),
                                                incremental.jsonl_records(s3, full2["files"]))
    summary = inc_manifest.get("incremental") or {}
    found = [(r["key"], r["change"]) for r in incremental.jsonl_records(s3, summary.get("change_files", []))]
    changes_diff = incremental.change_set_difference(found, made)
    objects = full2["counts"]["objects"]
    row = {
        "objects": objects,
        "cluster": cluster,
        "full": {"wall_s": wall(full), "heads": full_heads},
        "incremental": {"wall_s": wall(inc), "heads": heads},
        "changes_made": len(made),
        "counts": summary.get("counts"),
        "reused_records": summary.get("reused_records"),
        "baseline_bytes_read": summary.get("baseline_bytes_read"),
        "heads_share": heads / max(1, full_heads),
        "wall_ratio": wall(inc) / wall(full),
        "records_equal": records_diff is None,
        "records_diff": records_diff,
        "changes_exact": changes_diff is None,
        "changes_diff": changes_diff,
    }
    row["claims"] = incremental.judge(row)
    print(json.dumps(row))


if __name__ == "__main__":
    main()
