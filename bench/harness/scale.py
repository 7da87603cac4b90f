"""The scale section (issue 13, item 6): plan + SCALE_WORKERS x run + merge
at each N of the mode's sizes, the cost per object against N, the operator's
peak RSS per N when `just bench-operator` measured it, the table and the
log-log chart.

May import: common, processes, bench.
"""
from .bench import FLEET_CONCURRENCY
from .common import SIZES, fmt, log, ratio


SCALE_WORKERS = 2  # one per core of this machine (the endpoint shares them)
SCALE_HEADING = "## Scale: cost per object against N (issue 13, item 6)"


def measure(bench):
    """plan + SCALE_WORKERS x run + merge for each N of the mode's scale
    sizes, one run each (the largest takes minutes): cost per object against N."""
    store, store_url, s3 = bench.start_store()
    rows = []
    try:
        for n in bench.args.scale_sizes or SIZES[bench.args.mode]["scale"]:
            log(f"scale: {n:,} objects, {SCALE_WORKERS} workers")
            f = bench.fleet_once(n, SCALE_WORKERS, f"scale{n}", store_url, s3)
            rows.append(scale_row(f))
            log(f"    {f['objects_per_s']:.0f} objects/s, {f['cpu_per_100k']:.2f} CPU-s/100k, Redis peak "
                f"{f['redis_peak_bytes'] / 2**20:.1f} MiB, merge {f['merge_s']:.1f} s")
    finally:
        store.kill()
        store.wait()
    return rows


def scale_row(f):
    """One row of the scale table from a fleet run's figures: the cost per object."""
    n = f["objects"]
    return {
        "objects": n,
        "workers": f["workers"],
        "wall_s": f["end_to_end_s"],
        "objects_per_s": f["objects_per_s"],
        "end_to_end_per_s": n / f["end_to_end_s"],
        "cpu_per_100k": f["cpu_per_100k"],
        "redis_peak_mib": f["redis_peak_bytes"] / 2**20,
        "redis_peak_bytes_per_object": f["redis_peak_bytes"] / n,
        "redis_per_object": f["redis_per_object"],
        "worker_rss_mb": f["worker_rss_kb"] / 1024,
        "merge_s": f["merge_s"],
        "merge_ms_per_100k": f["merge_s"] * 1000 / n * 100_000,
        "plan_s": f["plan_s"],
        "record_bytes": (f["result_bytes"] or 0) / n,
        "redis_by_command": f.get("redis_by_command") or {},
    }


def render(scale, chart=None):
    """The scale section: one row per N (see scale_row), with the operator's
    peak RSS per N when `just bench-operator` measured it."""
    rows, operator = scale["rows"], scale.get("operator")
    lines = [
        SCALE_HEADING,
        "",
        f"`bucketscan-worker plan`, then {SCALE_WORKERS} `bucketscan-worker run` processes (one per core of this "
        f"machine, {FLEET_CONCURRENCY} HEADs in flight each), then `bucketscan-worker merge` (single result), "
        f"against synthetic-s3 ({scale['latency_us']} µs a request, one thread) with the output on a versitygw "
        "behind its `--forward`; a fresh redis-server per N (so `used_memory_peak` is that scan's). One run "
        f"per N, measured {scale['date']} (load average before: {scale['load']}). Worker CPU and peak RSS from "
        "`os.wait4` of each worker process (CPU summed, RSS the largest); Redis commands from "
        "`total_commands_processed` over plan + run + merge. The operator is not in these runs (it needs an "
        "apiserver): its peak RSS is from `just bench-operator` (bench/run.py `--only operator`), where the real "
        "operator plans and tracks a keyspace of the same size against a kube-apiserver, its shards completed "
        "by `complete-shards` (the operator holds shards, never objects: see the 10^9 section's Operator line)"
        + (f", measured {operator['date']}." if operator and operator.get("date") else "; '–': not measured."),
        "",
        "| objects | wall s (plan+run+merge) | objects/s (run) | objects/s (end to end) | worker CPU-s per 100k "
        "| Redis peak MiB | Redis bytes per object | Redis commands per object | worker peak RSS | operator peak RSS "
        "| plan s | merge s | merge ms per 100k |",
        "| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    operator_kb = {r["objects"]: r["rss_kb"] for r in (operator or {}).get("by_objects", [])}
    for r in rows:
        op = operator_kb.get(r["objects"])
        lines.append(
            f"| {r['objects']:,} | {r['wall_s']:.1f} | {fmt(r['objects_per_s'])} | {fmt(r['end_to_end_per_s'])} | "
            f"{r['cpu_per_100k']:.2f} | {r['redis_peak_mib']:.2f} | {r['redis_peak_bytes_per_object']:.2f} | "
            f"{r['redis_per_object']:.5f} | {r['worker_rss_mb']:.0f} MB | "
            f"{f'{op / 1024:.0f} MiB' if op else '–'} | {r['plan_s']:.2f} | {r['merge_s']:.2f} | "
            f"{r['merge_ms_per_100k']:.0f} |")
    growth = scale_growth(rows)
    if growth:
        lines += ["", "From the smallest to the largest N (x{:,.0f} objects), per object: ".format(growth["factor"])
                  + "; ".join(f"{name} x{v:.2f}" for name, v in growth["ratios"].items()) + "."]
    lines += ["", "Redis commands per 1,000 objects, the largest kinds (INFO commandstats, Lua scripts' inner "
                  "commands included):", ""] + [f"- {r['objects']:,} objects: " + top_commands(r) for r in rows]
    if chart:
        lines += ["", f"![cost per object against N, log-log]({chart})"]
    return lines


def top_commands(row, k=6):
    by = sorted(row.get("redis_by_command", {}).items(), key=lambda kv: -kv[1])[:k]
    return ", ".join(f"{name} {calls / row['objects'] * 1000:.2f}" for name, calls in by) or "–"


def scale_growth(rows):
    """Each per-object cost at the largest N divided by the same at the smallest
    (1: flat; below 1: the fixed costs spread thinner)."""
    if len(rows) < 2:
        return None
    a, b = rows[0], rows[-1]
    per_object = {
        "worker CPU": lambda r: r["cpu_per_100k"],
        "wall time": lambda r: r["wall_s"] / r["objects"],
        "Redis commands": lambda r: r["redis_per_object"],
        "Redis peak memory": lambda r: r["redis_peak_bytes_per_object"],
        "merge time": lambda r: r["merge_s"] / r["objects"],
    }
    return {"factor": b["objects"] / a["objects"],
            "ratios": {name: ratio(f(b), f(a)) for name, f in per_object.items()}}


def render_chart(scale, path):
    """Log-log: each per-object cost against N (flat lines: no growth)."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    rows = scale["rows"]
    n = [r["objects"] for r in rows]
    series = {
        "worker CPU, µs per object": [r["cpu_per_100k"] * 10 for r in rows],
        "wall time, µs per object": [r["wall_s"] / r["objects"] * 1e6 for r in rows],
        "Redis commands per 1,000 objects": [r["redis_per_object"] * 1000 for r in rows],
        "Redis peak memory, bytes per object": [r["redis_peak_bytes_per_object"] for r in rows],
        "merge time, µs per object": [r["merge_s"] / r["objects"] * 1e6 for r in rows],
    }
    fig, ax = plt.subplots(figsize=(8, 5))
    for label, ys in series.items():
        ax.plot(n, ys, marker="o", label=label)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("objects in the scan (N)")
    ax.set_ylabel("cost per object (log)")
    ax.set_title(f"bucketscan: cost per object against N ({SCALE_WORKERS} workers, synthetic S3, {scale['date']})")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
