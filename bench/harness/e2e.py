"""The end-to-end figure: `$BUCKETSCAN_CACHE/bench/e2e.json` (written by
`e2e/run.sh bench`) parsed and checked, and its section of the report.

May import: common.
"""
import json

from .common import CACHE


E2E_FIELDS = ("objects", "seconds", "raw_head_per_s")
E2E_HEADING = "## End to end in the e2e cluster"


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


def render(res):
    """The e2e section (Markdown lines, its '## ' heading first): the figure
    from the e2e file, or why it is missing."""
    lines = [E2E_HEADING, ""]
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
            if heads_alone(e2e):
                lines += ["", heads_alone(e2e)]
            elif isinstance(scanning, (int, float)) and scanning > 0:
                rate = e2e["objects"] / scanning
                lines += ["", f"The scanning phase alone: {rate:,.0f} objects/s, "
                              f"{rate / e2e['raw_head_per_s']:.2f}x the raw HEAD rate."]
        lines += render_timeline(e2e.get("timeline"))
        lines += render_cpu_per_head(e2e, (res.get("machine") or {}).get("nproc"))
        lines += render_incremental(res.get("e2e_incremental"))
    else:
        lines.append(f"not measured in this run (`e2e/run.sh bench` writes it; `just bench` runs it first): {res.get('e2e_missing')}.")
    return lines


def heads_alone(e2e):
    """The HEADs' own rate against the raw one, from the store's counter
    (the timeline), or None without one. Not the scanning phase's: the
    operator's phases overlap (the merge Job starts while the last shards
    run), so objects over the phase's seconds overstates the rate."""
    t = e2e.get("timeline")
    if not isinstance(t, dict) or not t.get("steady_head_per_s"):
        return None
    return (f"The HEADs alone, from the store's own counter: {t['heading_s']} s at a steady "
            f"{t['steady_head_per_s']:,}/s, {t['steady_head_per_s'] / e2e['raw_head_per_s']:.2f}x the raw HEAD rate "
            "(the phases overlap: the merge Job starts while the last shards run, so the objects over the "
            "scanning phase's seconds would overstate it).")


def render_cpu_per_head(e2e, cores):
    """Whether the cluster spends more CPU per HEAD than one process, or
    has fewer cores for it: the workers' and the store's CPU per HEAD at
    the steady rate, against the raw run's (the machine's `cores` at the
    raw rate, an upper bound: that run had the machine alone), and the
    cores the cluster's other processes took or left idle. Markdown
    lines, none without a timeline or the machine's cores."""
    t = e2e.get("timeline")
    if not isinstance(t, dict) or not t.get("steady_head_per_s") or not cores:
        return []
    by = t.get("cpu_cores_by_component") or {}
    fleet = by.get("workers", 0.0) + by.get("store (synthetic-s3)", 0.0)
    if fleet <= 0:
        return []
    fleet_us = fleet / t["steady_head_per_s"] * 1e6
    raw_us = cores / e2e["raw_head_per_s"] * 1e6
    others = max(0.0, sum(by.values()) - fleet)
    idle = max(0.0, cores - t.get("machine_cores_busy", sum(by.values())))
    return [
        "",
        f"CPU per HEAD: the workers and the store spent {fleet:.2f} cores at the steady rate, {fleet_us:.0f} µs "
        f"a HEAD, against at most {raw_us:.0f} µs in the raw run (the machine's {cores} cores at its rate): "
        f"{fleet_us / raw_us:.2f}x. The cluster's other processes took {others:.2f} cores and {idle:.2f} stayed "
        f"idle, so the workers and the store had {fleet / cores:.2f}x the raw run's cores.",
    ]


def render_timeline(t):
    """Where the scanning phase went (e2e/sample.py's samples, summed up by
    e2e/timeline.py): Markdown lines, none without a timeline."""
    if not isinstance(t, dict) or "steady_head_per_s" not in t:
        return []
    cores = t.get("cpu_cores_by_component") or {}
    return [
        "",
        f"Timeline (the store's HEAD counter and every process's CPU, sampled twice a second): the first HEAD "
        f"{t['first_head_after_start_s']} s after the scan's start, then {t['heading_s']} s of HEADs; the rate "
        f"reached 90 % of its steady {t['steady_head_per_s']:,}/s (median, peak {t['peak_head_per_s']:,}/s) "
        f"{t['climb_to_steady_s']} s after the first HEAD, and the last 5 % of the HEADs took "
        f"{t['tail_last_5pct_s']} s. While HEADing, the machine's cores were {t.get('machine_cores_busy', '?')} "
        f"busy, {t['cores_busy']} of them by these long-lived processes:",
        "",
        "| component | cores |",
        "| --- | ---: |",
        *[f"| {name} | {used:.2f} |" for name, used in cores.items()],
    ]


def render_incremental(row):
    """The cluster's incremental scan (issue 30, item 7): Markdown lines,
    none when that run made none."""
    if not isinstance(row, dict) or "claims" not in row:
        return []
    lines = [
        "",
        f"Incremental in the cluster ({row.get('written', 'date unknown')}; `e2e/run.sh bench` after the scan "
        "above): the bucket changed by 1 % (added, deleted, content rewritten, metadata replaced in equal "
        "parts), then a BucketScan with `spec.baseline: {scan: e2e-bench}`, judged against a full scan of the "
        "changed bucket by one `bucketscan-worker scan`, record by record, and its change set against the "
        f"store's own list of the changes: {row['incremental']['heads']:,} HEADs "
        f"({row['heads_share'] * 100:.2f} % of the full scan's {row['full']['heads']:,}) in "
        f"{row['incremental']['wall_s']:.0f} s ({row['wall_ratio']:.2f}x the full scan's "
        f"{row['full']['wall_s']:.0f} s); {row.get('changes_made', 0):,} changes made.",
        "",
        "| claim | met |",
        "| --- | --- |",
        *[f"| {claim} | {'met' if met else 'MISSED'} |" for claim, met in row["claims"]],
    ]
    lines += render_incremental_timeline(row.get("timeline"))
    for what in ("records_diff", "changes_diff"):
        if row.get(what):
            lines += ["", f"{what}: {row[what]}"]
    return lines


def render_incremental_timeline(figure):
    """Where the cluster's incremental scan spent its seconds (its phases
    by the operator's events, its HEADs and CPU by e2e/sample.py):
    Markdown lines, none without them."""
    if not isinstance(figure, dict):
        return []
    phases, t = figure.get("phases_seconds") or {}, figure.get("timeline") or {}
    if not phases or "first_head_after_start_s" not in t:
        return []
    cores = t.get("cpu_cores_by_component") or {}
    top = ", ".join(f"{name} {used:.2f}" for name, used in list(cores.items())[:3])
    return [
        "",
        "Its timeline: " + ", ".join(f"{name} {secs:.1f} s" for name, secs in phases.items())
        + f" (the operator's events); the first HEAD {t['first_head_after_start_s']} s after its start, the "
        f"last {t['heading_s']} s later; while HEADing, the machine's cores were {t.get('machine_cores_busy', '?')} "
        f"busy ({top}).",
    ]
