"""One harness run's context (Bench): the binaries (--bin-dir, --worker,
--complete-shards), the clients' environment and a temporary directory; and
what every fleet section shares: the versitygw output store (start_store)
and one scan through the Redis queue, plan + W x run + merge against a
synthetic-s3 endpoint, checked against its manifest (fleet_once).

May import: common, processes.
"""
import json
import os
import subprocess
import tempfile
import threading
import time

from .common import BUCKET, CREDENTIALS
from .processes import Endpoint, client_env, free_port, redis_commands, redis_commandstats, redis_memory, \
    run_client, wait_until


FLEET_CONCURRENCY = 32  # per worker: one worker is bound by latency, not CPU


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
        # A HEAD per object (the check below wants `heads >= n`), whatever
        # synthetic-s3's listing ever carries; `plan` and `merge` take no
        # metadata source.
        heads = ["--metadata-source", "head"]
        try:
            wait_until(lambda: redis_commands(port) is not None, "redis-server")
            before = redis_commands(port)
            started = time.monotonic()
            plan = run_client([worker, "plan", *common, *endpoint, "--bucket", BUCKET,
                               "--output", f"s3://bench-out/{scan}/", *plan_args], env=self.env)
            planned = time.monotonic()
            extra = None
            if run_fleet:
                cpu, rss, extra = run_fleet([worker, "run", *common, *endpoint, *heads], url, scan)
            else:
                cpu, rss = self.run_workers(workers, [worker, "run", *common, *endpoint, *heads])
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


def delete_result(s3, bucket, manifest):
    """Remove a merged result (10^7 records are gigabytes on the versitygw disk)."""
    for f in manifest.get("files") or []:
        location = f.get("location", "")
        if location.startswith(f"s3://{bucket}/"):
            s3.delete_object(Bucket=bucket, Key=location[len(f"s3://{bucket}/"):])
