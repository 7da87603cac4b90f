"""The LIST streams section: keys/s of one LIST stream against N key-range
shards in parallel (`list-shards`), each against a fresh synthetic-s3, the
efficiency against linear scaling, and its table.

May import: common, processes, bench.
"""
import json
import os

from .common import BUCKET, SIZES, fmt, log, median, ratio
from .processes import Endpoint, run_client


LIST_SHARDS = [1, 2, 4, 8]
# The LIST target holds "until the endpoint saturates": a run with N streams
# whose processes (client and endpoint) kept the machine's cores at least
# this busy is saturated, and is reported but not judged.
SATURATED = 0.75


def list_efficiency(list_runs):
    """{shards: keys/s} -> {shards: keys/s(N) / (N * keys/s(1))}."""
    one = list_runs.get(1)
    return {n: ratio(rate, n * one) if one else None for n, rate in list_runs.items()}


def measure(bench):
    """keys/s, CPU and how busy the cores were for each count of LIST_SHARDS
    streams, the median over the runs."""
    n = bench.args.objects or SIZES[bench.args.mode]["list"]
    rates = {s: [] for s in LIST_SHARDS}
    endpoint_cpu = {s: [] for s in LIST_SHARDS}
    cpu = {s: [] for s in LIST_SHARDS}
    busy = {s: [] for s in LIST_SHARDS}
    for rep in range(bench.args.runs):
        for s in LIST_SHARDS:
            ep = Endpoint(bench.binary("synthetic-s3"), n, bench.args.latency_us)
            try:
                out = os.path.join(bench.tmp, "list.out")
                with open(out, "wb") as stdout:
                    wall, c, _, _, _ = run_client(
                        [bench.binary("list-shards"), ep.url, "--objects", str(n), "--bucket", BUCKET,
                         "--shards", str(s)], env=bench.env, stdout=stdout)
            finally:
                server = ep.stop()
            line = json.loads(open(out).read())
            if line["objects"] != n:
                raise RuntimeError(f"list-shards {s}: listed {line['objects']} of {n}")
            rates[s].append(n / line["seconds"])
            cpu[s].append(c)
            endpoint_cpu[s].append(server)
            busy[s].append((c + server) / (wall * (os.cpu_count() or 1)))
            log(f"[{rep + 1}/{bench.args.runs}] LIST {s} stream(s): {n / line['seconds']:.0f} keys/s")
    return {"objects": n, **{name: {s: median(v) for s, v in series.items()} for name, series in
                             (("rates", rates), ("cpu", cpu), ("endpoint_cpu", endpoint_cpu), ("busy", busy))}}


def render(lst):
    """The LIST streams table (Markdown lines, its '## ' heading first)."""
    lines = [
        "## LIST: one stream against N key-range shards in parallel",
        "",
        f"`list-shards` (bucketscan-core's LIST call, 1,000 keys a page) over {lst['objects']:,} keys, the "
        "bucket cut into N equal key ranges, one LIST stream each. Efficiency = keys/s with N streams / "
        "(N x keys/s of one stream); the endpoint runs on one thread of a 2-core machine, so it saturates "
        "early.",
        "",
        f"The target holds until the endpoint saturates: a row whose client and endpoint kept the cores "
        f"{SATURATED * 100:.0f} % busy or more is saturated (the machine has no more to give) and is not judged.",
        "",
        "'cores for linear' is what N streams at N x the one-stream rate would keep busy (N x the one-stream "
        "row's cores busy): near or above 100 %, linear scaling is out of reach on this machine.",
        "",
        "| streams | keys/s | efficiency | client CPU-s | endpoint CPU-s | cores busy | cores for linear |",
        "| ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    one_busy = lst["busy"].get(1)
    for s, rate in lst["rates"].items():
        lines.append(f"| {s} | {fmt(rate)} | {fmt(lst['efficiency'][s], '{:.2f}')} | "
                     f"{fmt(lst['cpu'][s], '{:.2f}')} | {fmt(lst['endpoint_cpu'][s], '{:.2f}')} | "
                     f"{fmt(lst['busy'][s] * 100, '{:.0f} %')} | "
                     f"{fmt(one_busy and one_busy * s * 100, '{:.0f} %')} |")
    return lines
