"""Every target of the issue judged from one run's figures (the clients'
ratios, the LIST streams, Redis commands per object, the LIST latency target,
the end-to-end ratio), and which note of bench/notes.json explains a missed
one.

May import: common, clients, list_streams, list_latency.
"""
from .clients import OURS, ratios_to_ours
from .common import judge, ratio
from .list_latency import list_latency_claims
from .list_streams import SATURATED, list_efficiency


def evaluate_targets(clients, listing, redis_per_object, e2e, list_latency=None):
    """Every target of the issue as {target, value, met: True/False/None, text}."""
    r = ratios_to_ours(clients)
    targets = []

    def add(*args, **kwargs):
        targets.append(judge(*args, **kwargs))

    def per_core(peer):
        return r.get(peer, {}).get("head_per_core_s")

    add("HEAD/s per client core >= 2x Go pool", per_core("go-pool"), 2, "{:.2f}x")
    add("HEAD/s per client core >= 6x boto3 multiprocessing", per_core("boto3-multiprocessing"), 6, "{:.1f}x")
    add("HEAD/s per client core >= 80x naive boto3", per_core("boto3-naive"), 80, "{:.1f}x")
    # One target per quantity (issue 31, item 6): HEAD/s per client core is
    # HEADs per CPU-second, the inverse of CPU per HEAD, so "CPU per 100k
    # HEADs <= 0.5x Go's" was the first target again; and the CPU per HEAD
    # against the bare loop is judged once, by the project's 1.5x.
    hyper = clients.get("hyper-loop")
    ours = clients.get(OURS)
    add("fast path >= 0.8x bare hyper loop (HEAD/s, same in-flight)",
        ratio(ours and ours["head_per_s"], hyper and hyper["head_per_s"]), 0.8, "{:.2f}x")
    # Issue 14, item 4: the whole worker (listing, signing, records) costs at
    # most 1.5x the CPU per HEAD of the bare loop, measured side by side.
    add("CPU per HEAD <= 1.5x the bare hyper loop's",
        ratio(ours and ours["cpu_per_100k"], hyper and hyper["cpu_per_100k"]), 1.5, "{:.2f}x",
        higher_is_better=False)
    listing = listing or {"rates": {}, "busy": {}}
    eff = list_efficiency(listing["rates"])
    for n in sorted(eff):
        if n == 1:
            continue
        name = f"{n}-shard LIST >= 0.8 x {n} x one stream"
        busy = listing["busy"].get(n)
        add(name, eff[n], 0.8, "{:.2f} of linear" + f" (cores {busy * 100:.0f} % busy)")
        if busy is not None and busy >= SATURATED and targets[-1]["met"] is False:
            targets[-1]["met"] = None
            targets[-1]["text"] += f": saturated (>= {SATURATED * 100:.0f} %), not judged"
    add("Redis operations per object < 0.01", redis_per_object, 0.01, "{:.4f}", higher_is_better=False)
    targets.append(list_latency_claims(list_latency)[0])
    if e2e is not None:
        add("end to end >= 0.8x raw HEAD rate", e2e["ratio"], 0.8, "{:.2f}x")
    else:
        add("end to end >= 0.8x raw HEAD rate", None, 0.8, "")
    # Strictly below 0.01 for Redis.
    for t in targets:
        if t["target"].startswith("Redis") and t["value"] is not None:
            t["met"] = t["value"] < 0.01
    return targets


def note_key(target):
    for key in ("Go", "multiprocessing", "naive", "hyper loop (HEAD/s", "CPU per HEAD", "LIST pages", "LIST",
                "Redis", "end to end"):
        if key in target:
            return key
    return target
