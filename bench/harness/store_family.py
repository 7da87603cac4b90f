"""The saturation section's family of store models (issue 29, item 1): one
autoscaled fleet per store model, every row judged by the same claims, one
table. Owns the family, the scaling of a nominal store to what this 2-core
machine can drive, the per-row claims and the table; the run's `Bench`
measures each row (`fleet_once` with `autoscaled-fleet`, as the saturation
section's autoscaled fleet) and the saturation section's `saturation_row`,
passed in, reads it.

Scaling. A store of nominal capacity C, HEAD latency L and queue limit Q is
driven at capacity C' = min(C, DRIVEN_MAX) with every time multiplied by
f = C / C': HEAD latency L' = L x f... and the per-worker concurrency chosen so
that each worker brings about C' / 8 (the store saturates at some 8 workers of
SATURATION_MAX, before this machine's cores do). What the fleet meets stays
the same in requests: the queue holds Q x C requests at both scales, a
sporadic share is a share. What does not scale: the governor's window (one
second) holds f times fewer requests, so its statistics are f times noisier
(said in the table's note).

May import: common, processes, bench (saturation imports this module, so its
row reader and plan are passed in).
"""
import json
import math
import os
import random
import shutil

from .common import log
from .processes import run_client

# The fastest store the fleet drives on this machine (HEADs/s): beyond it
# the machine, not the store, would saturate first.
DRIVEN_MAX = 5_000
# Workers each bring about C' / WORKERS_AT_C.
WORKERS_AT_C = 8
# What a HEAD takes besides the model's service time, measured here: the
# worker's and synthetic-s3's own time on 2 shared cores (one worker with 2
# in flight against a 3.2 ms median brought 368/s: 5.4 ms a HEAD, 1.5 ms
# more than the model's mean of 3.8 ms). Without it the family's workers
# brought 0.6 of C' / 8 each, and 16 of them barely C.
CLIENT_MS = 1.5
# The model's HEAD latency is log-normal with its p99 at P99_OVER_MEDIAN x
# its median: its mean is exp(sigma^2 / 2) x the median.
P99_OVER_MEDIAN = 4.0
MEAN_OVER_MEDIAN = math.exp((math.log(P99_OVER_MEDIAN) / 2.326) ** 2 / 2)
FAMILY_MAX_WORKERS = 16
# Claims every row is judged by (issue 29).
FAMILY_LIMITS = {"share_of_capacity": 0.9, "slowdown_share": 0.01, "retry_share": 0.02, "steps": 8}

# name, nominal capacity (HEAD/s), queue limit (ms, nominal), sporadic 503
# share, per-prefix limit (share of C, None: none), profile (None: plain),
# layout. Queue limits from 0.5 ms (a burst of a few requests is refused)
# to 50 ms (bursts queue).
FAMILY = [
    ("base", 5_000, 5.0, 0.0, None, None, "flat"),
    ("sporadic 0.1 %", 5_000, 5.0, 0.001, None, None, "flat"),
    ("sporadic 1 %", 5_000, 5.0, 0.01, None, None, "flat"),
    ("short queue", 5_000, 0.5, 0.0, None, None, "flat"),
    ("short queue, sporadic 0.1 %", 5_000, 0.5, 0.001, None, None, "flat"),
    ("long queue", 5_000, 50.0, 0.0, None, None, "flat"),
    ("small store", 1_000, 5.0, 0.0, None, None, "flat"),
    ("small store, sporadic 1 %", 1_000, 5.0, 0.01, None, None, "flat"),
    ("20k store, short queue", 20_000, 0.5, 0.001, None, None, "flat"),
    ("100k store, sporadic 1 %", 100_000, 5.0, 0.01, None, None, "flat"),
    ("per-prefix limit", 5_000, 5.0, 0.0, 0.5, None, "prefixes"),
    ("profile aws", 5_500, 5.0, 0.0, None, "aws", "nested"),
    ("profile flashblade", 15_000, 5.0, 0.0, None, "flashblade", "flat"),
    ("profile minio", 8_000, 5.0, 0.0, None, "minio", "flat"),
]
# A quick subset (bench/run.py --family-rows quick).
QUICK = ["base", "sporadic 1 %", "short queue, sporadic 0.1 %"]


def scaled(row, concurrency=2, driven_max=DRIVEN_MAX):
    """The store model a row is driven as: (driven capacity, synthetic-s3
    flags, the worker's concurrency, f). `driven_max` lower than
    DRIVEN_MAX drives every row slower (debug builds: `--family-driven-max`)."""
    name, capacity, queue_ms, sporadic, prefix_share, profile, layout = row
    driven = min(capacity, driven_max)
    f = capacity / driven
    # Each worker: `concurrency` HEADs in flight, each taking L' (the
    # model's mean and the client's own time) so that it brings C' /
    # WORKERS_AT_C.
    mean_ms = concurrency * WORKERS_AT_C / driven * 1000 - CLIENT_MS
    head_ms = mean_ms / MEAN_OVER_MEDIAN
    flags = {}
    if profile:
        flags["profile"] = profile
    flags.update({"head_median_ms": round(head_ms, 3), "head_p99_ms": round(P99_OVER_MEDIAN * head_ms, 3),
                  "list_median_ms": 5.0, "list_p99_ms": 20.0, "queue_limit_ms": round(queue_ms * f, 3)})
    if prefix_share:
        flags["prefix_limit"] = driven * prefix_share
        flags["partition_chars"] = 2  # "prefixes" keys: "07/": each of the 16 its own partition
        flags["capacity"] = driven
    elif profile == "aws":
        # S3 scales out: the limit is per prefix; the rows' keys share few.
        flags["prefix_limit"] = driven
        flags["partition_chars"] = 4
    else:
        flags["capacity"] = driven
    if sporadic:
        flags["throttle_share"] = sporadic
    return driven, flags, concurrency, f


def refused_share(load, room, n=100_000, seed=1):
    """The share of random (Poisson) arrivals at `load` x C that the model's
    capacity queue turns away when it holds `room` requests: a slot of 1 / C
    each, a request refused when it would wait longer than the room
    (bench/src/store.rs, `queue`). Seeded: the same answer every run."""
    rng = random.Random(seed)
    t = free = 0.0
    refused = 0
    for _ in range(n):
        t += rng.expovariate(load)
        start = max(free, t)
        if start - t > room:
            refused += 1
        else:
            free = start + 1.0
    return refused / n


def reachable(queue_ms, capacity, limit=FAMILY_LIMITS["slowdown_share"]):
    """The highest share of C that random arrivals reach with at most
    `limit` of them refused by a queue of `queue_ms` at `capacity`/s (1.0:
    C itself). Where it is below the 0.9 C claim, no client whose requests
    arrive at random meets both claims: the queue is too short."""
    room = queue_ms / 1000 * capacity
    if refused_share(1.0, room) <= limit:
        return 1.0
    low, high = 0.0, 1.0
    for _ in range(12):
        mid = (low + high) / 2
        low, high = (mid, high) if refused_share(mid, room) <= limit else (low, mid)
    return low


def row_objects(n, driven, driven_max, reach):
    """Objects for one row: `n` for a store driven at `driven_max`, fewer
    for a slower one and for one whose queue lets no client past `reach` x
    C, so that every row runs about as long. The autoscaler's steps and the
    governor's windows are times, not request counts: a row at 1,000/s
    climbs and settles in the same seconds as one at 5,000/s, and 450,000
    objects there took 11 minutes for what 90,000 show (a whole full run
    must fit one 3-hour session; docs/benchmarks.md)."""
    share = min(1.0, reach / FAMILY_LIMITS["share_of_capacity"])
    return max(1_000, round(n * driven / driven_max * share))


def model_flags(flags):
    return [x for k, v in flags.items() for x in ("--" + k.replace("_", "-"), str(v))]


def judge(row, driven):
    """The claims of one measured row (saturation_row's dict): [(claim,
    met)], and why it falls short, from its own figures."""
    lim = FAMILY_LIMITS
    share = row["share_of_capacity"]
    claims = [
        (f">= {lim['share_of_capacity']} C", share >= lim["share_of_capacity"]),
        (f"503s <= {lim['slowdown_share'] * 100:.0f} %", row["slowdown_share"] <= lim["slowdown_share"]),
        (f"retries <= {lim['retry_share'] * 100:.0f} %", row["retry_share"] <= lim["retry_share"]),
        (f"settles within {lim['steps']} adjustments", row["steps"] <= lim["steps"]),
        # StoreSaturated only at the knee: never said while the fleet ran
        # below 0.9 C (a false knee), and said once it sat at C below the
        # maximum.
        ("StoreSaturated only at the knee", knee_ok(row, driven)),
    ]
    return claims, why(row, driven, claims)


def early_saturation(row, driven):
    """StoreSaturated said while the fleet ran below 0.8 of what the store
    serves: C', or where its queue refuses more than 1 % of random arrivals
    when that is lower (its knee: past it, the store pushes back)."""
    knee = min(1.0, row.get("reachable", 1.0)) * driven
    return [s for s in row.get("saturated_at", []) if s[1] < 0.8 * knee]


def knee_ok(row, driven):
    return not early_saturation(row, driven)


def why(row, driven, claims):
    """Where a row falls short, in words, from its figures."""
    missed = [c for c, met in claims if not met]
    if not missed:
        return ""
    reasons = []
    sporadic = row.get("sporadic_share", 0.0)
    if row["share_of_capacity"] < FAMILY_LIMITS["share_of_capacity"]:
        bound = row.get("reachable", 1.0)
        if bound < FAMILY_LIMITS["share_of_capacity"]:
            reasons.append(f"the store's queue ({row['queue_ms'] * row.get('scale', 1.0) / 1000 * driven:.1f} "
                           f"requests) refuses over {FAMILY_LIMITS['slowdown_share'] * 100:.0f} % of random arrivals "
                           f"above {bound:.2f} C: no client meets both claims; the fleet reached "
                           f"{row['share_of_capacity'] / max(bound, 1e-9):.2f} of that")
        if row["final_workers"] >= FAMILY_MAX_WORKERS:
            reasons.append(f"all {FAMILY_MAX_WORKERS} workers ran: the fleet (this machine), not the store, "
                           "was the limit")
        elif row.get("saturated"):
            reasons.append(f"held by {row['saturated']}: {row.get('message') or ''}".strip())
        else:
            reasons.append("the rate stopped short without a StoreSaturated signal")
    if row["slowdown_share"] > FAMILY_LIMITS["slowdown_share"]:
        beyond = row["slowdown_share"] - sporadic
        reasons.append(f"503s {row['slowdown_share'] * 100:.2f} % ({sporadic * 100:.2f} % sporadic, "
                       f"{beyond * 100:.2f} % from the store's queue)")
    if row["retry_share"] > FAMILY_LIMITS["retry_share"] and sporadic >= FAMILY_LIMITS["retry_share"] / 2:
        reasons.append("every sporadic 503 is a retry")
    if not knee_ok(row, driven):
        first = early_saturation(row, driven)[0]
        reasons.append(f"StoreSaturated ({first[0]}) at {first[1]:,.0f}/s, below the knee")
    return "; ".join(reasons) or ", ".join(missed)


def busy_ticks(ticks):
    """The ticks while shards were pending for every worker: from the start
    until the queue first ran short. Near the end the work left, not the
    autoscaler, sizes the fleet (that is no adjustment), and a shard handed
    back after it (pending 1 with one worker left) is no busy tick either: a
    family row counted the tail's 16 -> 1 as its ninth adjustment."""
    busy = []
    for t in ticks:
        if t["pending"] < max(1, t["workers"]):
            break
        busy.append(t)
    return busy


def row_names(text):
    """The rows named in `text`, separated by commas; a name may hold
    commas itself ("100k store, sporadic 1 %"): the longest known name
    wins."""
    known = {r[0] for r in FAMILY}
    parts = [p.strip() for p in text.split(",")]
    names, i = [], 0
    while i < len(parts):
        for j in range(len(parts), i, -1):
            if ", ".join(parts[i:j]) in known:
                names.append(", ".join(parts[i:j]))
                i = j
                break
        else:
            raise SystemExit(f"--family-rows: no store model named {parts[i]!r} "
                             f"(known: {'; '.join(r[0] for r in FAMILY)})")
    return names


def measure(bench, args, row_reader, plan_args, default_objects):
    """Run the family's rows named by args.family_rows (all, quick, or names)
    with `bench` (the run's Bench); `row_reader` is the saturation section's
    saturation_row, `plan_args` its plan."""
    wanted = args.family_rows or "all"
    names = [r[0] for r in FAMILY] if wanted == "all" else QUICK if wanted == "quick" else row_names(wanted)
    n = args.family_objects or default_objects
    driven_max = args.family_driven_max or DRIVEN_MAX
    store, store_url, s3 = bench.start_store()
    rows = []
    try:
        for i, row in enumerate(r for r in FAMILY if r[0] in names):
            driven, flags, concurrency, f = scaled(row, driven_max=driven_max)
            reach = reachable(flags["queue_limit_ms"], driven)
            objects = row_objects(n, driven, driven_max, reach)
            log(f"family: {row[0]} (C = {row[1]:,}/s, driven at {driven:,}/s), {objects:,} objects")

            def run_fleet(command, redis_url, scan):
                out = os.path.join(bench.tmp, "family.json")
                driver = [bench.binary("autoscaled-fleet"), "--redis", redis_url, "--scan", scan,
                          "--max", str(FAMILY_MAX_WORKERS)]
                worker = [*command, "--concurrency", str(concurrency), "--govern-ms", "1000"]
                with open(out, "wb") as fh:
                    _, cpu, rss, _, _ = run_client([*driver, "--", *worker], env=bench.env, stdout=fh,
                                                   timeout=3600)
                if args.family_ticks:
                    # Every tick of the row's fleet (workers, rate, throttles,
                    # the autoscaler's signals), to read where it fell short.
                    os.makedirs(args.family_ticks, exist_ok=True)
                    shutil.copy(out, os.path.join(args.family_ticks, f"row{i}.json"))
                return cpu, rss, json.load(open(out))

            measured = bench.fleet_once(objects, 0, f"fam{i}", store_url, s3, model=model_flags(flags),
                                        run_fleet=run_fleet, plan_args=plan_args, layout=row[6])
            r = row_reader(row[0], None, measured, driven)
            # While every worker had work: as the queue drains the rate
            # falls with the work left, not with the store.
            ticks = busy_ticks((measured.get("fleet") or {}).get("ticks", []))
            r["saturated_at"] = [(t["saturated"], t["rate"]) for t in ticks if t.get("saturated")]
            r["message"] = next((t.get("message") for t in reversed(ticks) if t.get("message")), None)
            r["sporadic_share"] = measured["endpoint"].get("sporadic", 0) / max(1, measured["endpoint"]["requests"])
            r.update(nominal=row[1], driven=driven, scale=f, queue_ms=row[2], sporadic=row[3],
                     prefix_share=row[4], profile=row[5], flags=flags, concurrency=concurrency,
                     reachable=reach)
            r["claims"], r["why"] = judge(r, driven)
            r.pop("series", None)
            rows.append(r)
            log(f"    {r['share_of_capacity']:.2f} C, {r['final_workers']} workers, 503s "
                f"{r['slowdown_share'] * 100:.2f} %, retries {r['retry_share'] * 100:.2f} %, "
                f"{r['steps']} steps, {r['saturated'] or '–'}{': ' + r['why'] if r['why'] else ''}")
    finally:
        store.kill()
        store.wait()
    return {"objects": n, "rows": rows, "limits": FAMILY_LIMITS, "driven_max": driven_max}


def render(family):
    """The family's one table (Markdown lines)."""
    if not family or not family.get("rows"):
        return []
    lines = [
        "### The family of store models (issue 29)",
        "",
        f"One autoscaled fleet (1..{FAMILY_MAX_WORKERS} workers, the operator's `autoscale::decide`, the governor "
        f"on) per store model, {family['objects']:,} objects for a store driven at {family['driven_max']:,}/s and "
        "proportionally fewer for a slower one or one whose queue lets no client near C (every row runs about as "
        "long: the autoscaler's steps and the governor's windows are times, not counts). A store of nominal capacity C is driven at "
        f"C' = min(C, {family['driven_max']:,})/s with its times scaled by C / C' (HEAD latency and the queue "
        "limit: the queue holds as many requests at both scales) and each worker's HEADs in flight such that "
        f"it brings about C' / {WORKERS_AT_C}, so the store, not this 2-core machine, saturates first. The "
        "governor's one-second window holds C / C' times fewer requests than it would at the nominal rate. "
        "Every row is judged by the same claims: the steady rate >= 0.9 C', 503s <= 1 %, retries <= 2 %, "
        f"settled within {FAMILY_LIMITS['steps']} adjustments, and StoreSaturated never said below 0.8 C' "
        "(0.8 of the reachable rate, where that is lower: there the store's knee is). "
        "*Reachable*: the highest share of C that requests arriving at random (Poisson) reach with at most 1 % "
        "of them refused by the store's queue (simulated, `store_family.reachable`): below 0.9, no client meets "
        "both claims on that store.",
        "",
        "| store model | C (driven) | objects | queue | sporadic 503s | reachable | of C | workers | 503s | retries | adjustments "
        "| StoreSaturated | claims | where it falls short, and why |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- | --- | --- |",
    ]
    for r in family["rows"]:
        met = sum(1 for _, m in r["claims"] if m)
        reachable_text = f"{r['reachable']:.2f} C" if "reachable" in r else "–"
        store = r["label"] + (f" (`--profile {r['profile']}`)" if r.get("profile") else "") + \
            (f", prefix limit {r['prefix_share']:.0%} of C" if r.get("prefix_share") else "")
        lines.append(
            f"| {store} | {r['nominal']:,} ({r['driven']:,}) | {r.get('objects', family['objects']):,} | {r['queue_ms']} ms | {r['sporadic'] * 100:g} % | "
            f"{reachable_text} | {r['share_of_capacity']:.2f} | {r['final_workers']} | {r['slowdown_share'] * 100:.2f} % | "
            f"{r['retry_share'] * 100:.2f} % | {r['steps']} | {r['saturated'] or '–'} | {met}/{len(r['claims'])} | "
            f"{r['why'] or '–'} |")
    return lines
