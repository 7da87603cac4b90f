"""The 10^9 section (issue 13, item 7): each layout of 10^9 generated keys
planned by the real `bucketscan-worker plan`, every shard completed through
the queue (`complete-shards`), the merge planned; Redis memory at each step,
the claims against the issue's limits, and the table. Planning writes to its
output bucket (the store check's canary and store-check.json), so the output
is a versitygw behind synthetic-s3's `--forward` (Bench.start_store), as in
the fleet sections.

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
# `plan` lists one key of the source and of the output bucket first; the
# output's requests go on to the versitygw, so synthetic-s3 counts only the
# source's. (Before the output store, both went to synthetic-s3: 2.)
BUCKET_CHECKS = 1
OUTPUT_BUCKET = "bench-out"
OUTPUT_STORE = "versitygw"
BILLION_LIMITS = {"plan_s": 30.0, "lists": 15_000, "redis_done_bytes": 1 << 30, "operator_rss_kb": 256 * 1024,
                  "parts_per_upload": 10_000}
BILLION_HEADING = "## 10^9 keys: planning, every shard completed, the merge plan (issue 13, item 7)"


def measure(bench, record_bytes, keys=BILLION):
    """The 10^9-key figures: plan each layout into >= BILLION_SHARDS shards
    with the real `bucketscan-worker plan` (its output on a versitygw), complete
    every shard through the queue (complete-shards), plan the merge; Redis
    memory at each step. `keys`: fewer for the harness's small test
    (bench/tests/harness.rs), which runs the same steps."""
    rows = []
    store, store_url, s3 = bench.start_store()
    try:
        # The smoke run plans one keyspace; the full run all three.
        for layout in BILLION_LAYOUTS if bench.args.mode == "full" else BILLION_LAYOUTS[:1]:
            log(f"{keys:,} keys, {layout}: planning")
            rows.append(measure_one(bench, layout, record_bytes, keys, store_url, s3))
            r = rows[-1]
            log(f"    {r['shards']:,} shards, {r['lists']:,} LISTs in {r['plan_s']:.1f} s; Redis "
                f"{r['redis_planned_bytes'] / 2**20:.1f} MiB planned, {r['redis_done_bytes'] / 2**20:.1f} MiB done")
    finally:
        store.kill()
        store.wait()
    return rows


def measure_one(bench, layout, record_bytes, keys, store_url, s3):
    port = free_port()
    redis = subprocess.Popen(["redis-server", "--bind", "127.0.0.1", "--port", str(port), "--save", "",
                              "--appendonly", "no", "--dir", bench.tmp],
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"redis://127.0.0.1:{port}"
    # The output's requests (the bucket checks, the store check, store-check.json)
    # go on to the versitygw; synthetic-s3 counts only the source's LISTs.
    ep = Endpoint(bench.binary("synthetic-s3"), keys, bench.args.latency_us, forward=store_url, layout=layout)
    scan = f"billion-{layout}"
    try:
        wait_until(lambda: redis_commands(port) is not None, "redis-server")
        baseline = redis_memory(port)
        plan = run_client([bench.binary("bucketscan-worker"), "plan", "--redis", url, "--scan", scan,
                           "--endpoint", ep.url, "--path-style", "--bucket", BUCKET,
                           "--output", f"s3://{OUTPUT_BUCKET}/{scan}/", "--layout", "dataset",
                           "--target-shards", str(BILLION_SHARDS),
                           "--plan-list-budget", str(BILLION_LIST_BUDGET)], env=bench.env)
        lists = ep.stats()["lists"]
        planned = redis_memory(port)
        store_check = recorded_store_check(s3, scan)
        out = os.path.join(bench.tmp, "complete.json")
        with open(out, "wb") as stdout:
            complete = run_client([bench.binary("complete-shards"), "--redis", url, "--scan", scan,
                                   "--objects", str(keys), "--layout", layout,
                                   "--record-bytes", str(record_bytes)], env=bench.env, stdout=stdout,
                                  timeout=3600)
        done = redis_memory(port)
        completed = json.loads(open(out).read())
    finally:
        ep.stop()
        redis.kill()
        redis.wait()
    return billion_row(layout, plan, lists, baseline, planned, done, complete, completed, store_check)


def recorded_store_check(s3, scan):
    """The store check `plan` recorded among the scan's parts on the output
    store (store-check.json): its detail. Fails if planning wrote none, so a
    plan that no longer writes its output is seen here, not taken for a
    measurement."""
    found = s3.list_objects_v2(Bucket=OUTPUT_BUCKET, Prefix=f"{scan}/").get("Contents", [])
    keys = [o["Key"] for o in found if o["Key"].endswith("/store-check.json")]
    if len(keys) != 1:
        raise RuntimeError(f"10^9 section: `plan` recorded {len(keys)} store-check.json under "
                           f"s3://{OUTPUT_BUCKET}/{scan}/ (found {[o['Key'] for o in found]})")
    record = json.loads(s3.get_object(Bucket=OUTPUT_BUCKET, Key=keys[0])["Body"].read())
    check = record.get("check") or {}
    return check.get("detail") or f"the store check failed: {record.get('error')}"


def billion_row(layout, plan, lists, baseline, planned, done, complete, completed, store_check=None):
    """One row of the 10^9 table. plan and complete are run_client's
    (wall, CPU, maxrss KB, tree RSS KB, stderr); lists: LISTs synthetic-s3
    served (the planner's and the source bucket's check: the output's go on
    to the versitygw); baseline, planned, done: Redis INFO memory before,
    after planning, after every shard completed; completed: complete-shards'
    JSON; store_check: what the store check planning recorded found."""
    merge = completed["merge"]
    return {
        "layout": layout,
        "shards": completed["shards"],
        # The planner's own: `plan` also checks the source bucket with a one-key LIST.
        "lists": lists - BUCKET_CHECKS,
        "lists_served": lists,
        "store_check": store_check,
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
    # Runs before the output store (results JSONs of then) have no "output_store".
    store, keys = billion.get("output_store"), billion.get("keys", BILLION)
    lines = [
        BILLION_HEADING,
        "",
        f"synthetic-s3 serving 10^9 generated keys per layout ({billion['latency_us']} µs a LIST, one thread; "
        "flat: hex keys over the 64-bit space; nested: `DDDD/DDD/NNNNNNNNNNNN`; skewed: 80 % under `hot/`, the rest "
        f"over 100 prefixes). Planned by the real `bucketscan-worker plan --target-shards {BILLION_SHARDS:,} "
        f"--plan-list-budget {BILLION_LIST_BUDGET:,} --layout dataset` into a fresh redis-server"
        + (f", its output bucket on a {store} behind synthetic-s3's `--forward` (planning writes there: the store "
           "check's canary object and `store-check.json`)" if store else "") + "; then "
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
    if store:
        lists = (f"LISTs are the planner's: the LISTs synthetic-s3 served during `plan` less the one-key check of "
                 f"the source bucket (the output bucket's requests, its check among them, go on to the {store} and "
                 "are not counted). 'plan s' includes the store check planning makes on the output bucket before it "
                 "lists anything (a PUT, a CopyObject over it more than a second later, a HEAD after each: about "
                 "1.1 s of waiting): about 1.1 s more than the plan times of runs without it.")
    else:
        lists = ("LISTs are the planner's: the LISTs the endpoint served during `plan` less the two one-key "
                 "checks of the source and output buckets.")
    lines += ["", lists + " 'complete s' and 'merge reads s' depend on the build of "
                  "complete-shards that ran (`--complete-shards`, by default the one in `--bin-dir`), and every "
                  "time here depends on the machine's load (above): read time figures as upper bounds.", ""]
    if keys != BILLION:
        lines += [f"This run served {keys:,} keys per layout, not 10^9 (`--billion-keys`, the harness's small "
                  "test): its figures are not the 10^9 ones, and the claims below judge them all the same.", ""]
    if operator:
        lines += [f"Operator: {operator['text']}", ""]
    lines += ["| claim | measured | met |", "| --- | --- | --- |"]
    for claim, text, met in billion_claims(rows, operator):
        lines.append(f"| {claim} | {text} | {dict([(True, '**met**'), (False, '**missed**'), (None, '–')])[met]} |")
    return lines
