#!/usr/bin/env python3
"""A timeline of one e2e benchmark scan: what the store served and where the
machine's CPU went, sampled twice a second until the file STOP exists.

    sample.py STATS_URL OUT.jsonl STOP

Each line of OUT is one sample: `{"t": epoch seconds, "stats": synthetic-s3's
/_stats, "cpu": {pid: [process name, CPU seconds used so far]}, "machine": CPU
seconds the machine was busy so far}`. CPU is read from
/proc/PID/stat of every process this one can see (the local cluster's pods,
kubelet, apiserver and the test servers share its PID namespace):
timeline.py turns the differences into a share per component.
Only counters are read; nothing here touches the scan.
"""
import json
import os
import sys
import time
import urllib.request

TICKS = os.sysconf("SC_CLK_TCK")
EVERY = 0.5


def cpu_by_process():
    """{pid: [comm, utime + stime in seconds]} of every visible process.
    By process, not by name: timeline.py sums what each used while it was
    seen, so a process that ended (a worker pod after its last shard) keeps
    the time it used until its last sample."""
    used = {}
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open(f"/proc/{pid}/stat") as f:
                stat = f.read()
        except OSError:
            continue
        # comm is in parentheses and may itself hold spaces or parentheses.
        name = stat[stat.index("(") + 1:stat.rindex(")")]
        fields = stat[stat.rindex(")") + 2:].split()
        used[pid] = [name, (int(fields[11]) + int(fields[12])) / TICKS]
    return used


def machine_busy():
    """CPU seconds the whole machine spent not idle so far (/proc/stat):
    beside the processes above, it shows what others ran meanwhile."""
    with open("/proc/stat") as f:
        fields = [int(v) for v in f.readline().split()[1:]]
    idle = fields[3] + (fields[4] if len(fields) > 4 else 0)
    return (sum(fields[:8]) - idle) / TICKS


def stats(url):
    try:
        with urllib.request.urlopen(url, timeout=2) as r:
            return json.loads(r.read())
    except (OSError, ValueError):
        return None


def main():
    url, out, stop = sys.argv[1:4]
    with open(out, "w") as f:
        while not os.path.exists(stop):
            began = time.time()
            f.write(json.dumps({"t": began, "stats": stats(url), "cpu": cpu_by_process(),
                                "machine": machine_busy()}) + "\n")
            f.flush()
            time.sleep(max(0.0, EVERY - (time.time() - began)))


if __name__ == "__main__":
    main()
