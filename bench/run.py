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
incremental scans of a bucket changed by 1 % (bench/incremental.py).

Writes a results JSON, BENCHMARKS.md and (unless --no-chart) a PNG chart.
Pure logic (medians, ratios, targets, e2e parsing) is unit-tested in
bench/test_run.py.
"""
import argparse
import datetime
import json
import os
import platform
import re
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time

import incremental  # the incremental section (beside this file)
import store_family  # the saturation section's family of store models (beside this file)

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
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
LIST_SHARDS = [1, 2, 4, 8]
FLEET_WORKERS = [1, 2, 4]
FLEET_CONCURRENCY = 32  # per worker: one worker is bound by latency, not CPU
SCALE_WORKERS = 2  # one per core of this machine (the endpoint shares them)
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
SATURATION_FLEETS = [("too few", 2), ("too many", 16), ("autoscaled", None)]
SATURATION_MAX = 16
# Shards enough that every one of SATURATION_MAX workers has work until near
# the end (the default plan, 64 shards of >= 10,000 objects, would leave
# most of a large fleet idle: no saturation, whatever the fleet).
SATURATION_PLAN = ["--target-shards", "256", "--min-shard-objects", "1000"]
SATURATION_LIMITS = {"share_of_capacity": 0.9, "slowdown_share": 0.01, "retry_share": 0.02}
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
# The 10^9 figures (issue 13, item 7): keyspaces, shard target, LIST budget,
# and the limits each figure is judged against.
BILLION = 1_000_000_000
BILLION_LAYOUTS = ["flat", "nested", "skewed"]
BILLION_SHARDS = 10_000
BILLION_LIST_BUDGET = 15_000
BUCKET_CHECKS = 2  # `plan` lists one key of the source and of the output bucket first
BILLION_LIMITS = {"plan_s": 30.0, "lists": 15_000, "redis_done_bytes": 1 << 30, "operator_rss_kb": 256 * 1024,
                  "parts_per_upload": 10_000}

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

E2E_FIELDS = ("objects", "seconds", "raw_head_per_s")


# ---------------------------------------------------------------- pure logic

def median(values):
    values = [v for v in values if v is not None]
    return statistics.median(values) if values else None


def ratio(a, b):
    """a / b, or None when either is missing or b is zero."""
    if a is None or b is None or b == 0:
        return None
    return a / b


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


def summarize(runs):
    """Median of every numeric figure over a client's runs."""
    keys = [k for k in runs[0] if isinstance(runs[0][k], (int, float)) or runs[0][k] is None]
    return {k: median([r.get(k) for r in runs]) for k in keys} | {"runs": len(runs)}


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


def parse_e2e(text):
    """The e2e file: JSON with objects, seconds, raw_head_per_s (numbers > 0).
    Returns (dict, None) or (None, reason)."""
    try:
        data = json.loads(text)
    except ValueError as e:
        return None, f"not JSON: {e}"
    if not isinstance(data, dict):
        return None, "not a JSON object"
    for field in E2E_FIELDS:
        v = data.get(field)
        if isinstance(v, bool) or not isinstance(v, (int, float)) or v <= 0:
            return None, f"field {field!r} missing or not a positive number"
    data = dict(data)
    data["objects_per_s"] = data["objects"] / data["seconds"]
    data["ratio"] = data["objects_per_s"] / data["raw_head_per_s"]
    return data, None


def list_efficiency(list_runs):
    """{shards: keys/s} -> {shards: keys/s(N) / (N * keys/s(1))}."""
    one = list_runs.get(1)
    return {n: ratio(rate, n * one) if one else None for n, rate in list_runs.items()}


def model_args(model):
    """synthetic-s3's store model flags from {"head_median_ms": 15.0, ...}."""
    return [x for k, v in model.items() for x in ("--" + k.replace("_", "-"), str(v))]


# The LIST target holds "until the endpoint saturates": a run with N streams
# whose processes (client and endpoint) kept the machine's cores at least
# this busy is saturated, and is reported but not judged.
SATURATED = 0.75


def judge(name, value, threshold, fmt, higher_is_better=True):
    """One target as {target, value, met: True/False/None, text}: `value`
    against `threshold` (None: not measured), `fmt` its text."""
    if value is None:
        return {"target": name, "value": None, "met": None, "text": "not measured"}
    met = value >= threshold if higher_is_better else value <= threshold
    return {"target": name, "value": value, "met": met, "text": fmt.format(value)}


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
    add("CPU per 100k HEADs <= 0.5x Go's", r.get("go-pool", {}).get("cpu_per_100k"), 0.5, "{:.2f}x",
        higher_is_better=False)
    hyper = clients.get("hyper-loop")
    ours = clients.get(OURS)
    add("fast path >= 0.8x bare hyper loop (HEAD/s, same in-flight)",
        ratio(ours and ours["head_per_s"], hyper and hyper["head_per_s"]), 0.8, "{:.2f}x")
    add("fast path >= 0.8x bare hyper loop (HEADs per CPU-second)",
        ratio(ours and ours["head_per_core_s"], hyper and hyper["head_per_core_s"]), 0.8, "{:.2f}x")
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


# ---------------------------------------------------------------- processes

def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def tree_rss_kb(pid):
    """Summed VmRSS of pid and all its descendants (0 when gone)."""
    total, todo = 0, [pid]
    while todo:
        p = todo.pop()
        try:
            with open(f"/proc/{p}/status") as f:
                for line in f:
                    if line.startswith("VmRSS:"):
                        total += int(line.split()[1])
                        break
            for tid in os.listdir(f"/proc/{p}/task"):
                with open(f"/proc/{p}/task/{tid}/children") as f:
                    todo.extend(int(c) for c in f.read().split())
        except (FileNotFoundError, ProcessLookupError, PermissionError):
            continue
    return total


class Sampler(threading.Thread):
    """Peak summed RSS of a process tree, sampled every 50 ms."""

    def __init__(self, pid):
        super().__init__(daemon=True)
        self.pid, self.peak, self.stop = pid, 0, threading.Event()

    def run(self):
        while not self.stop.wait(0.05):
            self.peak = max(self.peak, tree_rss_kb(self.pid))


def run_client(cmd, env=None, stdout=None, timeout=1800):
    """Run cmd to its end; returns (exit status, wall s, CPU s, maxrss KB, peak tree RSS KB)."""
    started = time.monotonic()
    proc = subprocess.Popen(cmd, env=env, stdout=stdout or subprocess.DEVNULL, stderr=subprocess.PIPE)
    sampler = Sampler(proc.pid)
    sampler.start()
    err = []
    reader = threading.Thread(target=lambda: err.append(proc.stderr.read()), daemon=True)
    reader.start()
    killer = threading.Timer(timeout, proc.kill)
    killer.start()
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.monotonic() - started
    killer.cancel()
    sampler.stop.set()
    reader.join()
    proc.returncode = os.waitstatus_to_exitcode(status)
    stderr = (err[0] if err else b"").decode(errors="replace")
    if proc.returncode != 0:
        raise RuntimeError(f"{cmd[0]} exited {proc.returncode}: {stderr[-2000:]}")
    return wall, usage.ru_utime + usage.ru_stime, usage.ru_maxrss, sampler.peak, stderr


class Endpoint:
    """One synthetic-s3 process; stop() returns its CPU seconds."""

    def __init__(self, binary, objects, latency_us, forward=None, layout="flat", model=()):
        cmd = [binary, "--objects", str(objects), "--bucket", BUCKET, "--latency-us", str(latency_us),
               "--threads", "1", "--layout", layout, *model]
        if forward:
            cmd += ["--forward", forward]
        self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
        line = self.proc.stdout.readline().decode()
        m = re.search(r"listening on (http://\S+)", line)
        if not m:
            self.proc.kill()
            raise RuntimeError(f"synthetic-s3 did not start: {line!r}")
        self.url = m.group(1)

    def stats(self):
        import urllib.request
        with urllib.request.urlopen(self.url + "/_stats", timeout=10) as r:
            return json.load(r)

    def stop(self):
        self.proc.send_signal(signal.SIGKILL)
        _, _, usage = os.wait4(self.proc.pid, 0)
        self.proc.returncode = -9
        return usage.ru_utime + usage.ru_stime


# Any credentials do for synthetic-s3; versitygw (the fleet's output) checks them.
CREDENTIALS = ("bucketscan-bench", "bucketscan-bench-secret")


def client_env():
    env = dict(os.environ)
    env.update(AWS_ACCESS_KEY_ID=CREDENTIALS[0], AWS_SECRET_ACCESS_KEY=CREDENTIALS[1], AWS_REGION="us-east-1",
               AWS_DEFAULT_REGION="us-east-1", AWS_EC2_METADATA_DISABLED="true")
    for k in ("AWS_PROFILE", "AWS_SESSION_TOKEN", "AWS_ENDPOINT_URL"):
        env.pop(k, None)
    return env


def count_jsonl(path):
    """(records, records with our metadata) in a worker's JSON Lines output."""
    records = with_meta = 0
    with open(path, "rb") as f:
        for line in f:
            records += 1
            with_meta += b'"index":' in line
    return records, with_meta


class Bench:
    def __init__(self, args):
        self.args = args
        self.bins = args.bin_dir
        self.python = args.python
        self.env = client_env()
        self.tmp = tempfile.mkdtemp(prefix="bucketscan-bench.")
        self.endpoint_cpu = {}

    def binary(self, name):
        if name == "bucketscan-worker" and self.args.worker:
            return self.args.worker
        if name == "complete-shards" and self.args.complete_shards:
            return self.args.complete_shards
        return os.path.join(self.bins, name)

    def command(self, client, url, objects, out):
        """(argv, env, how to count the output) of one client."""
        peers = os.path.join(HERE, "peers")
        worker = [self.binary("bucketscan-worker"), "scan", "--endpoint", url, "--path-style",
                  "--bucket", BUCKET, "--output", out, "--quiet", "--concurrency", str(CONCURRENCY)]
        if client == "boto3-naive":
            return [self.python, os.path.join(peers, "boto3_naive.py"), url, BUCKET], self.env, "json"
        if client == "boto3-multiprocessing":
            procs = str(2 * (os.cpu_count() or 1))
            return [self.python, os.path.join(peers, "boto3_multiprocessing.py"), url, BUCKET, procs], \
                self.env, "json"
        if client == "go-pool":
            return [self.args.go_pool, url, BUCKET], self.env, "json"
        if client == "rclone":
            env = dict(self.env, RCLONE_CONFIG_BENCH_TYPE="s3", RCLONE_CONFIG_BENCH_PROVIDER="Other",
                       RCLONE_CONFIG_BENCH_ENDPOINT=url, RCLONE_CONFIG_BENCH_ACCESS_KEY_ID=CREDENTIALS[0],
                       RCLONE_CONFIG_BENCH_SECRET_ACCESS_KEY=CREDENTIALS[1], RCLONE_CONFIG_BENCH_REGION="us-east-1",
                       RCLONE_CONFIG_BENCH_FORCE_PATH_STYLE="true", RCLONE_CONFIG_BENCH_LIST_VERSION="2")
            return [self.args.rclone, "--config", "", "lsjson", "-R", "--metadata", f"bench:{BUCKET}"], \
                env, "rclone"
        if client == "ours-sdk":
            return worker + ["--head-client", "sdk"], self.env, "jsonl"
        if client == "ours-fast":
            return worker + ["--head-client", "fast"], self.env, "jsonl"
        if client == "hyper-loop":
            return [self.binary("hyper-head-loop"), url, "--objects", str(objects), "--bucket", BUCKET,
                    "--in-flight", str(CONCURRENCY)], self.env, "json"
        raise ValueError(client)

    def available(self, client):
        if client.startswith("boto3"):
            return self.python and os.path.exists(self.python)
        if client == "go-pool":
            return bool(self.args.go_pool) and os.path.exists(self.args.go_pool)
        if client == "rclone":
            return bool(self.args.rclone) and os.path.exists(self.args.rclone)
        return True

    def run_one(self, client, objects):
        ep = Endpoint(self.binary("synthetic-s3"), objects, self.args.latency_us)
        out = os.path.join(self.tmp, f"{client}.out")
        try:
            argv, env, kind = self.command(client, ep.url, objects, out)
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

    def clients(self):
        mode = self.args.mode
        wanted = [c for c, _ in CLIENTS if c in self.args.clients]
        skipped = {c: "not installed" for c in wanted if not self.available(c)}
        wanted = [c for c in wanted if c not in skipped]
        runs = {c: [] for c in wanted}
        for rep in range(self.args.runs):
            for c in wanted:
                n = self.args.objects or SIZES[mode][c]
                log(f"[{rep + 1}/{self.args.runs}] {c}: {n} objects")
                f = self.run_one(c, n)
                log(f"    {f['head_per_s']:.0f} HEAD/s, {f['cpu_per_100k']:.2f} CPU-s/100k, "
                    f"{f['maxrss_mb']:.0f} MB, endpoint {f['endpoint_share'] * 100:.0f} % of the CPU")
                runs[c].append(f)
        return {c: summarize(r) for c, r in runs.items()}, runs, skipped

    def list_streams(self):
        n = self.args.objects or SIZES[self.args.mode]["list"]
        rates = {s: [] for s in LIST_SHARDS}
        endpoint_cpu = {s: [] for s in LIST_SHARDS}
        cpu = {s: [] for s in LIST_SHARDS}
        busy = {s: [] for s in LIST_SHARDS}
        for rep in range(self.args.runs):
            for s in LIST_SHARDS:
                ep = Endpoint(self.binary("synthetic-s3"), n, self.args.latency_us)
                try:
                    out = os.path.join(self.tmp, "list.out")
                    with open(out, "wb") as stdout:
                        wall, c, _, _, _ = run_client(
                            [self.binary("list-shards"), ep.url, "--objects", str(n), "--bucket", BUCKET,
                             "--shards", str(s)], env=self.env, stdout=stdout)
                finally:
                    server = ep.stop()
                line = json.loads(open(out).read())
                if line["objects"] != n:
                    raise RuntimeError(f"list-shards {s}: listed {line['objects']} of {n}")
                rates[s].append(n / line["seconds"])
                cpu[s].append(c)
                endpoint_cpu[s].append(server)
                busy[s].append((c + server) / (wall * (os.cpu_count() or 1)))
                log(f"[{rep + 1}/{self.args.runs}] LIST {s} stream(s): {n / line['seconds']:.0f} keys/s")
        return {"objects": n, **{name: {s: median(v) for s, v in series.items()} for name, series in
                                 (("rates", rates), ("cpu", cpu), ("endpoint_cpu", endpoint_cpu), ("busy", busy))}}

    def start_store(self):
        """versitygw (posix backend) for the fleet's output: it verifies every
        signature, which the forwarded requests keep. Returns (process, url, boto3 client)."""
        import boto3
        from botocore.config import Config
        store_port = free_port()
        # A fresh directory per store: sections start their own store, and a
        # bucket left by the previous one would refuse CreateBucket.
        data = tempfile.mkdtemp(prefix="versitygw-", dir=self.tmp)
        store = subprocess.Popen([self.args.versitygw, "--port", f"127.0.0.1:{store_port}", "--health", "/_health",
                                  "posix", data], env=dict(self.env, ROOT_ACCESS_KEY=CREDENTIALS[0],
                                                           ROOT_SECRET_KEY=CREDENTIALS[1]),
                                 stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=self.tmp)
        store_url = f"http://127.0.0.1:{store_port}"
        s3 = boto3.client("s3", endpoint_url=store_url, region_name="us-east-1",
                          aws_access_key_id=CREDENTIALS[0], aws_secret_access_key=CREDENTIALS[1],
                          config=Config(s3={"addressing_style": "path"}))
        wait_until(lambda: s3.list_buckets() is not None, "versitygw")
        s3.create_bucket(Bucket="bench-out")
        return store, store_url, s3

    def fleet(self):
        """plan + W x run + merge, W in FLEET_WORKERS; Redis commands per object."""
        n = self.args.objects or SIZES[self.args.mode]["fleet"]
        store, store_url, s3 = self.start_store()
        results = {w: [] for w in FLEET_WORKERS}
        try:
            for rep in range(self.args.runs):
                for w in FLEET_WORKERS:
                    results[w].append(self.fleet_once(n, w, f"s{rep}w{w}", store_url, s3))
                    f = results[w][-1]
                    log(f"[{rep + 1}/{self.args.runs}] fleet of {w}: {f['objects_per_s']:.0f} objects/s, "
                        f"{f['redis_per_object']:.4f} Redis commands/object")
        finally:
            store.kill()
            store.wait()
        return {w: summarize(r) for w, r in results.items()}, n

    def scale(self):
        """plan + SCALE_WORKERS x run + merge for each N of the mode's scale
        sizes, one run each (the largest takes minutes): cost per object against N."""
        store, store_url, s3 = self.start_store()
        rows = []
        try:
            for n in self.args.scale_sizes or SIZES[self.args.mode]["scale"]:
                log(f"scale: {n:,} objects, {SCALE_WORKERS} workers")
                f = self.fleet_once(n, SCALE_WORKERS, f"scale{n}", store_url, s3)
                rows.append(scale_row(f))
                log(f"    {f['objects_per_s']:.0f} objects/s, {f['cpu_per_100k']:.2f} CPU-s/100k, Redis peak "
                    f"{f['redis_peak_bytes'] / 2**20:.1f} MiB, merge {f['merge_s']:.1f} s")
        finally:
            store.kill()
            store.wait()
        return rows

    def fleet_once(self, n, workers, scan, store_url, s3, model=(), run_fleet=None, plan_args=(), layout="flat"):
        """plan, `workers` x `bucketscan-worker run` (or `run_fleet(common
        args, env) -> (CPU s, peak RSS KB, what else it measured)`), merge,
        and the manifest checked against the N objects."""
        port = free_port()
        redis = subprocess.Popen(["redis-server", "--bind", "127.0.0.1", "--port", str(port), "--save", "",
                                  "--appendonly", "no", "--dir", self.tmp],
                                 stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        url = f"redis://127.0.0.1:{port}"
        ep = Endpoint(self.binary("synthetic-s3"), n, self.args.latency_us, forward=store_url, model=model,
                      layout=layout)
        worker = self.binary("bucketscan-worker")
        common = ["--redis", url, "--scan", scan]
        endpoint = ["--endpoint", ep.url, "--path-style"]
        try:
            wait_until(lambda: redis_commands(port) is not None, "redis-server")
            before = redis_commands(port)
            started = time.monotonic()
            plan = run_client([worker, "plan", *common, *endpoint, "--bucket", BUCKET,
                               "--output", f"s3://bench-out/{scan}/", *plan_args], env=self.env)
            planned = time.monotonic()
            extra = None
            if run_fleet:
                cpu, rss, extra = run_fleet([worker, "run", *common, *endpoint], url, scan)
            else:
                cpu, rss = self.run_workers(workers, [worker, "run", *common, *endpoint])
            ran = time.monotonic()
            merge = run_client([worker, "merge", *common, *endpoint], env=self.env, timeout=7200)
            merged = time.monotonic()
            after = redis_commands(port)
            memory = redis_memory(port)
            by_command = redis_commandstats(port)
            stats = ep.stats()
        finally:
            server_cpu = ep.stop()
            redis.kill()
            redis.wait()
        manifest = json.loads(s3.get_object(Bucket="bench-out", Key=f"{scan}/manifest.json")["Body"].read())
        counts = manifest.get("counts", {})
        if counts.get("objects") != n or counts.get("with_metadata") != n or stats["heads"] < n:
            raise RuntimeError(f"fleet of {workers}: the manifest counts {counts} for {n} objects, "
                               f"the endpoint served {stats['heads']} HEADs")
        delete_result(s3, "bench-out", manifest)
        run_wall = ran - planned
        return {
            "objects": n,
            "workers": workers,
            "objects_per_s": n / run_wall,
            "end_to_end_s": merged - started,
            "plan_s": planned - started,
            "merge_s": merged - ran,
            "cpu_per_100k": cpu / n * 100_000,
            # INFO itself is counted once (the first call).
            "redis_commands": after - before - 1,
            "redis_per_object": (after - before - 1) / n,
            "redis_peak_bytes": memory.get("used_memory_peak"),
            "redis_by_command": by_command,
            "worker_rss_kb": rss,
            "plan_rss_kb": plan[2],
            "merge_rss_kb": merge[2],
            "merge_cpu_s": merge[1],
            "result_bytes": manifest.get("result_bytes"),
            "endpoint_cpu_s": server_cpu,
            "endpoint": stats,
            "run_s": run_wall,
            "fleet": extra,
        }

    def run_workers(self, workers, command, concurrency=FLEET_CONCURRENCY):
        """`workers` processes of `command` side by side; (CPU s summed, largest peak RSS KB)."""
        procs, procs_out = [], []
        for i in range(workers):
            procs.append(threading.Thread(target=lambda i=i: procs_out.append(run_client(
                [*command, "--concurrency", str(concurrency), "--name", f"w{i}"], env=self.env,
                timeout=7200))))
        for p in procs:
            p.start()
        for p in procs:
            p.join()
        if len(procs_out) != workers:
            raise RuntimeError("a fleet worker failed (see above)")
        return sum(o[1] for o in procs_out), max(o[2] for o in procs_out)

    def saturation(self):
        """One scan per fleet of SATURATION_FLEETS on the store model of
        capacity C: fixed too few, fixed too many, and the operator's
        autoscaler (autoscaled-fleet) between 1 and SATURATION_MAX."""
        n = self.args.objects or SIZES[self.args.mode]["saturation"]
        m = SATURATION_MODEL
        model = model_args(m)
        store, store_url, s3 = self.start_store()
        rows = []
        try:
            for label, fixed in SATURATION_FLEETS:
                log(f"saturation: {label} ({fixed or f'1..{SATURATION_MAX}'} workers), {n:,} objects, "
                    f"C = {m['capacity']:,}/s")

                def run_fleet(command, redis_url, scan, fixed=fixed):
                    out = os.path.join(self.tmp, "fleet.json")
                    driver = [self.binary("autoscaled-fleet"), "--redis", redis_url, "--scan", scan,
                              "--max", str(SATURATION_MAX)]
                    if fixed:
                        driver += ["--fixed", str(fixed)]
                    worker = [*command, "--concurrency", str(SATURATION_CONCURRENCY), "--govern-ms", "1000"]
                    with open(out, "wb") as f:
                        _, cpu, rss, _, _ = run_client([*driver, "--", *worker], env=self.env, stdout=f,
                                                       timeout=3600)
                    return cpu, rss, json.load(open(out))

                f = self.fleet_once(n, 0, f"sat{len(rows)}", store_url, s3, model=model, run_fleet=run_fleet,
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

    def list_latency(self):
        """One worker (`run --concurrency CONCURRENCY --shards-in-flight S`)
        for each LIST page latency of LIST_LATENCY_PAGES and S of
        LIST_LATENCY_SHARDS, on the store model of LIST_LATENCY_MODEL; runs
        interleaved, each row the median of its runs."""
        n = self.args.objects or SIZES[self.args.mode]["list_latency"]
        rows = [(page, shards) for page in LIST_LATENCY_PAGES for shards in LIST_LATENCY_SHARDS]
        runs = {row: [] for row in rows}
        store, store_url, s3 = self.start_store()
        try:
            for rep in range(self.args.runs):
                for i, (page, shards) in enumerate(rows):
                    model = model_args(dict(LIST_LATENCY_MODEL, list_median_ms=page[0], list_p99_ms=page[1]))

                    def run_fleet(command, redis_url, scan, shards=shards):
                        return *self.run_workers(1, [*command, "--shards-in-flight", str(shards)], CONCURRENCY), None

                    f = self.fleet_once(n, 1, f"ll{rep}r{i}", store_url, s3, model=model, run_fleet=run_fleet,
                                        plan_args=LIST_LATENCY_PLAN)
                    runs[(page, shards)].append(list_latency_row(page, shards, f))
                    log(f"[{rep + 1}/{self.args.runs}] LIST pages {page[0]:g} ms, {shards} shard(s) in flight: "
                        f"{f['objects_per_s']:.0f} objects/s, {f['cpu_per_100k']:.2f} CPU-s/100k, "
                        f"{f['endpoint']['lists']} LISTs")
        finally:
            store.kill()
            store.wait()
        return {"objects": n, "model": LIST_LATENCY_MODEL, "concurrency": CONCURRENCY, "plan": LIST_LATENCY_PLAN,
                "runs": self.args.runs, "rows": list_latency_ratios([summarize(runs[row]) for row in rows])}

    def billion(self, record_bytes):
        """The 10^9-key figures: plan each layout into >= BILLION_SHARDS shards
        with the real `bucketscan-worker plan`, complete every shard through the
        queue (complete-shards), plan the merge; Redis memory at each step."""
        rows = []
        # The smoke run plans one keyspace; the full run all three.
        for layout in BILLION_LAYOUTS if self.args.mode == "full" else BILLION_LAYOUTS[:1]:
            log(f"10^9 keys, {layout}: planning")
            rows.append(self.billion_once(layout, record_bytes))
            r = rows[-1]
            log(f"    {r['shards']:,} shards, {r['lists']:,} LISTs in {r['plan_s']:.1f} s; Redis "
                f"{r['redis_planned_bytes'] / 2**20:.1f} MiB planned, {r['redis_done_bytes'] / 2**20:.1f} MiB done")
        return rows

    def billion_once(self, layout, record_bytes):
        port = free_port()
        redis = subprocess.Popen(["redis-server", "--bind", "127.0.0.1", "--port", str(port), "--save", "",
                                  "--appendonly", "no", "--dir", self.tmp],
                                 stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        url = f"redis://127.0.0.1:{port}"
        ep = Endpoint(self.binary("synthetic-s3"), BILLION, self.args.latency_us, layout=layout)
        scan = f"billion-{layout}"
        try:
            wait_until(lambda: redis_commands(port) is not None, "redis-server")
            baseline = redis_memory(port)
            # The output bucket is only checked while planning (nothing is
            # written): the source bucket itself will do.
            plan = run_client([self.binary("bucketscan-worker"), "plan", "--redis", url, "--scan", scan,
                               "--endpoint", ep.url, "--path-style", "--bucket", BUCKET,
                               "--output", f"s3://{BUCKET}/billion/", "--layout", "dataset",
                               "--target-shards", str(BILLION_SHARDS),
                               "--plan-list-budget", str(BILLION_LIST_BUDGET)], env=self.env)
            lists = ep.stats()["lists"]
            planned = redis_memory(port)
            out = os.path.join(self.tmp, "complete.json")
            with open(out, "wb") as stdout:
                complete = run_client([self.binary("complete-shards"), "--redis", url, "--scan", scan,
                                       "--objects", str(BILLION), "--layout", layout,
                                       "--record-bytes", str(record_bytes)], env=self.env, stdout=stdout,
                                      timeout=3600)
            done = redis_memory(port)
            completed = json.loads(open(out).read())
        finally:
            ep.stop()
            redis.kill()
            redis.wait()
        return billion_row(layout, plan, lists, baseline, planned, done, complete, completed)


def vm_kb(pid, field):
    """VmHWM / VmRSS of a live process, in KB."""
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise RuntimeError(f"no {field} for process {pid}")


def operator_figures(hwm_kb, shards, phases, seconds, by_objects=()):
    """The operator's figure for the 10^9 section: peak RSS (VmHWM) while it
    planned and tracked a scan of `shards` shards through `phases`; and the
    same for the scale table's keyspace sizes (`by_objects`: objects,
    shards, rss_kb), each with its own operator process."""
    text = (f"the real `bucketscan-operator` (release build) against a kube-apiserver + etcd "
            f"(`BUCKETSCAN_TEST_KUBE=1 scripts/with-test-servers.sh`, no kubelet: its worker pods never "
            f"run), `--plan-list-budget {BILLION_LIST_BUDGET:,}`, planned the flat 10^9-key BucketScan itself "
            f"(targetShards {BILLION_SHARDS:,}) into {shards:,} shards; `complete-shards` then completed every "
            f"shard in its Redis while it tracked them; phases seen: {' → '.join(phases)}, over {seconds:.0f} s. "
            f"Peak RSS (VmHWM): **{hwm_kb / 1024:.0f} MiB**.")
    if by_objects:
        text += (" The same for the scale table's keyspaces (a fresh operator each, the default targetShards): " +
                 "; ".join(f"{r['objects']:,} objects, {r['shards']:,} shards: {r['rss_kb'] / 1024:.0f} MiB"
                           for r in by_objects) + ".")
    return {"rss_kb": hwm_kb, "shards": shards, "phases": phases, "by_objects": list(by_objects), "text": text,
            "date": when()[0]}


class OperatorRun:
    """The operator tracking a 10^9-key scan (issue 13, item 7 d): needs the
    kube-apiserver of scripts/with-test-servers.sh (BUCKETSCAN_TEST_KUBE=1)."""

    def __init__(self, bench):
        self.bench = bench
        kubeconfig = os.environ.get("BUCKETSCAN_TEST_KUBECONFIG")
        if not kubeconfig:
            raise RuntimeError("the operator figure needs a kube-apiserver: run it under "
                               "BUCKETSCAN_TEST_KUBE=1 scripts/with-test-servers.sh (`just bench-operator`)")
        self.env = dict(bench.env, KUBECONFIG=kubeconfig)
        self.kubectl = shutil.which("kubectl") or os.path.join(CACHE, "bin", "kubectl")
        self.ns = f"bench-operator-{os.getpid()}"

    def k(self, *argv, stdin=None):
        done = subprocess.run([self.kubectl, *argv], input=stdin, capture_output=True, text=True, env=self.env,
                              timeout=120)
        if done.returncode != 0:
            raise RuntimeError(f"kubectl {' '.join(argv)}: {done.stderr.strip()}")
        return done.stdout.strip()

    def setup(self):
        self.k("apply", "--server-side", "--force-conflicts", "-f",
               os.path.join(REPO, "crds", "bucketscans.bucketscan.dev.yaml"))
        self.k("wait", "--for=condition=Established", "crd/bucketscans.bucketscan.dev", "--timeout=60s")
        self.k("create", "namespace", self.ns)
        self.k("-n", self.ns, "create", "secret", "generic", "s3",
               f"--from-literal=AWS_ACCESS_KEY_ID={CREDENTIALS[0]}",
               f"--from-literal=AWS_SECRET_ACCESS_KEY={CREDENTIALS[1]}")

    def phase(self):
        return self.k("-n", self.ns, "get", "bucketscan", self.name, "-o", "jsonpath={.status.phase}")

    def measure(self):
        """Each keyspace of the scale table with the default plan, then the
        10^9 one with BILLION_SHARDS: a fresh operator for each."""
        self.setup()
        try:
            sizes = []
            for n in SIZES["full"]["scale"]:
                hwm, shards, _, _ = self.measure_one(n, None)
                log(f"operator: {n:,} objects, {shards:,} shards: peak RSS {hwm / 1024:.0f} MiB")
                sizes.append({"objects": n, "shards": shards, "rss_kb": hwm})
            hwm, shards, phases, seconds = self.measure_one(BILLION, BILLION_SHARDS)
            return operator_figures(hwm, shards, phases, seconds, sizes)
        finally:
            subprocess.run([self.kubectl, "delete", "namespace", self.ns, "--wait=false"], env=self.env,
                           capture_output=True)

    def measure_one(self, objects, target_shards):
        """(peak RSS KB, shards, phases, seconds) of an operator that planned
        and tracked a flat keyspace of `objects` (shards completed by
        complete-shards)."""
        b = self.bench
        self.name = f"keys{objects}"
        store, store_url, _ = b.start_store()
        ep = Endpoint(b.binary("synthetic-s3"), objects, b.args.latency_us, forward=store_url, layout="flat")
        port = free_port()
        redis = subprocess.Popen(["redis-server", "--bind", "127.0.0.1", "--port", str(port), "--save", "",
                                  "--appendonly", "no", "--dir", b.tmp],
                                 stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        url = f"redis://127.0.0.1:{port}"
        log_path = os.path.join(b.tmp, "operator.log")
        operator = None
        try:
            wait_until(lambda: redis_commands(port) is not None, "redis-server")
            operator = subprocess.Popen(
                [b.binary("bucketscan-operator"), "--namespace", self.ns, "--metrics-addr",
                 f"127.0.0.1:{free_port()}", "--redis", url, "--plan-list-budget", str(BILLION_LIST_BUDGET)],
                env=self.env, stdout=subprocess.DEVNULL, stderr=open(log_path, "wb"))
            started = time.monotonic()
            self.k("-n", self.ns, "apply", "-f", "-", stdin=json.dumps(self.scan(ep.url, target_shards)))
            phases = self.follow(operator, lambda p: p == "Scanning", 600)
            scan = scan_id_in(port)
            shards = int(subprocess.run(["redis-cli", "-p", str(port), "SCARD", f"bs:{{{scan}}}:shards"],
                                        capture_output=True, text=True).stdout.strip())
            log(f"operator planned {shards:,} shards; completing them")
            run_client([b.binary("complete-shards"), "--redis", url, "--scan", scan, "--objects", str(objects),
                        "--layout", "flat"], env=b.env, timeout=3600)
            phases += self.follow(operator, lambda p: p not in ("", "Pending", "Planning", "Scanning"), 300)
            time.sleep(10)  # a few more reconciles of the finished scan
            hwm = vm_kb(operator.pid, "VmHWM")
            return hwm, shards, dedupe(phases), time.monotonic() - started
        except Exception as e:
            tail = open(log_path, errors="replace").read()[-3000:] if os.path.exists(log_path) else ""
            raise RuntimeError(f"{e}\noperator log:\n{tail}") from e
        finally:
            if operator:
                operator.kill()
                operator.wait()
            ep.stop()
            redis.kill()
            redis.wait()
            store.kill()
            store.wait()
            subprocess.run([self.kubectl, "-n", self.ns, "delete", "bucketscan", self.name, "--wait=false"],
                           env=self.env, capture_output=True)

    def follow(self, operator, until, seconds):
        """Phases seen until `until(phase)`; fails if the operator exits or time runs out."""
        seen, deadline = [], time.monotonic() + seconds
        while time.monotonic() < deadline:
            if operator.poll() is not None:
                raise RuntimeError(f"the operator exited ({operator.returncode})")
            phase = self.phase()
            seen.append(phase or "(none)")
            if phase == "Failed":
                raise RuntimeError("the BucketScan failed: " + self.k("-n", self.ns, "get", "bucketscan", self.name,
                                                                     "-o", "jsonpath={.status.conditions}"))
            if until(phase):
                return seen
            time.sleep(1)
        raise RuntimeError(f"the scan stayed in phase {seen[-1] if seen else '?'} for {seconds} s")

    def scan(self, endpoint, target_shards=None):
        spec = {"source": {"endpoint": endpoint, "bucket": BUCKET, "pathStyle": True,
                           "credentialsSecret": {"name": "s3"}},
                "output": {"bucket": "bench-out", "prefix": f"{self.name}/", "layout": "dataset"},
                "workers": {"replicas": 1}}
        if target_shards:
            spec["sharding"] = {"targetShards": target_shards}
        return {"apiVersion": "bucketscan.dev/v1alpha1", "kind": "BucketScan", "metadata": {"name": self.name},
                "spec": spec}


def dedupe(phases):
    """Consecutive repeats dropped: the phases in the order they came."""
    return [p for i, p in enumerate(phases) if i == 0 or phases[i - 1] != p]


def scan_id_in(port):
    """The one scan id in a private Redis (from its `bs:{ID}:meta` key)."""
    out = subprocess.run(["redis-cli", "-p", str(port), "--scan", "--pattern", "bs:*:meta"], capture_output=True,
                         text=True).stdout.split()
    if len(out) != 1:
        raise RuntimeError(f"expected one planned scan in Redis, found {out}")
    return out[0][len("bs:{"):-len("}:meta")]


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


def billion_row(layout, plan, lists, baseline, planned, done, complete, completed):
    """One row of the 10^9 table. plan and complete are run_client's
    (wall, CPU, maxrss KB, tree RSS KB, stderr); lists: LISTs the endpoint
    served (the planner's and the two bucket checks); baseline, planned, done:
    Redis INFO memory before, after planning, after every shard completed;
    completed: complete-shards' JSON."""
    merge = completed["merge"]
    return {
        "layout": layout,
        "shards": completed["shards"],
        # The planner's own: `plan` also checks both buckets with a one-key LIST each.
        "lists": lists - BUCKET_CHECKS,
        "lists_served": lists,
        "plan_s": plan[0],
        "plan_rss_mb": plan[2] / 1024,
        "redis_empty_bytes": baseline["used_memory"],
        "redis_planned_bytes": planned["used_memory"],
        "redis_done_bytes": done["used_memory"],
        "redis_peak_bytes": done["used_memory_peak"],
        "parts": completed["parts"],
        "objects": completed["objects"],
        "complete_s": completed["complete_s"],
        "merge_redis_read_s": merge["redis_read_s"],
        "merge_plan_s": merge["plan_s"],
        "dataset_files": merge["dataset_files"],
        "dataset_max_parts": merge["dataset_max_parts_per_upload"],
        "file_size": merge["file_size"],
        "result_bytes": merge["bytes"],
        "single": merge["single"],
        "single_parts": merge["single_parts_per_upload"],
        "complete_rss_mb": complete[2] / 1024,
    }


def billion_claims(rows, operator=None):
    """Each claim of issue 13, item 7 against its limit: (claim, measured text, met)."""
    lim = BILLION_LIMITS
    out = []
    for r in rows:
        out.append((f"{r['layout']}: >= {BILLION_SHARDS:,} shards", f"{r['shards']:,}", r["shards"] >= BILLION_SHARDS))
        out.append((f"{r['layout']}: planning <= {lim['plan_s']:.0f} s", f"{r['plan_s']:.1f} s",
                    r["plan_s"] <= lim["plan_s"]))
        out.append((f"{r['layout']}: LISTs <= {lim['lists']:,}", f"{r['lists']:,}", r["lists"] <= lim["lists"]))
        out.append((f"{r['layout']}: Redis with every shard done <= 1 GiB",
                    f"{r['redis_done_bytes'] / 2**20:.1f} MiB", r["redis_done_bytes"] <= lim["redis_done_bytes"]))
        worst = max(r["dataset_max_parts"], r["single_parts"])
        out.append((f"{r['layout']}: merge plan <= {lim['parts_per_upload']:,} parts per upload",
                    f"{worst:,}", worst <= lim["parts_per_upload"]))
    if operator:
        out.append(("operator peak RSS while it tracks the scan <= 256 MiB",
                    f"{operator['rss_kb'] / 1024:.0f} MiB", operator["rss_kb"] <= lim["operator_rss_kb"]))
    else:
        out.append(("operator peak RSS while it tracks the scan <= 256 MiB", "not measured in this run", None))
    return out


def delete_result(s3, bucket, manifest):
    """Remove a merged result (10^7 records are gigabytes on the versitygw disk)."""
    for f in manifest.get("files") or []:
        location = f.get("location", "")
        if location.startswith(f"s3://{bucket}/"):
            s3.delete_object(Bucket=bucket, Key=location[len(f"s3://{bucket}/"):])


def redis_commandstats(port):
    """Calls per command since the server started (INFO commandstats)."""
    out = subprocess.run(["redis-cli", "-p", str(port), "INFO", "commandstats"], capture_output=True, text=True,
                         timeout=10).stdout
    return {name: int(calls) for name, calls in re.findall(r"^cmdstat_([a-z|_]+):calls=(\d+)", out, re.M)}


def redis_memory(port):
    out = subprocess.run(["redis-cli", "-p", str(port), "INFO", "memory"], capture_output=True, text=True,
                         timeout=10).stdout
    return {k: int(v) for k, v in re.findall(r"^(used_memory|used_memory_peak|used_memory_dataset):(\d+)",
                                             out, re.M)}


def redis_commands(port):
    try:
        out = subprocess.run(["redis-cli", "-p", str(port), "INFO", "stats"], capture_output=True, text=True,
                             timeout=10).stdout
    except subprocess.TimeoutExpired:
        return None
    m = re.search(r"total_commands_processed:(\d+)", out)
    return int(m.group(1)) if m else None


def wait_until(check, what, seconds=60):
    deadline = time.monotonic() + seconds
    while True:
        try:
            if check():
                return
        except Exception:
            pass
        if time.monotonic() > deadline:
            raise RuntimeError(f"{what} did not come up within {seconds} s")
        time.sleep(0.1)


def log(msg):
    print(msg, file=sys.stderr, flush=True)


# ---------------------------------------------------------------- report

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


def fmt(v, spec="{:,.0f}"):
    return "–" if v is None else spec.format(v)


def render_header(res, carried=()):
    """The title and where the figures come from: this run, except the
    `carried` sections (headings) kept from an earlier BENCHMARKS.md."""
    mode = res["mode"]
    where = "against one synthetic S3 endpoint on the same machine"
    if carried:
        names = ", ".join(f'"{h[3:]}"' for h in carried)
        source = (f"The figures below were measured in this one run, {where}, except in the {len(carried)} "
                  f"section(s) carried over from earlier measurements, each marked so under its heading: {names}.")
    else:
        source = f"Every figure below was measured in this one run, {where}."
    return [
        "# Benchmarks",
        "",
        f"Generated by `just bench{'' if mode == 'full' else '-quick'}` ({mode} mode, "
        f"{res['runs']} run(s) per figure, median) on {res['date']}. {source} The machine is shared, so "
        "absolute rates are noisy: **read the ratios**, which compare clients measured side by side.",
        "",
    ]


def render_targets(targets, first="target"):
    """A table of targets as judge() makes them: measured, met or not."""
    lines = [f"| {first} | measured | met |", "| --- | --- | --- |"]
    for t in targets:
        met = {True: "**met**", False: "**missed**",
               None: "not judged" if t["value"] is not None else "not measured in this run"}[t["met"]]
        lines.append(f"| {t['target']} | {t['text'] or '–'} | {met} |")
    return lines


def render_markdown(res):
    m = res["machine"]
    labels = dict(CLIENTS)
    clients, ratios = res["clients"], res["ratios"]
    lines = render_header(res) + ["## Targets", ""] + render_targets(res["targets"]) + [
        "",
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
    if res.get("list"):
        lst = res["list"]
        lines += [
            "",
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
    if res.get("fleet"):
        fl = res["fleet"]
        base = fl["workers"].get("1") or fl["workers"].get(1)
        lines += [
            "",
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
    if res.get("scale"):
        lines += [""] + render_scale(res["scale"], res["scale"].get("chart"))
    if res.get("saturation"):
        lines += [""] + render_saturation(res["saturation"], res["saturation"].get("chart"))
    if res.get("list_latency"):
        lines += [""] + render_list_latency(res["list_latency"])
    if res.get("billion"):
        lines += [""] + render_billion(res["billion"])
    if res.get("incremental"):
        lines += [""] + incremental.render(res["incremental"])
    lines += ["", E2E_HEADING, ""]
    e2e = res.get("e2e")
    if e2e:
        lines += [
            f"From `{res['e2e_path'].replace(CACHE, '$BUCKETSCAN_CACHE')}` (written by `e2e/run.sh bench`, which `just bench` runs first, at {e2e.get('written', 'date unknown')}; "
            "a real scan in the e2e Kubernetes cluster): "
            f"{e2e['objects']:,} objects in {e2e['seconds']} s = {e2e['objects_per_s']:,.0f} objects/s end to end, "
            f"against the workers' raw HEAD rate of {e2e['raw_head_per_s']:,.0f} HEAD/s: **{e2e['ratio']:.2f}x**."
            + (f" Cluster: {e2e['cluster']}." if e2e.get("cluster") else "")
            + (f" Source: {e2e['source']}." if e2e.get("source") else ""),
        ]
        phases = e2e.get("phases_seconds")
        if isinstance(phases, dict) and phases:
            lines += ["", "| phase | seconds | share |", "| --- | ---: | ---: |"]
            total = sum(v for v in phases.values() if isinstance(v, (int, float)))
            for name, secs in phases.items():
                if isinstance(secs, (int, float)) and total > 0:
                    lines.append(f"| {name} | {secs:.1f} | {secs / total * 100:.0f} % |")
            scanning = phases.get("scanning")
            if isinstance(scanning, (int, float)) and scanning > 0:
                rate = e2e["objects"] / scanning
                lines += ["", f"The scanning phase alone: {rate:,.0f} objects/s, "
                              f"{rate / e2e['raw_head_per_s']:.2f}x the raw HEAD rate."]
    else:
        lines.append(f"not measured in this run (`e2e/run.sh bench` writes it; `just bench` runs it first): {res.get('e2e_missing')}.")
    ours, hyper, lst = clients.get(OURS), clients.get("hyper-loop"), res.get("list")
    if ours and hyper and lst and lst["rates"].get(1):
        list_cost = lst["cpu"][1] / lst["objects"] * 100_000
        lines += [
            "",
            "## Where our CPU goes",
            "",
            f"Per 100k objects, same run: bucketscan (fast path) {ours['cpu_per_100k']:.2f} CPU-s; listing "
            f"alone (`list-shards`, one stream, the same LIST code) {list_cost:.2f} CPU-s; the bare hyper loop, "
            f"which neither lists, signs nor writes records, {hyper['cpu_per_100k']:.2f} CPU-s. What is left "
            f"of ours after its LIST, {ours['cpu_per_100k'] - list_cost:.2f} CPU-s, is "
            f"{ratio(ours['cpu_per_100k'] - list_cost, hyper['cpu_per_100k']):.2f}x the hyper loop's: SigV4 "
            "signing, a task per HEAD, records in key order, JSON output, and the planner's sampling LISTs.",
        ]
    lines += ["", "## Why targets are missed", ""]
    missed = [t for t in res["targets"] if t["met"] is False]
    notes = res.get("notes") or {}
    if not missed:
        lines.append("None missed in this run.")
    for t in missed:
        lines.append(f"- **{t['target']}** ({t['text']}): "
                     + notes.get(note_key(t["target"]), "see the method below."))
    lines += [
        "",
        "## Method",
        "",
        "- One harness, `bench/run.py`, runs everything; `just bench` (full) or `just bench-quick` (smoke). "
        "Clients run one at a time as child processes; for each run a fresh `synthetic-s3` serves a "
        "generated flat keyspace (hex keys, three `x-amz-meta-*` headers on every object) on 127.0.0.1 with "
        f"{res['latency_us']} µs added to every answer (a timer, not CPU) on one thread of its own.",
        "- Client CPU and peak RSS come from `os.wait4` on the client process (user + system, including "
        "child processes it waited for: boto3 multiprocessing's pool is counted). `ru_maxrss` is the "
        "largest single process; the harness also samples the summed RSS of the process tree every 50 ms.",
        "- Each client lists the bucket, then HEADs every object (the hyper loop knows the keys from the "
        "keyspace formula and only HEADs, unsigned). A run counts only if the client reports every object "
        "with its metadata and the endpoint served at least that many HEADs (rclone: its JSON listing has "
        "the `index` metadata of every object, read by one HEAD each).",
        "- `--head-client sdk` and `fast` differ only in the HEAD path: both list with bucketscan's own LIST "
        "path (core/src/s3/list.rs), as every scan does.",
        "- Objects per client differ: a slow client gets fewer, so that no run takes minutes "
        "(naive boto3 does well under 1,000 HEAD/s at 1 ms). Every figure is a rate (per second, per CPU-"
        "second, per 100k HEADs), and each run lasts seconds, so process start-up is a small part of it.",
        "- The endpoint's CPU is measured too (its rusage): the 'endpoint share' column is its part of the "
        "CPU used during the run. Both share the machine's cores, so a client that is fast enough is "
        "bound by the cores, and then HEAD/s per client core is the figure that compares clients.",
        "- rclone is built from the Go module proxy (`go install github.com/rclone/rclone@"
        f"{res.get('rclone_version') or 'pinned'}`) and configured through `RCLONE_CONFIG_BENCH_*` "
        "environment variables (provider Other, path style, ListObjectsV2).",
        "",
        "## Machine",
        "",
        f"- {m['nproc']} cores: {m['cpu']}; kernel {m['kernel']}; Python {m['python']}",
        f"- load average before the run: {', '.join(f'{x:.2f}' for x in m['load_before'])}; after: "
        f"{', '.join(f'{x:.2f}' for x in m['load_after'])} (other work shared the machine)",
        "",
        "## Re-run",
        "",
        "```",
        "just bench        # full: >= 3 runs per figure, writes BENCHMARKS.md and docs/benchmarks.png",
        "just bench-quick  # smoke: 1 run, small N, writes under $BUCKETSCAN_CACHE/bench/quick/",
        "```",
        "",
        "A full run keeps every section of the previous file that it does not produce itself (written by hand, "
        "or measured by another recipe or an earlier run), where it was, with a line under its heading saying "
        "it was carried over; `bench/run.py --only` re-measures the sections it names in place.",
        "",
        "The e2e figure comes from `$BUCKETSCAN_CACHE/bench/e2e.json`, written by `e2e/run.sh bench` (a 1,000,000-object scan in the e2e cluster; `just bench` runs it first): "
        '`{"objects": N, "seconds": S, "raw_head_per_s": R}` (other fields are kept as notes); see '
        "docs/benchmarks.md.",
        "",
    ]
    return "\n".join(lines)


SCALE_HEADING = "## Scale: cost per object against N (issue 13, item 6)"
BILLION_HEADING = "## 10^9 keys: planning, every shard completed, the merge plan (issue 13, item 7)"


def render_scale(scale, chart=None):
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


SATURATION_HEADING = "## Saturation: a store of capacity C, fixed fleets against the autoscaler (issue 14, item 7)"
STEADY_AFTER_S = 5  # a fleet's rate is judged this long after its last change


def saturation_row(label, fixed, f, capacity):
    """One fleet's figures from fleet_once: the steady rate (mean of the
    workers' reported rates after the fleet's last change, while shards were
    still pending, so every worker had work), 503s and retries from the
    endpoint's counts."""
    ticks = (f.get("fleet") or {}).get("ticks", [])
    # Busy: shards enough pending for every worker (near the end the work
    # left, not the autoscaler, sizes the fleet: that is no adjustment).
    busy = [t for t in ticks if t["pending"] >= max(1, t["workers"])]
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


def render_saturation(sat, chart=None):
    if not sat["rows"]:  # --family-only
        return [SATURATION_HEADING, ""] + store_family.render(sat.get("family"))
    m = sat["model"]
    lines = [
        SATURATION_HEADING,
        "",
        f"synthetic-s3's store model with a capacity of C = {m['capacity']:,} requests/s (HEAD {m['head_median_ms']} "
        f"ms median, {m['head_p99_ms']} ms p99; LIST pages {m['list_median_ms']} / {m['list_p99_ms']} ms; beyond C "
        f"requests queue, and one that would wait over {m['queue_limit_ms']} ms is answered 503 SlowDown), "
        f"{sat['objects']:,} objects per scan. Real `bucketscan-worker run` processes with {sat['concurrency']} "
        "HEADs in flight each (so each brings about C / 10 and the store saturates before this 2-core machine "
        "does) and the scan-wide governor on (`--govern-ms 1000`). The autoscaled fleet is sized by the "
        "operator's own autoscaler (`autoscale::decide`, unchanged) driven by `autoscaled-fleet` "
        "(bench/src/bin/autoscaled-fleet.rs) from the scan's live rate and throttles in Redis, as the operator "
        "reads them, with its dwell and settle times shortened to 6 s and 4 s (the operator's: 60 s and 20 s) "
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


def render_saturation_chart(sat, path):
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


LIST_LATENCY_HEADING = "## LIST latency: shards in flight (issue 14, item 2)"
LIST_LATENCY_TARGET = "100 ms LIST pages, 4 shards in flight >= 0.9x the 5 ms LIST rate"


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


def render_list_latency(ll):
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


def render_billion(billion):
    rows, operator = billion["rows"], billion.get("operator")
    lines = [
        BILLION_HEADING,
        "",
        f"synthetic-s3 serving 10^9 generated keys per layout ({billion['latency_us']} µs a LIST, one thread; "
        "flat: hex keys over the 64-bit space; nested: `DDDD/DDD/NNNNNNNNNNNN`; skewed: 80 % under `hot/`, the rest "
        f"over 100 prefixes). Planned by the real `bucketscan-worker plan --target-shards {BILLION_SHARDS:,} "
        f"--plan-list-budget {BILLION_LIST_BUDGET:,} --layout dataset` into a fresh redis-server; then "
        "`complete-shards` (bench/src/bin/complete-shards.rs) takes every shard through the queue's real steps, 64 "
        "at a time: take, one part per 50,000 objects (the worker's default) with its stats and counts recorded "
        "as the worker records them, finish; each shard's objects come from its exact range, and the run fails "
        "unless the shards hold all 10^9 keys once. Part sizes are records x "
        f"{billion['record_bytes']:.0f} bytes (the mean JSON Lines record of the largest scale run). Then the "
        "merge's reads from Redis and its plan (`merge_plan`, both layouts), without S3. Redis memory is "
        f"`used_memory`. Measured {billion['date']} (load average before: {billion['load']}).",
        "",
        "| layout | shards | LISTs | plan s | planner peak RSS | Redis empty | Redis planned | Redis every shard done "
        "| parts | complete s | merge reads s | merge plan ms | dataset files (max parts per upload) | single result |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- | --- |",
    ]
    mib = lambda b: f"{b / 2**20:.1f} MiB"  # noqa: E731
    for r in rows:
        lines.append(
            f"| {r['layout']} | {r['shards']:,} | {r['lists']:,} | {r['plan_s']:.1f} | {r['plan_rss_mb']:.0f} MB | "
            f"{mib(r['redis_empty_bytes'])} | {mib(r['redis_planned_bytes'])} | {mib(r['redis_done_bytes'])} | "
            f"{r['parts']:,} | {r['complete_s']:.1f} | {r['merge_redis_read_s']:.2f} | {r['merge_plan_s'] * 1000:.0f} | "
            f"{r['dataset_files']:,} of {r['file_size'] / 2**30:.0f} GiB ({r['dataset_max_parts']:,}) | "
            f"{r['single']}, {r['single_parts']:,} parts per upload |")
    lines += ["", "LISTs are the planner's: the LISTs the endpoint served during `plan` less the two one-key "
                  "checks of the source and output buckets. 'complete s' and 'merge reads s' depend on the build of "
                  "complete-shards that ran (`--complete-shards`, by default the one in `--bin-dir`), and every "
                  "time here depends on the machine's load (above): read time figures as upper bounds.", ""]
    if operator:
        lines += [f"Operator: {operator['text']}", ""]
    lines += ["| claim | measured | met |", "| --- | --- | --- |"]
    for claim, text, met in billion_claims(rows, operator):
        lines.append(f"| {claim} | {text} | {dict([(True, '**met**'), (False, '**missed**'), (None, '–')])[met]} |")
    return lines


E2E_HEADING = "## End to end in the e2e cluster"
# Starts the line a full run puts under each section it carried over (and
# replaces on the next run rather than stacking a second one).
CARRIED = "_Carried over from an earlier BENCHMARKS.md"


def split_sections(text):
    """`text` cut before each '## ' heading: (what precedes the first,
    [(heading, block)]); that part and the blocks, joined, are `text`."""
    head, *blocks = re.split(r"(?m)^(?=## )", text)
    return head, [(b.split("\n", 1)[0].rstrip(), b) for b in blocks]


def join_blocks(head, blocks):
    """head + blocks, one blank line at least between each two, so that a
    block that ended the file (one newline) can be followed."""
    out = head
    for block in blocks:
        if out and not out.endswith("\n\n"):
            out = out.rstrip("\n") + "\n\n"
        out += block
    return out


def splice_sections(text, sections):
    """Put each rendered section (a list of lines starting with its '## '
    heading) into `text`: in place of the section with that heading, else
    after the section spliced before it (rendered order is kept), else
    before the e2e section (else at the end). Untouched sections stay as
    they were, byte for byte."""
    head, blocks = split_sections(text)
    at = None
    for lines in sections:
        block = "\n".join(lines).rstrip("\n") + "\n\n"
        headings = [h for h, _ in blocks]
        if lines[0] in headings:
            at = headings.index(lines[0])
            blocks[at] = (lines[0], block)
            continue
        if at is not None:
            at += 1
        else:
            at = headings.index(E2E_HEADING) if E2E_HEADING in headings else len(blocks)
        blocks.insert(at, (lines[0], block))
    return join_blocks(head, [b for _, b in blocks])


def mark_carried(block, date):
    """A section kept by a full run that did not measure it: a line under
    its heading says so (an earlier run's line is replaced)."""
    heading, _, body = block.partition("\n")
    body = body.lstrip("\n")
    if body.startswith(CARRIED):
        body = body.partition("\n")[2].lstrip("\n")
    return f"{heading}\n\n{CARRIED}: not measured in the run of {date}._\n\n{body}"


def full_report(res, old):
    """A full run's BENCHMARKS.md: the rendered sections spliced into the
    `old` file, whose other sections (written by hand, measured by another
    recipe or an earlier run) stay where they were, marked as carried over;
    the header names them."""
    produced = split_sections(render_markdown(res))[1]
    kept = split_sections(old)[1]
    ours = {h for h, _ in produced}
    carried = [h for h, _ in kept if h not in ours]
    head = "\n".join(render_header(res, carried)) + "\n"
    blocks = [mark_carried(b, res["date"]) if h in carried else b for h, b in kept]
    text = splice_sections(join_blocks(head, blocks), [b.split("\n") for _, b in produced])
    return text.rstrip("\n") + "\n"


def render_scale_chart(scale, path):
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


def note_key(target):
    for key in ("Go", "multiprocessing", "naive", "hyper loop (HEAD/s", "hyper loop (HEADs", "LIST pages", "LIST",
                "Redis", "end to end"):
        if key in target:
            return key
    return target


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


NOTES_FILE = os.path.join(HERE, "notes.json")


def int_keys(d):
    """JSON turns the shard and worker counts used as keys into strings: back to ints."""
    return {int(k) if isinstance(k, str) and k.isdigit() else k: v for k, v in d.items()}


def read_e2e(res, path, redis_per_object):
    """Take the e2e figure from `path` into `res` and judge every target."""
    e2e = None
    res["e2e_path"] = path
    res.pop("e2e_missing", None)
    if os.path.exists(path):
        e2e, why = parse_e2e(open(path).read())
        if e2e:
            e2e["written"] = datetime.datetime.fromtimestamp(
                os.path.getmtime(path), datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
        else:
            res["e2e_missing"] = f"{path} is unusable: {why}"
    else:
        res["e2e_missing"] = f"no {path}"
    res["e2e"] = e2e
    res["targets"] = evaluate_targets(res["clients"], res.get("list"), redis_per_object, e2e, res.get("list_latency"))


def read_text(path, missing):
    """The file's text, or `missing` when there is no file."""
    if not os.path.exists(path):
        return missing
    with open(path) as f:
        return f.read()


def write_reports(res, args):
    if args.chart:
        render_chart(res, args.chart)
        res["chart"] = os.path.relpath(args.chart, os.path.dirname(os.path.abspath(args.markdown or args.chart)))
    if args.markdown:
        # Sections this run does not produce (hand-written, measured apart)
        # are kept from the file it replaces.
        old = read_text(args.markdown, "")
        with open(args.markdown, "w") as f:
            f.write(full_report(res, old))


def when():
    return (datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
            ", ".join(f"{x:.2f}" for x in os.getloadavg()))


def read_operator_figures(args):
    """What `just bench-operator` last measured (None: never here)."""
    if not os.path.exists(args.operator_figures):
        return None
    with open(args.operator_figures) as f:
        return json.load(f)


def scale_section(bench, args):
    date, load = when()
    scale = {"rows": bench.scale(), "date": date, "load": load, "latency_us": args.latency_us}
    scale["operator"] = read_operator_figures(args)
    if args.scale_chart:
        render_scale_chart(scale, args.scale_chart)
        base = os.path.dirname(os.path.abspath(args.markdown or args.scale_chart))
        scale["chart"] = os.path.relpath(args.scale_chart, base)
    return scale


def saturation_section(bench, args):
    date, load = when()
    if args.family_only:
        m = SATURATION_MODEL
        sat = {"objects": 0, "model": m, "concurrency": SATURATION_CONCURRENCY, "rows": [], "date": date,
               "load": load}
    else:
        sat = dict(bench.saturation(), date=date, load=load)
    if args.family_rows != "none":
        sat["family"] = store_family.measure(
            bench, args, saturation_row, log, run_client, SATURATION_PLAN,
            args.objects or SIZES[args.mode]["saturation"])
    if args.saturation_chart and sat["rows"]:
        render_saturation_chart(sat, args.saturation_chart)
        base = os.path.dirname(os.path.abspath(args.markdown or args.saturation_chart))
        sat["chart"] = os.path.relpath(args.saturation_chart, base)
    return sat


def list_latency_section(bench, args):
    date, load = when()
    return dict(bench.list_latency(), date=date, load=load)


def billion_section(bench, args, scale):
    date, load = when()
    rows = scale["rows"] if scale else []
    record_bytes = rows[-1]["record_bytes"] if rows and rows[-1]["record_bytes"] else args.record_bytes
    billion = {"rows": bench.billion(round(record_bytes)), "date": date, "load": load,
               "latency_us": args.latency_us, "record_bytes": record_bytes}
    billion["operator"] = read_operator_figures(args)
    return billion


def incremental_section(bench, args):
    date, load = when()
    sizes = args.incremental_objects or ([args.objects] if args.objects else SIZES[args.mode]["incremental"])
    section = incremental.measure(bench, args, sizes, log, run_client, Endpoint, free_port, wait_until,
                                  CREDENTIALS, CONCURRENCY)
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
            res["scale"] = scale_section(bench, args)
        if "billion" in sections:
            res["billion"] = billion_section(bench, args, res.get("scale"))
        if "saturation" in sections:
            res["saturation"] = saturation_section(bench, args)
        if "list_latency" in sections:
            res["list_latency"] = list_latency_section(bench, args)
        if "incremental" in sections:
            res["incremental"] = incremental_section(bench, args)
    finally:
        shutil.rmtree(bench.tmp, ignore_errors=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(res, f, indent=1, default=str)
    rendered = []
    if "scale" in res:
        rendered.append(render_scale(res["scale"], res["scale"].get("chart")))
    if "billion" in res:
        rendered.append(render_billion(res["billion"]))
    if "saturation" in res:
        rendered.append(render_saturation(res["saturation"], res["saturation"].get("chart")))
    if "list_latency" in res:
        rendered.append(render_list_latency(res["list_latency"]))
    if "incremental" in res:
        rendered.append(incremental.render(res["incremental"]))
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
    p.add_argument("--clients", default=",".join(c for c, _ in CLIENTS),
                   help="comma-separated subset of: " + ", ".join(c for c, _ in CLIENTS))
    p.add_argument("--no-list", action="store_true", help="skip the LIST streams figure")
    p.add_argument("--no-fleet", action="store_true", help="skip the fleet figures")
    p.add_argument("--no-scale", action="store_true", help="skip the scale table (10^5..10^7 objects)")
    p.add_argument("--no-billion", action="store_true", help="skip the 10^9-key figures")
    p.add_argument("--no-saturation", action="store_true", help="skip the saturation figures")
    p.add_argument("--no-list-latency", action="store_true",
                   help="skip the LIST latency figures (one worker, 100 ms LIST pages, shards in flight)")
    p.add_argument("--no-incremental", action="store_true",
                   help="skip the incremental figures (full scan, 1 %% changed, incremental scan; bench/incremental.py)")
    p.add_argument("--incremental-objects", type=lambda v: [int(x) for x in v.split(",")],
                   help="objects per incremental row, comma-separated (default: --objects, else 100,000 quick; 10^6 and 10^7 full)")
    p.add_argument("--minio", default=os.path.join(CACHE, "bin", "minio"),
                   help="the MinIO binary the incremental section writes its datasets to")
    p.add_argument("--family-rows", default="all",
                   help="the saturation section's family of store models to run: all, quick (three rows), none, "
                        "or names separated by commas (bench/store_family.py)")
    p.add_argument("--family-objects", type=int, help="objects per family row (default: the saturation size)")
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
        res = json.load(open(args.render_from), object_hook=int_keys)
        # The e2e figure is read again: `just bench` may have measured it anew.
        fleet = res.get("fleet")
        read_e2e(res, args.e2e, max(w["redis_per_object"] for w in fleet["workers"].values()) if fleet else None)
        if os.path.exists(NOTES_FILE):
            res["notes"] = json.load(open(NOTES_FILE))
        write_reports(res, args)
        return 0
    if not args.bin_dir:
        p.error("--bin-dir is required (unless --render-from)")
    if args.only:
        return measure_sections(args, [x.strip() for x in args.only.split(",") if x.strip()], p)
    args.runs = args.runs or RUNS[args.mode]
    args.clients = [c.strip() for c in args.clients.split(",") if c.strip()]
    unknown = set(args.clients) - {c for c, _ in CLIENTS}
    if unknown:
        p.error(f"unknown clients: {', '.join(sorted(unknown))}")

    bench = Bench(args)
    res = {"mode": args.mode, "runs": args.runs, "latency_us": args.latency_us, "machine": machine(),
           "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")}
    try:
        res["clients"], res["all_runs"], res["skipped"] = bench.clients()
        if "rclone" in res["skipped"] and os.path.exists(args.rclone_error):
            res["skipped"]["rclone"] = "did not install: " + open(args.rclone_error).read().strip()[-300:]
        res["ratios"] = ratios_to_ours(res["clients"])
        if not args.no_list:
            res["list"] = bench.list_streams()
            res["list"]["efficiency"] = list_efficiency(res["list"]["rates"])
        redis_per_object = None
        if not args.no_fleet:
            workers, n = bench.fleet()
            res["fleet"] = {"objects": n, "workers": workers}
            redis_per_object = max(w["redis_per_object"] for w in workers.values())
        if not args.no_scale:
            res["scale"] = scale_section(bench, args)
        if not args.no_billion:
            res["billion"] = billion_section(bench, args, res.get("scale"))
        if not args.no_saturation:
            res["saturation"] = saturation_section(bench, args)
        if not args.no_list_latency:
            res["list_latency"] = list_latency_section(bench, args)
        if not args.no_incremental:
            res["incremental"] = incremental_section(bench, args)
    finally:
        shutil.rmtree(bench.tmp, ignore_errors=True)
    read_e2e(res, args.e2e, redis_per_object)
    res["machine"]["load_after"] = os.getloadavg()
    if os.path.exists(args.rclone):
        v = subprocess.run([args.rclone, "version"], capture_output=True, text=True).stdout.split("\n")[0]
        res["rclone_version"] = v.replace("rclone ", "").replace("-DEV", "")
    if os.path.exists(NOTES_FILE):
        res["notes"] = json.load(open(NOTES_FILE))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(res, f, indent=1, default=str)
    write_reports(res, args)
    for t in res["targets"]:
        log(f"{ {True: 'MET   ', False: 'MISSED', None: 'n/a   '}[t['met']]} {t['target']}: {t['text']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
