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
            if isinstance(scanning, (int, float)) and scanning > 0:
                rate = e2e["objects"] / scanning
                lines += ["", f"The scanning phase alone: {rate:,.0f} objects/s, "
                              f"{rate / e2e['raw_head_per_s']:.2f}x the raw HEAD rate."]
    else:
        lines.append(f"not measured in this run (`e2e/run.sh bench` writes it; `just bench` runs it first): {res.get('e2e_missing')}.")
    return lines
