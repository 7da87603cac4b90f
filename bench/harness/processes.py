"""Child processes and the servers a measurement talks to: a free port,
running a client to its end with its CPU and peak RSS (run_client), one
synthetic-s3 endpoint (Endpoint), the clients' environment, waiting for a
server to come up, and a private redis-server's counters (commands, memory,
per-command calls).

May import: common.
"""
import json
import os
import re
import signal
import socket
import subprocess
import threading
import time

from .common import BUCKET, CREDENTIALS


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


def client_env():
    env = dict(os.environ)
    env.update(AWS_ACCESS_KEY_ID=CREDENTIALS[0], AWS_SECRET_ACCESS_KEY=CREDENTIALS[1], AWS_REGION="us-east-1",
               AWS_DEFAULT_REGION="us-east-1", AWS_EC2_METADATA_DISABLED="true")
    for k in ("AWS_PROFILE", "AWS_SESSION_TOKEN", "AWS_ENDPOINT_URL"):
        env.pop(k, None)
    return env


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
