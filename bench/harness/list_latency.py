"""The LIST latency section (issue 14, item 2): one worker with 1 and 4
shards in flight on a store model with fast and with 100 ms LIST pages;
each row against the fast pages' of the same shards in flight, the issue's
target and the cap of one shard in flight, and the table.

May import: common, processes, bench.
"""
from .common import CONCURRENCY, SIZES, fmt, judge, log, model_args, ratio, render_targets, summarize


# The LIST latency figures (issue 14, item 2): one worker, CONCURRENCY HEADs
# in flight, on a store whose HEADs take 15 ms and whose capacity is far
# above what one worker does; LIST pages (median, p99 in ms) fast enough not
# to limit it (the first: the baseline) and AWS's 100 ms; each with 1 and 4
# shards in flight. 16 shards: work for 4 streams, each shard of several LIST
# pages (full mode: about 9,400 objects, near the default plan's 10,000), so
# that a row measures listing ahead, not a shard's fixed costs.
LIST_LATENCY_MODEL = {"capacity": 1_000_000, "head_median_ms": 15.0, "head_p99_ms": 30.0}
LIST_LATENCY_PAGES = [(5.0, 20.0), (100.0, 150.0)]
LIST_LATENCY_SHARDS = [1, 4]
LIST_LATENCY_PLAN = ["--target-shards", "16", "--min-shard-objects", "1000"]
LIST_LATENCY_LIMIT = 0.9  # the slow pages' rate against the baseline's (list_latency_claims)
LIST_PAGE_KEYS = 1_000  # keys per LIST page (bucketscan asks for 1,000, synthetic-s3 serves 1,000)
LIST_LATENCY_HEADING = "## LIST latency: shards in flight (issue 14, item 2)"
LIST_LATENCY_TARGET = "100 ms LIST pages, 4 shards in flight >= 0.9x the 5 ms LIST rate"


def measure(bench):
    """One worker (`run --concurrency CONCURRENCY --shards-in-flight S`)
    for each LIST page latency of LIST_LATENCY_PAGES and S of
    LIST_LATENCY_SHARDS, on the store model of LIST_LATENCY_MODEL; runs
    interleaved, each row the median of its runs."""
    n = bench.args.objects or SIZES[bench.args.mode]["list_latency"]
    rows = [(page, shards) for page in LIST_LATENCY_PAGES for shards in LIST_LATENCY_SHARDS]
    runs = {row: [] for row in rows}
    store, store_url, s3 = bench.start_store()
    try:
        for rep in range(bench.args.runs):
            for i, (page, shards) in enumerate(rows):
                model = model_args(dict(LIST_LATENCY_MODEL, list_median_ms=page[0], list_p99_ms=page[1]))

                def run_fleet(command, redis_url, scan, shards=shards):
                    return *bench.run_workers(1, [*command, "--shards-in-flight", str(shards)], CONCURRENCY), None

                f = bench.fleet_once(n, 1, f"ll{rep}r{i}", store_url, s3, model=model, run_fleet=run_fleet,
                                     plan_args=LIST_LATENCY_PLAN)
                runs[(page, shards)].append(list_latency_row(page, shards, f))
                log(f"[{rep + 1}/{bench.args.runs}] LIST pages {page[0]:g} ms, {shards} shard(s) in flight: "
                    f"{f['objects_per_s']:.0f} objects/s, {f['cpu_per_100k']:.2f} CPU-s/100k, "
                    f"{f['endpoint']['lists']} LISTs")
    finally:
        store.kill()
        store.wait()
    return {"objects": n, "model": LIST_LATENCY_MODEL, "concurrency": CONCURRENCY, "plan": LIST_LATENCY_PLAN,
            "runs": bench.args.runs, "rows": list_latency_ratios([summarize(runs[row]) for row in rows])}


def list_latency_row(page, shards, f):
    """One run of the LIST latency table from fleet_once's figures. `page`:
    the LIST page latency (median, p99 ms). The LIST bound: what `shards`
    streams of one page at a time at the median latency can list."""
    return {
        "list_median_ms": page[0],
        "list_p99_ms": page[1],
        "shards_in_flight": shards,
        "objects": f["objects"],
        "objects_per_s": f["objects_per_s"],
        "run_s": f["run_s"],
        "plan_s": f["plan_s"],
        "cpu_per_100k": f["cpu_per_100k"],
        "worker_rss_mb": f["worker_rss_kb"] / 1024,
        "lists": f["endpoint"]["lists"],
        "heads": f["endpoint"]["heads"],
        "list_bound": shards * LIST_PAGE_KEYS / (page[0] / 1000),
    }


def list_latency_ratios(rows):
    """Each row with vs_base: its objects/s over that of the baseline row
    (the first of LIST_LATENCY_PAGES) with the same shards in flight."""
    base = {r["shards_in_flight"]: r["objects_per_s"] for r in rows
            if r["list_median_ms"] == LIST_LATENCY_PAGES[0][0]}
    return [dict(r, vs_base=ratio(r["objects_per_s"], base.get(r["shards_in_flight"]))) for r in rows]


def list_latency_claims(ll):
    """The issue's target (first: evaluate_targets takes it): the slow pages
    with 4 shards in flight against the baseline pages with 4. Then the cap
    that one shard in flight meets on the slow pages, against the best
    baseline rate (the most the worker reached with LIST not limiting it;
    with one shard in flight even the baseline may be capped by more than
    LIST). As judge() makes them."""
    slow, base, limit = LIST_LATENCY_PAGES[-1][0], LIST_LATENCY_PAGES[0][0], LIST_LATENCY_LIMIT
    rows = {(r["list_median_ms"], r["shards_in_flight"]): r for r in (ll or {}).get("rows", [])}
    four, four_base, one = rows.get((slow, 4)), rows.get((base, 4)), rows.get((slow, 1))
    best = max((r for (ms, _), r in rows.items() if ms == base), key=lambda r: r["objects_per_s"], default=None)
    said = four and four_base and f" ({four['objects_per_s']:,.0f} against {four_base['objects_per_s']:,.0f} objects/s)"
    target = judge(LIST_LATENCY_TARGET, four and four["vs_base"], limit, "{:.2f}x" + (said or ""))
    said = one and best and (
        f" ({one['objects_per_s']:,.0f} against {best['objects_per_s']:,.0f} objects/s with "
        f"{best['shards_in_flight']} shard(s) in flight; one LIST stream's bound: {one['list_bound']:,.0f}/s; "
        f"against {base:g} ms pages with 1 shard in flight: {fmt(one['vs_base'], '{:.2f}x')})")
    capped = judge(f"{slow:g} ms LIST pages, 1 shard in flight: capped (<= {limit}x the best {base:g} ms LIST rate)",
                   one and best and ratio(one["objects_per_s"], best["objects_per_s"]), limit, "{:.2f}x" + (said or ""),
                   higher_is_better=False)
    return [target, capped]


def render(ll):
    m = ll["model"]
    (base, base_p99), (slow, slow_p99) = LIST_LATENCY_PAGES[0], LIST_LATENCY_PAGES[-1]
    lines = [
        LIST_LATENCY_HEADING,
        "",
        f"Can LIST latency cap a worker? One `bucketscan-worker run --concurrency {ll['concurrency']} "
        "--shards-in-flight S` scans "
        f"{ll['objects']:,} objects on synthetic-s3's store model: HEADs {m['head_median_ms']:g} ms median, "
        f"{m['head_p99_ms']:g} ms p99, a capacity of {m['capacity']:,} requests/s (far above what one worker does), "
        f"LIST pages of {LIST_PAGE_KEYS:,} keys at {base:g} ms median ({base_p99:g} ms p99: LIST does not limit) "
        f"or {slow:g} ms ({slow_p99:g} ms p99: AWS's figure). One LIST stream lists one page at a time, so it "
        f"cannot feed more than {LIST_PAGE_KEYS:,} keys per {slow:g} ms page = "
        f"{LIST_PAGE_KEYS / slow * 1000:,.0f} objects/s, whatever HEADs it may have in flight; each shard in "
        "flight is a LIST stream of its own, all sharing the worker's HEADs (docs/queue-protocol.md, step 8). "
        f"The {base:g} ms rows are the rate the worker reaches when LIST does not limit it (its CPU, the "
        "endpoint's and the HEAD latency do); each row's ratio is against the one of the same S, and the cap of one "
        f"shard in flight is judged against the best {base:g} ms rate, since one shard in flight may fall short of "
        f"it with {base:g} ms pages too. The plan "
        f"(`{' '.join(ll['plan'])}`) leaves work for every stream; objects/s over the run phase, CPU from "
        "`os.wait4` of the worker, and every scan's manifest counts every object. "
        f"Median of {ll['runs']} run(s) per row, measured {ll['date']} (load average before: {ll['load']}).",
        "",
        "| LIST page median / p99 | shards in flight | objects/s | against the "
        f"{base:g} ms rate, same S | LIST bound (S x {LIST_PAGE_KEYS:,} keys per median page) | CPU-s per 100k "
        "| worker peak RSS | LISTs served | run s |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for r in ll["rows"]:
        lines.append(
            f"| {r['list_median_ms']:g} / {r['list_p99_ms']:g} ms | {r['shards_in_flight']} | "
            f"{fmt(r['objects_per_s'])} | {fmt(r['vs_base'], '{:.2f}x')} | {fmt(r['list_bound'])}/s | "
            f"{r['cpu_per_100k']:.2f} | {r['worker_rss_mb']:.0f} MB | {r['lists']:,.0f} | {r['run_s']:.1f} |")
    return lines + [""] + render_targets(list_latency_claims(ll), "claim")
