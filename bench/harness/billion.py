"""The 10^9 section (issue 13, item 7): each layout of 10^9 generated keys
planned by the real `bucketscan-worker plan`, every shard completed through
the queue (`complete-shards`), the merge planned; Redis memory at each step,
the claims against the issue's limits, and the table.

May import: common, processes, bench.
"""
import json
import os
import subprocess

from .common import BUCKET, log
from .processes import Endpoint, free_port, redis_commands, redis_memory, run_client, wait_until


# The 10^9 figures (issue 13, item 7): keyspaces, shard target, LIST budget,
# and the limits each figure is judged against.
BILLION = 1_000_000_000
BILLION_LAYOUTS = ["flat", "nested", "skewed"]
BILLION_SHARDS = 10_000
BILLION_LIST_BUDGET = 15_000
BUCKET_CHECKS = 2  # `plan` lists one key of the source and of the output bucket first
BILLION_LIMITS = {"plan_s": 30.0, "lists": 15_000, "redis_done_bytes": 1 << 30, "operator_rss_kb": 256 * 1024,
                  "parts_per_upload": 10_000}
BILLION_HEADING = "## 10^9 keys: planning, every shard completed, the merge plan (issue 13, item 7)"


def measure(bench, record_bytes):
    """The 10^9-key figures: plan each layout into >= BILLION_SHARDS shards
    with the real `bucketscan-worker plan`, complete every shard through the
    queue (complete-shards), plan the merge; Redis memory at each step."""
    rows = []
    # The smoke run plans one keyspace; the full run all three.
    for layout in BILLION_LAYOUTS if bench.args.mode == "full" else BILLION_LAYOUTS[:1]:
        log(f"10^9 keys, {layout}: planning")
        rows.append(measure_one(bench, layout, record_bytes))
        r = rows[-1]
        log(f"    {r['shards']:,} shards, {r['lists']:,} LISTs in {r['plan_s']:.1f} s; Redis "
            f"{r['redis_planned_bytes'] / 2**20:.1f} MiB planned, {r['redis_done_bytes'] / 2**20:.1f} MiB done")
    return rows


def measure_one(bench, layout, record_bytes):
    port = free_port()
    redis = subprocess.Popen(["redis-server", "--bind", "127.0.0.1", "--port", str(port), "--save", "",
                              "--appendonly", "no", "--dir", bench.tmp],
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"redis://127.0.0.1:{port}"
    ep = Endpoint(bench.binary("synthetic-s3"), BILLION, bench.args.latency_us, layout=layout)
    scan = f"billion-{layout}"
    try:
        wait_until(lambda: redis_commands(port) is not None, "redis-server")
        baseline = redis_memory(port)
        # The output bucket is only checked while planning (nothing is
        # written): the source bucket itself will do.
        plan = run_client([bench.binary("bucketscan-worker"), "plan", "--redis", url, "--scan", scan,
                           "--endpoint", ep.url, "--path-style", "--bucket", BUCKET,
                           "--output", f"s3://{BUCKET}/billion/", "--layout", "dataset",
                           "--target-shards", str(BILLION_SHARDS),
                           "--plan-list-budget", str(BILLION_LIST_BUDGET)], env=bench.env)
        lists = ep.stats()["lists"]
        planned = redis_memory(port)
        out = os.path.join(bench.tmp, "complete.json")
        with open(out, "wb") as stdout:
            complete = run_client([bench.binary("complete-shards"), "--redis", url, "--scan", scan,
                                   "--objects", str(BILLION), "--layout", layout,
                                   "--record-bytes", str(record_bytes)], env=bench.env, stdout=stdout,
                                  timeout=3600)
        done = redis_memory(port)
        completed = json.loads(open(out).read())
    finally:
        ep.stop()
        redis.kill()
        redis.wait()
    return billion_row(layout, plan, lists, baseline, planned, done, complete, completed)


def billion_row(layout, plan, lists, baseline, planned, done, complete, completed):
    """One row of the 10^9 table. plan and complete are run_client's
    (wall, CPU, maxrss KB, tree RSS KB, stderr); lists: LISTs the endpoint
    served (the planner's and the two bucket checks); baseline, planned, done:
    Redis INFO memory before, after planning, after every shard completed;
    completed: complete-shards' JSON."""
    merge = completed["merge"]
    return {
        "layout": layout,
        "shards": completed["shards"],
        # The planner's own: `plan` also checks both buckets with a one-key LIST each.
        "lists": lists - BUCKET_CHECKS,
        "lists_served": lists,
        "plan_s": plan[0],
        "plan_rss_mb": plan[2] / 1024,
        "redis_empty_bytes": baseline["used_memory"],
        "redis_planned_bytes": planned["used_memory"],
        "redis_done_bytes": done["used_memory"],
        "redis_peak_bytes": done["used_memory_peak"],
        "parts": completed["parts"],
        "objects": completed["objects"],
        "complete_s": completed["complete_s"],
        "merge_redis_read_s": merge["redis_read_s"],
        "merge_plan_s": merge["plan_s"],
        "dataset_files": merge["dataset_files"],
        "dataset_max_parts": merge["dataset_max_parts_per_upload"],
        "file_size": merge["file_size"],
        "result_bytes": merge["bytes"],
        "single": merge["single"],
        "single_parts": merge["single_parts_per_upload"],
        "complete_rss_mb": complete[2] / 1024,
    }


def billion_claims(rows, operator=None):
    """Each claim of issue 13, item 7 against its limit: (claim, measured text, met)."""
    lim = BILLION_LIMITS
    out = []
    for r in rows:
        out.append((f"{r['layout']}: >= {BILLION_SHARDS:,} shards", f"{r['shards']:,}", r["shards"] >= BILLION_SHARDS))
        out.append((f"{r['layout']}: planning <= {lim['plan_s']:.0f} s", f"{r['plan_s']:.1f} s",
                    r["plan_s"] <= lim["plan_s"]))
        out.append((f"{r['layout']}: LISTs <= {lim['lists']:,}", f"{r['lists']:,}", r["lists"] <= lim["lists"]))
        out.append((f"{r['layout']}: Redis with every shard done <= 1 GiB",
                    f"{r['redis_done_bytes'] / 2**20:.1f} MiB", r["redis_done_bytes"] <= lim["redis_done_bytes"]))
        worst = max(r["dataset_max_parts"], r["single_parts"])
        out.append((f"{r['layout']}: merge plan <= {lim['parts_per_upload']:,} parts per upload",
                    f"{worst:,}", worst <= lim["parts_per_upload"]))
    if operator:
        out.append(("operator peak RSS while it tracks the scan <= 256 MiB",
                    f"{operator['rss_kb'] / 1024:.0f} MiB", operator["rss_kb"] <= lim["operator_rss_kb"]))
    else:
        out.append(("operator peak RSS while it tracks the scan <= 256 MiB", "not measured in this run", None))
    return out


def render(billion):
    rows, operator = billion["rows"], billion.get("operator")
    lines = [
        BILLION_HEADING,
        "",
        f"synthetic-s3 serving 10^9 generated keys per layout ({billion['latency_us']} µs a LIST, one thread; "
        "flat: hex keys over the 64-bit space; nested: `DDDD/DDD/NNNNNNNNNNNN`; skewed: 80 % under `hot/`, the rest "
        f"over 100 prefixes). Planned by the real `bucketscan-worker plan --target-shards {BILLION_SHARDS:,} "
        f"--plan-list-budget {BILLION_LIST_BUDGET:,} --layout dataset` into a fresh redis-server; then "
        "`complete-shards` (bench/src/bin/complete-shards.rs) takes every shard through the queue's real steps, 64 "
        "at a time: take, one part per 50,000 objects (the worker's default) with its stats and counts recorded "
        "as the worker records them, finish; each shard's objects come from its exact range, and the run fails "
        "unless the shards hold all 10^9 keys once. Part sizes are records x "
        f"{billion['record_bytes']:.0f} bytes (the mean JSON Lines record of the largest scale run). Then the "
        "merge's reads from Redis and its plan (`merge_plan`, both layouts), without S3. Redis memory is "
        f"`used_memory`. Measured {billion['date']} (load average before: {billion['load']}).",
        "",
        "| layout | shards | LISTs | plan s | planner peak RSS | Redis empty | Redis planned | Redis every shard done "
        "| parts | complete s | merge reads s | merge plan ms | dataset files (max parts per upload) | single result |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- | --- |",
    ]
    mib = lambda b: f"{b / 2**20:.1f} MiB"  # noqa: E731
    for r in rows:
        lines.append(
            f"| {r['layout']} | {r['shards']:,} | {r['lists']:,} | {r['plan_s']:.1f} | {r['plan_rss_mb']:.0f} MB | "
            f"{mib(r['redis_empty_bytes'])} | {mib(r['redis_planned_bytes'])} | {mib(r['redis_done_bytes'])} | "
            f"{r['parts']:,} | {r['complete_s']:.1f} | {r['merge_redis_read_s']:.2f} | {r['merge_plan_s'] * 1000:.0f} | "
            f"{r['dataset_files']:,} of {r['file_size'] / 2**30:.0f} GiB ({r['dataset_max_parts']:,}) | "
            f"{r['single']}, {r['single_parts']:,} parts per upload |")
    lines += ["", "LISTs are the planner's: the LISTs the endpoint served during `plan` less the two one-key "
                  "checks of the source and output buckets. 'complete s' and 'merge reads s' depend on the build of "
                  "complete-shards that ran (`--complete-shards`, by default the one in `--bin-dir`), and every "
                  "time here depends on the machine's load (above): read time figures as upper bounds.", ""]
    if operator:
        lines += [f"Operator: {operator['text']}", ""]
    lines += ["| claim | measured | met |", "| --- | --- | --- |"]
    for claim, text, met in billion_claims(rows, operator):
        lines.append(f"| {claim} | {text} | {dict([(True, '**met**'), (False, '**missed**'), (None, '–')])[met]} |")
    return lines
