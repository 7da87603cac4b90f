"""The fleet section: plan + W worker processes + merge through a private
Redis for W in FLEET_WORKERS (Bench.fleet_once), Redis commands per object,
and its table.

May import: common, processes, bench.
"""
from .bench import FLEET_CONCURRENCY
from .common import SIZES, fmt, log, ratio, summarize


FLEET_WORKERS = [1, 2, 4]


def measure(bench):
    """plan + W x run + merge, W in FLEET_WORKERS; Redis commands per object."""
    n = bench.args.objects or SIZES[bench.args.mode]["fleet"]
    store, store_url, s3 = bench.start_store()
    results = {w: [] for w in FLEET_WORKERS}
    try:
        for rep in range(bench.args.runs):
            for w in FLEET_WORKERS:
                results[w].append(bench.fleet_once(n, w, f"s{rep}w{w}", store_url, s3))
                f = results[w][-1]
                log(f"[{rep + 1}/{bench.args.runs}] fleet of {w}: {f['objects_per_s']:.0f} objects/s, "
                    f"{f['redis_per_object']:.4f} Redis commands/object")
    finally:
        store.kill()
        store.wait()
    return {w: summarize(r) for w, r in results.items()}, n


def render(fl):
    """The fleet table (Markdown lines, its '## ' heading first)."""
    base = fl["workers"].get("1") or fl["workers"].get(1)
    lines = [
        "## Fleet: plan, W worker processes, merge (Redis queue)",
        "",
        f"{fl['objects']:,} objects; each `bucketscan-worker run` keeps {FLEET_CONCURRENCY} HEADs in "
        "flight; parts and the merged result go to a versitygw S3 server behind synthetic-s3's `--forward`; a "
        "private redis-server counts commands (`total_commands_processed`, including those inside Lua "
        "scripts) over plan + run + merge. objects/s is over the run phase.",
        "",
        "| workers | objects/s | speed-up | CPU-s per 100k | plan s | merge s | Redis commands | per object |",
        "| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for w, f in fl["workers"].items():
        lines.append(
            f"| {w} | {fmt(f['objects_per_s'])} | {fmt(ratio(f['objects_per_s'], base['objects_per_s']), '{:.2f}x')} | "
            f"{fmt(f['cpu_per_100k'], '{:.2f}')} | {fmt(f['plan_s'], '{:.2f}')} | {fmt(f['merge_s'], '{:.2f}')} | "
            f"{fmt(f['redis_commands'])} | {fmt(f['redis_per_object'], '{:.4f}')} |")
    return lines
