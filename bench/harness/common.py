"""What every section of the harness shares: where things are (the
repository, the cache), the bucket name, the in-flight count and the
credentials every client uses, the sizes of each section by mode, and the
pure helpers of figures and reports (median, ratio, summarize, judge and its
table, number formatting), the log and the machine's description.

May import: the standard library only (the bottom of the package).
"""
import datetime
import os
import platform
import statistics
import sys

BENCH_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # bench/


REPO = os.path.dirname(BENCH_DIR)
CACHE = os.environ.get("BUCKETSCAN_CACHE", os.path.expanduser("~/.cache/bucketscan"))
BUCKET = "synthetic"
CONCURRENCY = 256  # in flight for our worker and the hyper loop alike


# Objects per client run, by mode: slow clients get fewer (every figure is a
# rate, per second or per 100k HEADs, so N only has to make a run last
# seconds, not the same for all).
SIZES = {
    "quick": {"boto3-naive": 500, "boto3-multiprocessing": 2_000, "go-pool": 10_000,
              "rclone": 500, "ours-sdk": 20_000, "ours-fast": 50_000, "hyper-loop": 50_000,
              "list": 100_000, "fleet": 20_000, "scale": [10_000, 100_000],
              "saturation": 60_000, "list_latency": 60_000, "incremental": [100_000]},
    "full": {"boto3-naive": 4_000, "boto3-multiprocessing": 15_000, "go-pool": 60_000,
             "rclone": 4_000, "ours-sdk": 150_000, "ours-fast": 300_000, "hyper-loop": 300_000,
             "list": 1_000_000, "fleet": 200_000, "scale": [100_000, 1_000_000, 10_000_000],
             "saturation": 450_000, "list_latency": 150_000, "incremental": [1_000_000, 10_000_000]},
}
RUNS = {"quick": 1, "full": 3}


# Any credentials do for synthetic-s3; versitygw (the fleet's output) checks them.
CREDENTIALS = ("bucketscan-bench", "bucketscan-bench-secret")


def median(values):
    values = [v for v in values if v is not None]
    return statistics.median(values) if values else None


def ratio(a, b):
    """a / b, or None when either is missing or b is zero."""
    if a is None or b is None or b == 0:
        return None
    return a / b


def summarize(runs):
    """Median of every numeric figure over a client's runs."""
    keys = [k for k in runs[0] if isinstance(runs[0][k], (int, float)) or runs[0][k] is None]
    return {k: median([r.get(k) for r in runs]) for k in keys} | {"runs": len(runs)}


def model_args(model):
    """synthetic-s3's store model flags from {"head_median_ms": 15.0, ...}."""
    return [x for k, v in model.items() for x in ("--" + k.replace("_", "-"), str(v))]


def judge(name, value, threshold, fmt, higher_is_better=True):
    """One target as {target, value, met: True/False/None, text}: `value`
    against `threshold` (None: not measured), `fmt` its text."""
    if value is None:
        return {"target": name, "value": None, "met": None, "text": "not measured"}
    met = value >= threshold if higher_is_better else value <= threshold
    return {"target": name, "value": value, "met": met, "text": fmt.format(value)}


def render_targets(targets, first="target"):
    """A table of targets as judge() makes them: measured, met or not."""
    lines = [f"| {first} | measured | met |", "| --- | --- | --- |"]
    for t in targets:
        met = {True: "**met**", False: "**missed**",
               None: "not judged" if t["value"] is not None else "not measured in this run"}[t["met"]]
        lines.append(f"| {t['target']} | {t['text'] or '–'} | {met} |")
    return lines


def fmt(v, spec="{:,.0f}"):
    return "–" if v is None else spec.format(v)


def log(msg):
    print(msg, file=sys.stderr, flush=True)


def when():
    return (datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
            ", ".join(f"{x:.2f}" for x in os.getloadavg()))


def machine():
    model = "unknown"
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    model = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    return {"nproc": os.cpu_count(), "cpu": model, "kernel": platform.release(),
            "python": platform.python_version(), "load_before": os.getloadavg()}
