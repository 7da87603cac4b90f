#!/usr/bin/env python3
"""The benchmark harness behind `just bench`: every client against one
synthetic-s3 endpoint on 127.0.0.1, same machine, same run.

For each client run it starts a fresh synthetic-s3 (so the endpoint's own CPU
can be read from its rusage), runs the client as a child process, waits for it
with os.wait4 (user + system CPU, ru_maxrss; for a client with child
processes this covers the children it waited for, and ru_maxrss is that of
the largest single process, so the harness also samples the summed RSS of the
whole process tree), checks that the client saw every object and that the
endpoint served that many HEADs, and fails loudly otherwise. Repetitions are
interleaved (rep 1 of every client, then rep 2...) so background load hits
them alike; each figure is the median over the repetitions, and every ratio
compares medians taken in this same run.

Also: LIST keys/s for one stream versus N key-range shards (list-shards), the
fleet (plan + W x run + merge through a private redis-server, output to a
versitygw behind synthetic-s3's --forward) with Redis commands per object,
the end-to-end figure read from $BUCKETSCAN_CACHE/bench/e2e.json, and
incremental scans of a bucket changed by 1 % (bench/harness/incremental.py).

Writes a results JSON, BENCHMARKS.md and (unless --no-chart) a PNG chart.
Pure logic (medians, ratios, targets, e2e parsing) is unit-tested in
bench/test_run.py.

This file is the entry point: the command line, which sections a run
measures, each section dated and given its chart and the operator's figures,
and the reports written. What each section measures and renders is in the
package beside it, bench/harness/ (one module per section; its __init__ says
which module may import which).

May import: the harness package (any of its modules); nothing imports it.
"""
import argparse
import datetime
import json
import os
import shutil
import subprocess
import sys
import time

from harness import billion, clients, fleet, incremental, list_latency, list_streams, saturation, scale, \
    store_family
from harness.bench import Bench
from harness.common import CACHE, RUNS, SIZES, log, machine, when
from harness.operator_rss import OperatorRun, read_operator_figures
from harness.report import read_e2e, read_notes, read_results, read_text, render_sections, write_reports
from harness.splice import splice_sections


# Where timed() writes the results after each section (--json), so that a
# run stopped midway keeps what it measured.
CHECKPOINT = None


def timed(res, name, measure, *a):
    """Run one section's `measure`, keep how long it took in
    res["section_seconds"] (a whole run must fit one session:
    docs/benchmarks.md, "Running") and log it; then write the results so
    far to CHECKPOINT (a partial results JSON, `.partial` beside --json)."""
    began = time.monotonic()
    try:
        out = measure(*a)
    finally:
        secs = time.monotonic() - began
        res.setdefault("section_seconds", {})[name] = round(secs, 1)
        log(f"section {name}: {secs / 60:.1f} min")
    if CHECKPOINT:
        with open(CHECKPOINT, "w") as f:
            json.dump(dict(res, **{name: out}), f, indent=1, default=str)
    return out


def scale_section(bench, args):
    date, load = when()
    section = {"rows": scale.measure(bench), "date": date, "load": load, "latency_us": args.latency_us}
    section["operator"] = read_operator_figures(args)
    if args.scale_chart:
        scale.render_chart(section, args.scale_chart)
        base = os.path.dirname(os.path.abspath(args.markdown or args.scale_chart))
        section["chart"] = os.path.relpath(args.scale_chart, base)
    return section


def saturation_section(bench, args):
    date, load = when()
    if args.family_only:
        m = saturation.SATURATION_MODEL
        sat = {"objects": 0, "model": m, "concurrency": saturation.SATURATION_CONCURRENCY, "rows": [], "date": date,
               "load": load}
    else:
        sat = dict(saturation.measure(bench), date=date, load=load)
    if args.family_rows != "none":
        sat["family"] = store_family.measure(
            bench, args, saturation.saturation_row, saturation.SATURATION_PLAN,
            args.objects or SIZES[args.mode]["saturation"])
    if args.saturation_chart and sat["rows"]:
        saturation.render_chart(sat, args.saturation_chart)
        base = os.path.dirname(os.path.abspath(args.markdown or args.saturation_chart))
        sat["chart"] = os.path.relpath(args.saturation_chart, base)
    return sat


def list_latency_section(bench, args):
    date, load = when()
    return dict(list_latency.measure(bench), date=date, load=load)


def billion_section(bench, args, scaled):
    date, load = when()
    rows = scaled["rows"] if scaled else []
    record_bytes = rows[-1]["record_bytes"] if rows and rows[-1]["record_bytes"] else args.record_bytes
    section = {"rows": billion.measure(bench, round(record_bytes), args.billion_keys), "date": date, "load": load,
               "latency_us": args.latency_us, "record_bytes": record_bytes, "output_store": billion.OUTPUT_STORE,
               "keys": args.billion_keys}
    section["operator"] = read_operator_figures(args)
    return section


def incremental_section(bench, args):
    date, load = when()
    sizes = args.incremental_objects or ([args.objects] if args.objects else SIZES[args.mode]["incremental"])
    section = incremental.measure(bench, args, sizes)
    return dict(section, date=date, load=load)


def measure_sections(args, sections, p):
    """--only: measure the named sections, splice them into --markdown."""
    unknown = set(sections) - {"scale", "billion", "operator", "saturation", "list_latency", "incremental"}
    if unknown:
        p.error(f"--only takes scale, billion, operator, saturation, list_latency and incremental, not "
                f"{', '.join(sorted(unknown))}")
    args.runs = args.runs or RUNS[args.mode]
    bench = Bench(args)
    res = {}
    try:
        if "operator" in sections:
            figures = OperatorRun(bench).measure()
            os.makedirs(os.path.dirname(args.operator_figures), exist_ok=True)
            with open(args.operator_figures, "w") as f:
                json.dump(figures, f, indent=1)
            log(figures["text"])
        if "scale" in sections:
            res["scale"] = timed(res, "scale", scale_section, bench, args)
        if "billion" in sections:
            res["billion"] = timed(res, "billion", billion_section, bench, args, res.get("scale"))
        if "saturation" in sections:
            res["saturation"] = timed(res, "saturation", saturation_section, bench, args)
        if "list_latency" in sections:
            res["list_latency"] = timed(res, "list_latency", list_latency_section, bench, args)
        if "incremental" in sections:
            res["incremental"] = timed(res, "incremental", incremental_section, bench, args)
    finally:
        shutil.rmtree(bench.tmp, ignore_errors=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(res, f, indent=1, default=str)
    rendered = render_sections(res)
    if args.markdown:
        text = read_text(args.markdown, "# Benchmarks\n")
        with open(args.markdown, "w") as f:
            f.write(splice_sections(text, rendered))
    for lines in rendered:
        log("\n".join(lines))
    return 0


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--mode", choices=["quick", "full"], default="quick")
    p.add_argument("--runs", type=int, help="runs per figure (default: 1 quick, 3 full)")
    p.add_argument("--objects", type=int, help="objects for every client (default: by mode and client)")
    p.add_argument("--clients", default=",".join(c for c, _ in clients.CLIENTS),
                   help="comma-separated subset of: " + ", ".join(c for c, _ in clients.CLIENTS))
    p.add_argument("--no-list", action="store_true", help="skip the LIST streams figure")
    p.add_argument("--no-fleet", action="store_true", help="skip the fleet figures")
    p.add_argument("--no-scale", action="store_true", help="skip the scale table (10^5..10^7 objects)")
    p.add_argument("--no-billion", action="store_true", help="skip the 10^9-key figures")
    p.add_argument("--billion-keys", type=int, default=billion.BILLION,
                   help="keys per layout of the 10^9 section (default 10^9; fewer only for the harness's small "
                        "test, bench/tests/harness.rs: the section then says so)")
    p.add_argument("--no-saturation", action="store_true", help="skip the saturation figures")
    p.add_argument("--no-list-latency", action="store_true",
                   help="skip the LIST latency figures (one worker, 100 ms LIST pages, shards in flight)")
    p.add_argument("--no-incremental", action="store_true",
                   help="skip the incremental figures (full scan, 1 %% changed, incremental scan; bench/harness/incremental.py)")
    p.add_argument("--incremental-objects", type=lambda v: [int(x) for x in v.split(",")],
                   help="objects per incremental row, comma-separated (default: --objects, else 100,000 quick; 10^6 and 10^7 full)")
    p.add_argument("--minio", default=os.path.join(CACHE, "bin", "minio"),
                   help="the MinIO binary the incremental section writes its datasets to")
    p.add_argument("--family-rows", default="all",
                   help="the saturation section's family of store models to run: all, quick (three rows), none, "
                        "or names separated by commas (bench/harness/store_family.py)")
    p.add_argument("--family-objects", type=int, help="objects per family row (default: the saturation size)")
    p.add_argument("--family-ticks", help="keep each family row's fleet ticks (autoscaled-fleet's JSON) in this "
                                          "directory as rowN.json")
    p.add_argument("--family-driven-max", type=int,
                   help=f"drive every family row at most this fast (default {store_family.DRIVEN_MAX:,}/s; lower "
                        "for a quick run on debug builds)")
    p.add_argument("--family-only", action="store_true",
                   help="in the saturation section, only the family (not the three fixed/autoscaled fleets)")
    p.add_argument("--saturation-chart", help="write the saturation plot (rate and workers over time) here")
    p.add_argument("--only", help="measure only these sections (comma-separated: scale, billion, operator, "
                                  "saturation, list_latency, incremental) and "
                                  "splice them into the existing --markdown, leaving its other sections as they "
                                  "are; operator writes --operator-figures (needs BUCKETSCAN_TEST_KUBECONFIG)")
    p.add_argument("--scale-sizes", type=lambda v: [int(x) for x in v.split(",")],
                   help="objects per scale run, comma-separated (default: by mode)")
    p.add_argument("--scale-chart", help="write the scale plot (log-log, cost per object against N) here")
    p.add_argument("--operator-figures", default=os.path.join(CACHE, "bench", "operator-billion.json"),
                   help="the operator's peak RSS while tracking a 10^9-key scan (written by "
                        "bench/operator-rss.sh), if present")
    p.add_argument("--bin-dir", help="where synthetic-s3, hyper-head-loop, list-shards and "
                                                    "bucketscan-worker are")
    p.add_argument("--worker", help="the bucketscan-worker binary (default: in --bin-dir)")
    p.add_argument("--complete-shards", help="the complete-shards binary (default: in --bin-dir)")
    p.add_argument("--record-bytes", type=float, default=254,
                   help="mean bytes of a result record for the 10^9 merge plan when no scale run measured it "
                        "(default: the 10^6 scale run's, 2026-11-23)")
    p.add_argument("--python", default=os.path.join(CACHE, "venv", "bin", "python"),
                   help="python with boto3 for the boto3 peers")
    p.add_argument("--go-pool", default=os.path.join(CACHE, "bench", "go-pool"))
    p.add_argument("--rclone", default=os.path.join(CACHE, "bin", "rclone"))
    p.add_argument("--rclone-error", default=os.path.join(CACHE, "bench", "rclone-install.err"),
                   help="file holding why rclone did not install, if it did not")
    p.add_argument("--versitygw", default=os.path.join(CACHE, "bin", "versitygw"))
    p.add_argument("--latency-us", type=int, default=1000)
    p.add_argument("--e2e", default=os.path.join(CACHE, "bench", "e2e.json"))
    p.add_argument("--json", help="write the results here")
    p.add_argument("--markdown", help="write BENCHMARKS.md here")
    p.add_argument("--chart", help="write the PNG chart here")
    p.add_argument("--render-from", help="measure nothing: write --markdown and --chart from this results JSON "
                                         "and the e2e file (after editing bench/notes.json, say)")
    args = p.parse_args(argv)
    if args.render_from:
        res = read_results(args.render_from)
        # The e2e figure is read again: `just bench` may have measured it anew.
        measured = res.get("fleet")
        read_e2e(res, args.e2e,
                 max(w["redis_per_object"] for w in measured["workers"].values()) if measured else None)
        read_notes(res)
        write_reports(res, args)
        return 0
    if not args.bin_dir:
        p.error("--bin-dir is required (unless --render-from)")
    global CHECKPOINT
    CHECKPOINT = args.json + ".partial" if args.json else None
    if args.only:
        return measure_sections(args, [x.strip() for x in args.only.split(",") if x.strip()], p)
    args.runs = args.runs or RUNS[args.mode]
    args.clients = [c.strip() for c in args.clients.split(",") if c.strip()]
    unknown = set(args.clients) - {c for c, _ in clients.CLIENTS}
    if unknown:
        p.error(f"unknown clients: {', '.join(sorted(unknown))}")

    bench = Bench(args)
    res = {"mode": args.mode, "runs": args.runs, "latency_us": args.latency_us, "machine": machine(),
           "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")}
    try:
        res["clients"], res["all_runs"], res["skipped"] = timed(res, "clients", clients.measure, bench)
        if "rclone" in res["skipped"] and os.path.exists(args.rclone_error):
            res["skipped"]["rclone"] = "did not install: " + open(args.rclone_error).read().strip()[-300:]
        res["ratios"] = clients.ratios_to_ours(res["clients"])
        if not args.no_list:
            res["list"] = timed(res, "list", list_streams.measure, bench)
            res["list"]["efficiency"] = list_streams.list_efficiency(res["list"]["rates"])
        redis_per_object = None
        if not args.no_fleet:
            workers, n = timed(res, "fleet", fleet.measure, bench)
            res["fleet"] = {"objects": n, "workers": workers}
            redis_per_object = max(w["redis_per_object"] for w in workers.values())
        if not args.no_scale:
            res["scale"] = timed(res, "scale", scale_section, bench, args)
        if not args.no_billion:
            res["billion"] = timed(res, "billion", billion_section, bench, args, res.get("scale"))
        if not args.no_saturation:
            res["saturation"] = timed(res, "saturation", saturation_section, bench, args)
        if not args.no_list_latency:
            res["list_latency"] = timed(res, "list_latency", list_latency_section, bench, args)
        if not args.no_incremental:
            res["incremental"] = timed(res, "incremental", incremental_section, bench, args)
    finally:
        shutil.rmtree(bench.tmp, ignore_errors=True)
    read_e2e(res, args.e2e, redis_per_object)
    res["machine"]["load_after"] = os.getloadavg()
    if os.path.exists(args.rclone):
        v = subprocess.run([args.rclone, "version"], capture_output=True, text=True).stdout.split("\n")[0]
        res["rclone_version"] = v.replace("rclone ", "").replace("-DEV", "")
    read_notes(res)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(res, f, indent=1, default=str)
    write_reports(res, args)
    for t in res["targets"]:
        log(f"{ {True: 'MET   ', False: 'MISSED', None: 'n/a   '}[t['met']]} {t['target']}: {t['text']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
