#!/usr/bin/env python3
"""The end-to-end figure of the e2e scan, as JSON for BENCHMARKS.md.

    timeline.py SCAN.json EVENTS.json OBJECTS RAW_HEAD_PER_S[,RAW_HEAD_PER_S...] CLUSTER SOURCE [SAMPLES.jsonl]

SCAN.json is `kubectl get bucketscan NAME -o json`, EVENTS.json `kubectl get
events -o json` of its namespace. The scan's wall time runs from its status's
startTime to completionTime; its own events (Planned, Merging, Complete)
split it into planning, scanning and merging (second resolution, like every
Kubernetes timestamp).

SAMPLES.jsonl (e2e/sample.py) adds the timeline inside the scanning phase:
when the first HEAD reached the store, how long the rate took to climb to
its steady level, the steady and peak HEAD rates, the tail (the last 5 % of
the HEADs), and the CPU each component of the machine used while the store
was being HEADed: where the cluster loses against one process.
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
        # The raw rate measured before and after the scan (RAW is "A,B"):
        # the machine's speed drifts (1.4x between runs of one evening), and
        # their mean is what the scan ran beside.
        "raw_head_per_s": sum(runs := [float(r) for r in raw.split(",")]) / len(runs),
        "raw_head_per_s_runs": runs,
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
    if len(sys.argv) > 7:
        with open(sys.argv[7]) as f:
            samples = [json.loads(line) for line in f if line.strip()]
        figure["timeline"] = timeline(samples, start.timestamp())
    print(json.dumps(figure))


# Process names (comm, 15 characters at most) by the component they are.
COMPONENTS = [
    ("workers", ("bucketscan-work",)),
    ("store (synthetic-s3)", ("synthetic-s3",)),
    ("results store (MinIO, versitygw)", ("minio", "versitygw")),
    ("operator", ("bucketscan-oper",)),
    ("redis", ("redis-server",)),
    ("kube-apiserver + etcd", ("kube-apiserver", "etcd")),
    ("kubelet + containerd", ("kubelet", "containerd", "containerd-shim", "runc")),
]


def component(name):
    for label, names in COMPONENTS:
        if name in names or any(name.startswith(n) for n in names):
            return label
    return "other"


def used_by_process(samples):
    """{pid: (name, CPU seconds)} each process used between the first and the
    last of `samples` in which it was seen (one that started meanwhile from
    zero, one that ended keeps what it used until its last sample)."""
    first, last = {}, {}
    for i, sample in enumerate(samples):
        for pid, (name, secs) in sample["cpu"].items():
            first.setdefault(pid, 0.0 if i > 0 else secs)
            last[pid] = (name, secs)
    return {pid: (name, secs - first[pid]) for pid, (name, secs) in last.items()}


def timeline(samples, scan_start):
    """The scanning phase seen from the store: see the module doc."""
    samples = [s for s in samples if s.get("stats")]
    if len(samples) < 3:
        return {"note": "fewer than 3 samples"}
    base = samples[0]["stats"]["heads"]
    total = samples[-1]["stats"]["heads"] - base
    if total <= 0:
        return {"note": "no HEAD was served while sampling"}
    heads = [(s["t"], s["stats"]["heads"] - base) for s in samples]
    first = next(t for t, h in heads if h > 0)
    last = next(t for t, h in heads if h >= total)
    tail_from = next(t for t, h in heads if h >= 0.95 * total)
    rates = [(t1, (h1 - h0) / (t1 - t0)) for (t0, h0), (t1, h1) in zip(heads, heads[1:]) if first <= t1 <= last]
    ordered = sorted(r for _, r in rates)
    steady = ordered[len(ordered) // 2] if ordered else 0.0
    climbed = next((t for t, r in rates if r >= 0.9 * steady), first)
    during = [s for s in samples if first <= s["t"] <= last] or samples
    cpu = {}
    for name, used in used_by_process(during).values():
        if used > 0:
            cpu[component(name)] = cpu.get(component(name), 0.0) + used
    seconds = max(1e-9, during[-1]["t"] - during[0]["t"])
    return {
        "first_head_after_start_s": round(first - scan_start, 1),
        "heading_s": round(last - first, 1),
        "climb_to_steady_s": round(climbed - first, 1),
        "steady_head_per_s": round(steady),
        "peak_head_per_s": round(ordered[-1]) if ordered else 0,
        "tail_last_5pct_s": round(last - tail_from, 1),
        "cores_busy": round(sum(cpu.values()) / seconds, 2),
        # Everything the machine ran, processes that ended meanwhile (other
        # builds, short-lived tools) included.
        "machine_cores_busy": round((during[-1].get("machine", 0.0) - during[0].get("machine", 0.0)) / seconds, 2),
        "cpu_cores_by_component": {k: round(v / seconds, 2) for k, v in sorted(cpu.items(), key=lambda kv: -kv[1])},
        "head_per_s_each_second": [round(r) for _, r in rates[::2]],
    }


if __name__ == "__main__":
    main()
