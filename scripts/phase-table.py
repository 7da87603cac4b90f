#!/usr/bin/env python3
"""Print the phases of a run (scripts/phase.sh's TSV) as the Markdown table
docs/testing.md keeps: wall minutes, CPU minutes and the cores they kept busy.

Usage: phase-table.py PHASES.tsv [--total SECONDS]
Phases that ran beside others (the background tool builds) overlap the
foreground ones, so their wall times add up to more than the run's; --total
gives the run's own wall time for the last row.
"""
import argparse
import csv


def rows(path):
    with open(path, newline="") as f:
        for name, wall, cpu, status in csv.reader(f, delimiter="\t"):
            yield name, float(wall), float(cpu), int(status)


def table(phases, total=None):
    out = ["| phase | wall min | CPU min | cores busy | exit |", "| --- | ---: | ---: | ---: | ---: |"]
    cpu_sum = 0.0
    for name, wall, cpu, status in phases:
        cpu_sum += cpu
        busy = f"{cpu / wall:.1f}" if wall > 0 else "-"
        out.append(f"| {name} | {wall / 60:.1f} | {cpu / 60:.1f} | {busy} | {status} |")
    if total is not None:
        out.append(f"| **whole run** | **{total / 60:.1f}** | {cpu_sum / 60:.1f} | {cpu_sum / total:.1f} | |")
    return "\n".join(out)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("phases")
    parser.add_argument("--total", type=float)
    args = parser.parse_args()
    print(table(list(rows(args.phases)), args.total))


if __name__ == "__main__":
    main()
