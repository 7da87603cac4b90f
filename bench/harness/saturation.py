"""The saturation section (issue 14, item 7): three fleets (too few, too
many, autoscaled by the operator's autoscaler through `autoscaled-fleet`) on
one store model of capacity C; each fleet's steady rate, 503s, retries and
adjustments, the claims, the table, the chart, and the family of store models
below it (store_family).

May import: common, processes, bench, store_family.
"""
import json
import os

from . import store_family
from .common import SIZES, fmt, log, model_args
from .processes import run_client


# The saturation figures (issue 14, item 7): a store of capacity C, scaled to
# what this machine serves beside the workers (docs/store-model.md), and
# workers kept small (a few HEADs in flight each) so that the store, not the
# machine's 2 cores, is what saturates: each worker brings about C / 10.
# The queue holds 5 ms of requests at C (25): enough for the spread of
# arrivals of a fleet sending near C (at 0.9 C they queue about 1 ms on
# average), fewer than the too-many fleet keeps in flight (32), which
# overfills it. (A 2 ms queue turned requests away at 0.7 C already: such a
# store does not serve C to any fleet.)
SATURATION_MODEL = {"capacity": 5_000, "head_median_ms": 2.0, "head_p99_ms": 8.0, "list_median_ms": 5.0,
                    "list_p99_ms": 20.0, "queue_limit_ms": 5.0}
SATURATION_CONCURRENCY = 2
# label, fixed workers (None: autoscaled), share of the section's objects.
# The too-few fleet runs at about 0.2 C from its first second: a quarter of
# the objects shows its steady rate as well as all of them, in 100 s instead
# of 420 (a whole full run must fit one session; docs/benchmarks.md).
SATURATION_FLEETS = [("too few", 2, 0.25), ("too many", 16, 1.0), ("autoscaled", None, 1.0)]
SATURATION_MAX = 16
# Shards enough that every one of SATURATION_MAX workers has work until near
# the end (the default plan, 64 shards of >= 10,000 objects, would leave
# most of a large fleet idle: no saturation, whatever the fleet).
SATURATION_PLAN = ["--target-shards", "256", "--min-shard-objects", "1000"]
SATURATION_LIMITS = {"share_of_capacity": 0.9, "slowdown_share": 0.01, "retry_share": 0.02}
SATURATION_HEADING = "## Saturation: a store of capacity C, fixed fleets against the autoscaler (issue 14, item 7)"
STEADY_AFTER_S = 5  # a fleet's rate is judged this long after its last change


def measure(bench):
    """One scan per fleet of SATURATION_FLEETS on the store model of
    capacity C: fixed too few, fixed too many, and the operator's
    autoscaler (autoscaled-fleet) between 1 and SATURATION_MAX."""
    n = bench.args.objects or SIZES[bench.args.mode]["saturation"]
    m = SATURATION_MODEL
    model = model_args(m)
    store, store_url, s3 = bench.start_store()
    rows = []
    try:
        for label, fixed, share in SATURATION_FLEETS:
            objects = max(1_000, round(n * share))
            log(f"saturation: {label} ({fixed or f'1..{SATURATION_MAX}'} workers), {objects:,} objects, "
                f"C = {m['capacity']:,}/s")

            def run_fleet(command, redis_url, scan, fixed=fixed):
                out = os.path.join(bench.tmp, "fleet.json")
                driver = [bench.binary("autoscaled-fleet"), "--redis", redis_url, "--scan", scan,
                          "--max", str(SATURATION_MAX)]
                if fixed:
                    driver += ["--fixed", str(fixed)]
                worker = [*command, "--concurrency", str(SATURATION_CONCURRENCY), "--govern-ms", "1000"]
                with open(out, "wb") as f:
                    _, cpu, rss, _, _ = run_client([*driver, "--", *worker], env=bench.env, stdout=f,
                                                   timeout=3600)
                return cpu, rss, json.load(open(out))

            f = bench.fleet_once(objects, 0, f"sat{len(rows)}", store_url, s3, model=model, run_fleet=run_fleet,
                                 plan_args=SATURATION_PLAN)
            rows.append(saturation_row(label, fixed, f, m["capacity"]))
            r = rows[-1]
            log(f"    {r['objects_per_s']:.0f} objects/s overall, {r['steady_rate']:.0f}/s steady "
                f"({r['share_of_capacity']:.2f} C), {r['final_workers']} workers, 503s "
                f"{r['slowdown_share'] * 100:.2f} %, retries {r['retry_share'] * 100:.2f} %")
    finally:
        store.kill()
        store.wait()
    return {"objects": n, "model": m, "concurrency": SATURATION_CONCURRENCY, "rows": rows}


def saturation_row(label, fixed, f, capacity):
    """One fleet's figures from fleet_once: the steady rate (mean of the
    workers' reported rates after the fleet's last change, while shards were
    still pending, so every worker had work), 503s and retries from the
    endpoint's counts."""
    ticks = (f.get("fleet") or {}).get("ticks", [])
    busy = store_family.busy_ticks(ticks)
    last_change, changes = 0.0, 0
    for a, b in zip(busy, busy[1:]):
        if b["workers"] != a["workers"]:
            last_change = b["secs"]
            changes += 1
    window = [t for t in busy if t["secs"] >= last_change + STEADY_AFTER_S]
    if len(window) < 4:  # the last change came late: the last third of the busy time
        window = busy[-max(1, len(busy) // 3):]
    steady = sum(t["rate"] for t in window) / len(window) if window else 0.0
    ep = f["endpoint"]
    failed = ep["slowdowns"] + ep["internal_errors"] + ep["resets"]
    return {
        "label": label,
        "fixed": fixed,
        "objects": f["objects"],
        "objects_per_s": f["objects_per_s"],
        "run_s": f["run_s"],
        "steady_rate": steady,
        "share_of_capacity": steady / capacity,
        "final_workers": window[-1]["workers"] if window else 0,
        # The autoscaler's adjustments while every worker had work (its
        # first decision, the start, included).
        "steps": changes + 1 if busy else 0,
        "started": (f.get("fleet") or {}).get("started"),
        "requests": ep["requests"],
        "slowdowns": ep["slowdowns"],
        "slowdown_share": ep["slowdowns"] / max(1, ep["requests"]),
        # How long a served request waited in the store's queue: how hard the
        # fleet pushed the store past its capacity (other tenants wait as long).
        "queued_ms": ep.get("queued_us", 0) / 1000 / max(1, ep["requests"] - failed),
        "retry_share": failed / max(1, ep["requests"] - failed),
        "cpu_per_100k": f["cpu_per_100k"],
        "saturated": next((t["saturated"] for t in reversed(ticks) if t.get("saturated")), None),
        "series": [(t["secs"], t["workers"], t["rate"]) for t in ticks],
    }


def saturation_claims(sat):
    """(claim, measured text, met) for the autoscaled fleet, and the
    too-many fleet against it."""
    lim, cap = SATURATION_LIMITS, sat["model"]["capacity"]
    rows = {r["label"]: r for r in sat["rows"]}
    auto, many, few = rows.get("autoscaled"), rows.get("too many"), rows.get("too few")
    claims = []
    if auto:
        claims += [
            (f"autoscaled: steady rate >= {lim['share_of_capacity']} C", f"{auto['share_of_capacity']:.2f} C "
             f"({auto['steady_rate']:,.0f}/s of {cap:,}/s, {auto['final_workers']} workers)",
             auto["share_of_capacity"] >= lim["share_of_capacity"]),
            (f"autoscaled: 503s <= {lim['slowdown_share'] * 100:.0f} % of requests",
             f"{auto['slowdown_share'] * 100:.2f} %", auto["slowdown_share"] <= lim["slowdown_share"]),
            (f"autoscaled: retries <= {lim['retry_share'] * 100:.0f} %", f"{auto['retry_share'] * 100:.2f} %",
             auto["retry_share"] <= lim["retry_share"]),
            ("autoscaled: settles within a few adjustments", f"{auto['steps']} steps", auto["steps"] <= 8),
        ]
    if auto and many:
        # "No more objects/s" as the autoscaler judges a knee: the extra
        # workers bring less than half of what they would at the autoscaled
        # fleet's rate per worker (AutoscaleConfig::min_gain).
        extra = max(0, many["final_workers"] - auto["final_workers"])
        per_worker = auto["steady_rate"] / max(1, auto["final_workers"])
        gain = many["steady_rate"] - auto["steady_rate"]
        claims.append(("too many: its extra workers bring less than half their share (no more objects/s)",
                       f"{many['steady_rate'] / max(1.0, auto['steady_rate']):.2f}x autoscaled's steady rate: "
                       f"{extra} more workers bring {gain:+,.0f}/s, half their share is {0.5 * extra * per_worker:,.0f}/s",
                       extra > 0 and gain < 0.5 * extra * per_worker))
        claims.append(("too many: more 503s or a longer store queue than autoscaled",
                       f"503s {many['slowdown_share'] * 100:.2f} % against {auto['slowdown_share'] * 100:.2f} %, "
                       f"queued {many.get('queued_ms', 0):.2f} against {auto.get('queued_ms', 0):.2f} ms a request",
                       many["slowdown_share"] > auto["slowdown_share"]
                       or many.get("queued_ms", 0) > 1.5 * auto.get("queued_ms", 0)))
    if auto and few:
        claims.append(("too few: below C and below autoscaled",
                       f"{few['share_of_capacity']:.2f} C, {few['steady_rate'] / max(1.0, auto['steady_rate']):.2f}x "
                       "autoscaled's steady rate",
                       few["share_of_capacity"] < lim["share_of_capacity"]
                       and few["steady_rate"] < auto["steady_rate"]))
    return claims


def render(sat, chart=None):
    if not sat["rows"]:  # --family-only
        return [SATURATION_HEADING, ""] + store_family.render(sat.get("family"))
    m = sat["model"]
    lines = [
        SATURATION_HEADING,
        "",
        f"synthetic-s3's store model with a capacity of C = {m['capacity']:,} requests/s (HEAD {m['head_median_ms']} "
        f"ms median, {m['head_p99_ms']} ms p99; LIST pages {m['list_median_ms']} / {m['list_p99_ms']} ms; beyond C "
        f"requests queue, and one that would wait over {m['queue_limit_ms']} ms is answered 503 SlowDown), "
        f"{sat['objects']:,} objects per scan ({min(s for _, _, s in SATURATION_FLEETS):.0%} of them for the too-few "
        f"fleet, which runs at its steady rate from the start). Real `bucketscan-worker run` processes with {sat['concurrency']} "
        "HEADs in flight each (so each brings about C / 10 and the store saturates before this 2-core machine "
        "does) and the scan-wide governor on (`--govern-ms 1000`). The autoscaled fleet is sized by the "
        "operator's own autoscaler (`autoscale::decide`, unchanged) driven by `autoscaled-fleet` "
        "(bench/src/bin/autoscaled-fleet.rs) from the scan's live rate and throttles in Redis, as the operator "
        "reads them, with its dwell, settle and re-probe times shortened to 6 s, 4 s and 60 s (the operator's: 60 s, 20 s and 600 s) "
        "and a process standing in for a pod. Steady rate: the mean of the workers' reported rates from "
        f"{STEADY_AFTER_S} s after the fleet's last change while shards were still pending. 503s and retries "
        "from the endpoint's counts (retries: failed answers, each sent again, per answered request); queued: "
        "the mean time a served request waited in the store's queue (what other tenants wait too). Every "
        f"scan's manifest counts all objects once. Measured {sat['date']} (load average before: {sat['load']}).",
        "",
        "| fleet | workers | objects/s (whole run) | steady objects/s | of C | 503s | retries | queued (ms) "
        "| adjustments | CPU-s per 100k | StoreSaturated |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- |",
    ]
    for r in sat["rows"]:
        workers = str(r["fixed"]) if r["fixed"] else f"1..{SATURATION_MAX} (settled at {r['final_workers']})"
        lines.append(
            f"| {r['label']} | {workers} | {fmt(r['objects_per_s'])} | {fmt(r['steady_rate'])} | "
            f"{r['share_of_capacity']:.2f} | {r['slowdown_share'] * 100:.2f} % | {r['retry_share'] * 100:.2f} % | "
            f"{r.get('queued_ms', 0):.2f} | {r['steps'] if not r['fixed'] else '–'} | {r['cpu_per_100k']:.2f} | {r['saturated'] or '–'} |")
    lines += ["", "| claim | measured | met |", "| --- | --- | --- |"]
    for claim, text, met in saturation_claims(sat):
        lines.append(f"| {claim} | {text} | {'**met**' if met else '**missed**'} |")
    if chart:
        lines += ["", f"![objects/s and workers over time, by fleet]({chart})"]
    family = store_family.render(sat.get("family"))
    if family:
        lines += [""] + family
    return lines


def render_chart(sat, path):
    """Rate over time for each fleet (C dashed); the autoscaled fleet's workers on a second axis."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(figsize=(9, 4.5))
    cap = sat["model"]["capacity"]
    for r in sat["rows"]:
        t = [p[0] for p in r["series"]]
        ax.plot(t, [p[2] for p in r["series"]], label=f"{r['label']} ({r['fixed'] or 'autoscaled'})")
    ax.axhline(cap, linestyle="--", color="grey", label=f"C = {cap:,}/s")
    ax.axhline(SATURATION_LIMITS["share_of_capacity"] * cap, linestyle=":", color="grey", label="0.9 C")
    ax.set_xlabel("seconds into the run")
    ax.set_ylabel("objects/s (workers' reports)")
    auto = next((r for r in sat["rows"] if not r["fixed"]), None)
    if auto:
        ax2 = ax.twinx()
        ax2.step([p[0] for p in auto["series"]], [p[1] for p in auto["series"]], where="post", color="black",
                 alpha=0.4, label="autoscaled: workers")
        ax2.set_ylabel("workers (autoscaled)")
        ax2.set_ylim(0, SATURATION_MAX + 1)
        ax2.legend(loc="lower right", fontsize=8)
    ax.legend(loc="upper left", fontsize=8)
    ax.set_title(f"bucketscan: saturating a store of capacity C ({sat['date']})")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
