#!/usr/bin/env python3
"""The end-to-end figure of the e2e scan, as JSON for BENCHMARKS.md.

    timeline.py SCAN.json EVENTS.json OBJECTS RAW_HEAD_PER_S CLUSTER SOURCE

SCAN.json is `kubectl get bucketscan NAME -o json`, EVENTS.json `kubectl get
events -o json` of its namespace. The scan's wall time runs from its status's
startTime to completionTime; its own events (Planned, Merging, Complete)
split it into planning, scanning and merging (second resolution, like every
Kubernetes timestamp).
"""
import json
import sys
from datetime import datetime


def when(stamp):
    return datetime.fromisoformat(stamp.replace("Z", "+00:00"))


def main():
    scan_path, events_path, objects, raw, cluster, source = sys.argv[1:7]
    with open(scan_path) as f:
        scan = json.load(f)
    with open(events_path) as f:
        events = json.load(f)["items"]
    uid = scan["metadata"]["uid"]
    start, end = when(scan["status"]["startTime"]), when(scan["status"]["completionTime"])
    marks = {}
    for event in events:
        if event["involvedObject"].get("uid") == uid and event["reason"] in ("Planned", "Merging", "Complete"):
            marks[event["reason"]] = when(event.get("firstTimestamp") or event["eventTime"])
    figure = {
        "objects": int(objects),
        "seconds": (end - start).total_seconds(),
        "raw_head_per_s": float(raw),
        "workers": scan["spec"]["workers"].get("replicas"),
        "concurrency_per_worker": scan["spec"]["workers"].get("concurrency"),
        "cluster": cluster,
        "source": source,
    }
    if len(marks) == 3:
        figure["phases_seconds"] = {
            "planning": (marks["Planned"] - start).total_seconds(),
            "scanning": (marks["Merging"] - marks["Planned"]).total_seconds(),
            "merging": (marks["Complete"] - marks["Merging"]).total_seconds(),
        }
    print(json.dumps(figure))


if __name__ == "__main__":
    main()
