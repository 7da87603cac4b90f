"""The clients section: every peer client (boto3 naive and multiprocessing,
the Go pool, rclone), our worker with either HEAD client and the bare hyper
loop, each against a fresh synthetic-s3 per run, interleaved over the
repetitions; the per-run figures, the ratios to ours, the two tables
(throughput and cost by client, ratios) and the chart.

May import: common, processes, bench.
"""
import json
import os

from .common import BENCH_DIR, BUCKET, CONCURRENCY, CREDENTIALS, SIZES, fmt, log, ratio, summarize
from .processes import Endpoint, run_client


CLIENTS = [
    # name, label
    ("boto3-naive", "naive boto3 (1 process, 1 HEAD at a time)"),
    ("boto3-multiprocessing", "boto3 multiprocessing (2 x cores processes)"),
    ("go-pool", "Go aws-sdk-go-v2 pool (2 x cores goroutines)"),
    ("rclone", "rclone lsjson -R --metadata"),
    ("ours-sdk", "bucketscan, --head-client sdk"),
    ("ours-fast", "bucketscan, --head-client fast"),
    ("hyper-loop", "bare hyper HEAD loop (physical limit)"),
]
OURS = "ours-fast"


def figures(objects, wall, cpu, maxrss_kb, tree_rss_kb):
    """The per-run figures of one client run."""
    return {
        "objects": objects,
        "wall_s": wall,
        "cpu_s": cpu,
        "head_per_s": objects / wall if wall > 0 else None,
        "cpu_per_100k": cpu / objects * 100_000 if objects else None,
        "cores_used": cpu / wall if wall > 0 else None,
        # HEAD/s / (CPU-s / wall-s) = HEADs per CPU-second.
        "head_per_core_s": objects / cpu if cpu > 0 else None,
        "maxrss_mb": maxrss_kb / 1024,
        "tree_rss_mb": tree_rss_kb / 1024 if tree_rss_kb else None,
    }


def ratios_to_ours(clients, ours=OURS):
    """For each client: how many times ours is better (>1 = ours wins)."""
    base = clients.get(ours)
    out = {}
    for name, c in clients.items():
        if base is None:
            out[name] = {}
            continue
        out[name] = {
            "head_per_s": ratio(base["head_per_s"], c["head_per_s"]),
            "head_per_core_s": ratio(base["head_per_core_s"], c["head_per_core_s"]),
            # CPU: ours / theirs (<1 = ours uses less).
            "cpu_per_100k": ratio(base["cpu_per_100k"], c["cpu_per_100k"]),
        }
    return out


def count_jsonl(path):
    """(records, records with our metadata) in a worker's JSON Lines output."""
    records = with_meta = 0
    with open(path, "rb") as f:
        for line in f:
            records += 1
            with_meta += b'"index":' in line
    return records, with_meta


def command(bench, client, url, objects, out):
    """(argv, env, how to count the output) of one client."""
    peers = os.path.join(BENCH_DIR, "peers")
    # `--metadata-source head`: the figure is a HEAD per object, as every
    # other client's; the default (auto) would take records from a listing
    # that carries metadata, should synthetic-s3 ever list it.
    worker = [bench.binary("bucketscan-worker"), "scan", "--endpoint", url, "--path-style",
              "--bucket", BUCKET, "--output", out, "--quiet", "--concurrency", str(CONCURRENCY),
              "--metadata-source", "head"]
    if client == "boto3-naive":
        return [bench.python, os.path.join(peers, "boto3_naive.py"), url, BUCKET], bench.env, "json"
    if client == "boto3-multiprocessing":
        procs = str(2 * (os.cpu_count() or 1))
        return [bench.python, os.path.join(peers, "boto3_multiprocessing.py"), url, BUCKET, procs], \
            bench.env, "json"
    if client == "go-pool":
        return [bench.args.go_pool, url, BUCKET], bench.env, "json"
    if client == "rclone":
        env = dict(bench.env, RCLONE_CONFIG_BENCH_TYPE="s3", RCLONE_CONFIG_BENCH_PROVIDER="Other",
                   RCLONE_CONFIG_BENCH_ENDPOINT=url, RCLONE_CONFIG_BENCH_ACCESS_KEY_ID=CREDENTIALS[0],
                   RCLONE_CONFIG_BENCH_SECRET_ACCESS_KEY=CREDENTIALS[1], RCLONE_CONFIG_BENCH_REGION="us-east-1",
                   RCLONE_CONFIG_BENCH_FORCE_PATH_STYLE="true", RCLONE_CONFIG_BENCH_LIST_VERSION="2")
        return [bench.args.rclone, "--config", "", "lsjson", "-R", "--metadata", f"bench:{BUCKET}"], \
            env, "rclone"
    if client == "ours-sdk":
        return worker + ["--head-client", "sdk"], bench.env, "jsonl"
    if client == "ours-fast":
        return worker + ["--head-client", "fast"], bench.env, "jsonl"
    if client == "hyper-loop":
        return [bench.binary("hyper-head-loop"), url, "--objects", str(objects), "--bucket", BUCKET,
                "--in-flight", str(CONCURRENCY)], bench.env, "json"
    raise ValueError(client)


def available(bench, client):
    """Whether a peer client is installed (ours and the hyper loop always are)."""
    if client.startswith("boto3"):
        return bench.python and os.path.exists(bench.python)
    if client == "go-pool":
        return bool(bench.args.go_pool) and os.path.exists(bench.args.go_pool)
    if client == "rclone":
        return bool(bench.args.rclone) and os.path.exists(bench.args.rclone)
    return True


def run_one(bench, client, objects):
    """One run of `client` against a fresh synthetic-s3 of `objects`: its
    figures, after checking it saw every object with its metadata."""
    ep = Endpoint(bench.binary("synthetic-s3"), objects, bench.args.latency_us)
    out = os.path.join(bench.tmp, f"{client}.out")
    try:
        argv, env, kind = command(bench, client, ep.url, objects, out)
        stdout_path = out if kind != "jsonl" else out + ".stdout"
        with open(stdout_path, "wb") as stdout:
            wall, cpu, maxrss, tree, _ = run_client(argv, env=env, stdout=stdout)
        stats = ep.stats()
    finally:
        server_cpu = ep.stop()
    if kind == "json":
        line = json.loads(open(out).read().strip().splitlines()[-1])
        seen, with_meta = line["objects"], line.get("with_metadata", line["objects"])
    elif kind == "rclone":
        listing = json.load(open(out))
        seen = sum(1 for o in listing if not o.get("IsDir"))
        with_meta = sum(1 for o in listing if "index" in (o.get("Metadata") or {}))
    else:
        seen, with_meta = count_jsonl(out)
    os.unlink(out)
    if seen != objects or with_meta != objects or stats["heads"] < objects:
        raise RuntimeError(f"{client}: saw {seen} of {objects} objects ({with_meta} with metadata); "
                           f"the endpoint served {stats['heads']} HEADs")
    f = figures(objects, wall, cpu, maxrss, tree)
    f["endpoint_cpu_s"] = server_cpu
    f["endpoint_cpu_per_100k_requests"] = server_cpu / stats["requests"] * 100_000
    f["endpoint_share"] = server_cpu / (server_cpu + cpu)
    f["heads_served"] = stats["heads"]
    f["lists_served"] = stats["lists"]
    return f


def measure(bench):
    """Every wanted client that is installed, run after run, interleaved:
    (medians by client, every run, the skipped clients and why)."""
    mode = bench.args.mode
    wanted = [c for c, _ in CLIENTS if c in bench.args.clients]
    skipped = {c: "not installed" for c in wanted if not available(bench, c)}
    wanted = [c for c in wanted if c not in skipped]
    runs = {c: [] for c in wanted}
    for rep in range(bench.args.runs):
        for c in wanted:
            n = bench.args.objects or SIZES[mode][c]
            log(f"[{rep + 1}/{bench.args.runs}] {c}: {n} objects")
            f = run_one(bench, c, n)
            log(f"    {f['head_per_s']:.0f} HEAD/s, {f['cpu_per_100k']:.2f} CPU-s/100k, "
                f"{f['maxrss_mb']:.0f} MB, endpoint {f['endpoint_share'] * 100:.0f} % of the CPU")
            runs[c].append(f)
    return {c: summarize(r) for c, r in runs.items()}, runs, skipped


def render_chart(res, path):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    labels = dict(CLIENTS)
    names = list(res["clients"])
    rate = [res["clients"][n]["head_per_s"] for n in names]
    cpu = [res["clients"][n]["cpu_per_100k"] for n in names]
    short = [labels.get(n, n).split(" (")[0].split(",")[0] if not n.startswith("ours") else
             labels[n].replace("bucketscan, --head-client ", "bucketscan ") for n in names]
    colors = ["#d62728" if n.startswith("ours") else "#7f7f7f" if n == "hyper-loop" else "#1f77b4"
              for n in names]
    fig, (a, b) = plt.subplots(1, 2, figsize=(12, 4.5))
    a.barh(short, rate, color=colors)
    a.set_xscale("log")
    a.set_xlabel("HEAD/s (log)")
    a.set_title("Throughput (higher is better)")
    a.invert_yaxis()
    b.barh(short, cpu, color=colors)
    b.set_xscale("log")
    b.set_xlabel("client CPU-seconds per 100k HEADs (log)")
    b.set_title("Cost (lower is better)")
    b.invert_yaxis()
    b.set_yticklabels([])
    for ax, vals, f in ((a, rate, "{:,.0f}"), (b, cpu, "{:.2f}")):
        for i, v in enumerate(vals):
            ax.text(v, i, " " + f.format(v), va="center", fontsize=8)
    fig.suptitle(f"bucketscan vs peers, synthetic S3 at {res['latency_us']} µs, {res['machine']['nproc']} cores "
                 f"({res['mode']} run, {res['date']})")
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def render(res):
    """The throughput and cost table by client (a row per skipped client too),
    the chart, and the ratios to ours (Markdown lines, its '## ' heading first)."""
    labels = dict(CLIENTS)
    clients, ratios = res["clients"], res["ratios"]
    lines = [
        "## HEAD throughput and cost, by client",
        "",
        f"Endpoint latency {res['latency_us']} µs per request; our worker and the hyper loop keep "
        f"{CONCURRENCY} HEADs in flight, the peers use their own defaults (Go and boto3 multiprocessing: "
        "2 x cores).",
        "",
        "| client | objects | HEAD/s | CPU-s per 100k HEADs | client cores used | HEAD/s per client core "
        "| peak RSS (largest process) | peak RSS (process tree) | endpoint share of CPU |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for name, c in clients.items():
        lines.append(
            f"| {labels.get(name, name)} | {c['objects']:,.0f} | {fmt(c['head_per_s'])} | "
            f"{fmt(c['cpu_per_100k'], '{:.2f}')} | {fmt(c['cores_used'], '{:.2f}')} | "
            f"{fmt(c['head_per_core_s'])} | {fmt(c['maxrss_mb'], '{:.0f} MB')} | "
            f"{fmt(c['tree_rss_mb'], '{:.0f} MB')} | {fmt(c['endpoint_share'] * 100, '{:.0f} %')} |")
    for name, why in res["skipped"].items():
        lines.append(f"| {labels.get(name, name)} | {why} | | | | | | | |")
    lines += [
        "",
        f"![HEAD/s and CPU per 100k HEADs by client]({res['chart']})" if res.get("chart") else "",
        "",
        "## Ratios: bucketscan (fast HEAD path) against each client, same run",
        "",
        "Above 1: ours is faster or cheaper by that factor. HEAD/s per client core is HEADs per CPU-second "
        "of the client (HEAD/s divided by the cores it kept busy), the fair comparison when the clients "
        "run at different concurrency; the CPU column is ours divided by theirs (below 1: ours uses less).",
        "",
        "| against | HEAD/s (ours / theirs) | HEAD/s per client core (ours / theirs) | CPU per HEAD (ours / theirs) |",
        "| --- | ---: | ---: | ---: |",
    ]
    for name, r in ratios.items():
        if name == OURS:
            continue
        lines.append(f"| {labels.get(name, name)} | {fmt(r.get('head_per_s'), '{:.2f}x')} | "
                     f"{fmt(r.get('head_per_core_s'), '{:.2f}x')} | {fmt(r.get('cpu_per_100k'), '{:.2f}x')} |")
    return lines
