"""The operator's figures (issue 13, item 7 d; `--only operator`, `just
bench-operator`): the real operator planning and tracking a flat keyspace of
each scale size and of 10^9 keys against a kube-apiserver, its shards
completed by `complete-shards`; its peak RSS (VmHWM), the text the 10^9 and
scale sections show, and reading what an earlier run wrote.

May import: common, processes, bench, billion (its keyspace and plan settings).
"""
import json
import os
import shutil
import subprocess
import time

from .billion import BILLION, BILLION_LIST_BUDGET, BILLION_SHARDS
from .common import BUCKET, CACHE, CREDENTIALS, REPO, SIZES, log, when
from .processes import Endpoint, free_port, redis_commands, run_client, wait_until


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
            # The operator refuses loopback endpoints unless its allowlist
            # names them (EndpointNotAllowed): this one synthetic-s3 only.
            operator = subprocess.Popen(
                [b.binary("bucketscan-operator"), "--namespace", self.ns, "--metrics-addr",
                 f"127.0.0.1:{free_port()}", "--redis", url, "--plan-list-budget", str(BILLION_LIST_BUDGET),
                 "--allowed-endpoints", ep.url[len("http://"):]],
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


def read_operator_figures(args):
    """What `just bench-operator` last measured (None: never here)."""
    if not os.path.exists(args.operator_figures):
        return None
    with open(args.operator_figures) as f:
        return json.load(f)
