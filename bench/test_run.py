#!/usr/bin/env python3
"""Unit tests of the harness's pure logic: medians, ratios, target
evaluation, the e2e file, the sections of BENCHMARKS.md a run writes. Run: python3 bench/test_run.py (the Rust test
bench/tests/harness.rs runs it too)."""
import argparse
import ast
import os
import re
import shutil
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import billion, clients, common, e2e, incremental, list_latency, list_streams, operator_rss, \
    report, saturation, scale, splice, store_family as fam, targets  # noqa: E402
import harness  # noqa: E402
import run  # noqa: E402

FIXTURES = os.path.join(os.path.dirname(os.path.abspath(__file__)), "fixtures")


def client(head_per_s, cpu_per_100k, objects=100_000):
    cpu = cpu_per_100k * objects / 100_000
    wall = objects / head_per_s
    return clients.figures(objects, wall, cpu, 10_240, None)


class Logic(unittest.TestCase):
    def test_median_ignores_missing_values(self):
        self.assertEqual(common.median([3, 1, 2]), 2)
        self.assertEqual(common.median([4, None, 1, 2, 3]), 2.5)
        self.assertIsNone(common.median([None]))

    def test_figures(self):
        f = clients.figures(50_000, 2.0, 0.5, 2048, 4096)
        self.assertEqual(f["head_per_s"], 25_000)
        self.assertEqual(f["cpu_per_100k"], 1.0)
        self.assertEqual(f["cores_used"], 0.25)
        # HEAD/s per client core = HEAD/s / (CPU-s / wall-s).
        self.assertEqual(f["head_per_core_s"], 25_000 / 0.25)
        self.assertEqual((f["maxrss_mb"], f["tree_rss_mb"]), (2, 4))

    def test_summary_is_the_median_of_each_figure(self):
        runs = [client(100, 10), client(300, 30), client(200, 20)]
        s = common.summarize(runs)
        self.assertAlmostEqual(s["head_per_s"], 200)
        self.assertAlmostEqual(s["cpu_per_100k"], 20)
        self.assertEqual(s["runs"], 3)

    def test_ratios_compare_to_ours(self):
        measured = {"ours-fast": client(20_000, 5), "go-pool": client(2_000, 20)}
        r = clients.ratios_to_ours(measured)
        self.assertAlmostEqual(r["go-pool"]["head_per_s"], 10)
        self.assertAlmostEqual(r["go-pool"]["cpu_per_100k"], 0.25)
        self.assertAlmostEqual(r["go-pool"]["head_per_core_s"], 4)
        self.assertAlmostEqual(r["ours-fast"]["head_per_s"], 1)
        self.assertEqual(clients.ratios_to_ours({"go-pool": client(1, 1)}), {"go-pool": {}})
        self.assertIsNone(common.ratio(1, 0))

    def test_targets(self):
        measured = {
            "ours-fast": client(40_000, 2.0),
            "hyper-loop": client(45_000, 1.5),
            "go-pool": client(2_000, 5.0),  # ours: 2.5x per core, 0.4x CPU: met
            "boto3-multiprocessing": client(900, 10.0),  # 5x per core: missed
            "boto3-naive": client(300, 200.0),  # 100x per core: met
        }
        listing = {"rates": {1: 100, 2: 190, 4: 300, 8: 310}, "busy": {1: 0.2, 2: 0.4, 4: 0.6, 8: 0.9}}
        e2e_figure, _ = e2e.parse_e2e('{"objects": 1000, "seconds": 1, "raw_head_per_s": 1100}')
        t = {x["target"]: x for x in targets.evaluate_targets(measured, listing, 0.004, e2e_figure)}
        self.assertTrue(t["HEAD/s per client core >= 2x Go pool"]["met"])
        # One target per quantity: CPU per HEAD is HEAD/s per core inverted.
        self.assertNotIn("CPU per 100k HEADs <= 0.5x Go's", t)
        self.assertNotIn("fast path >= 0.8x bare hyper loop (HEADs per CPU-second)", t)
        self.assertFalse(t["HEAD/s per client core >= 6x boto3 multiprocessing"]["met"])
        self.assertTrue(t["HEAD/s per client core >= 80x naive boto3"]["met"])
        self.assertTrue(t["fast path >= 0.8x bare hyper loop (HEAD/s, same in-flight)"]["met"])
        cpu = t["CPU per HEAD <= 1.5x the bare hyper loop's"]
        self.assertAlmostEqual(cpu["value"], 2.0 / 1.5)
        self.assertTrue(cpu["met"])
        heavy = dict(measured, **{"ours-fast": client(40_000, 2.5)})
        t_heavy = {x["target"]: x for x in targets.evaluate_targets(heavy, listing, 0.004, e2e_figure)}
        self.assertFalse(t_heavy["CPU per HEAD <= 1.5x the bare hyper loop's"]["met"], "1.67x")
        self.assertTrue(t["2-shard LIST >= 0.8 x 2 x one stream"]["met"])
        self.assertFalse(t["4-shard LIST >= 0.8 x 4 x one stream"]["met"])
        # Saturated: reported, not judged.
        eight = t["8-shard LIST >= 0.8 x 8 x one stream"]
        self.assertIsNone(eight["met"])
        self.assertIn("saturated", eight["text"])
        self.assertTrue(t["Redis operations per object < 0.01"]["met"])
        self.assertTrue(t["end to end >= 0.8x raw HEAD rate"]["met"])

    def test_missing_figures_are_not_measured(self):
        t = targets.evaluate_targets({"ours-fast": client(1, 1)}, None, None, None)
        self.assertTrue(all(x["met"] is None for x in t))
        self.assertTrue(any(x["target"].startswith("end to end") for x in t))
        redis = [x for x in targets.evaluate_targets({}, None, 0.01, None) if x["target"].startswith("Redis")]
        self.assertFalse(redis[0]["met"], "0.01 is not below 0.01")

    def test_e2e_file(self):
        data, why = e2e.parse_e2e('{"objects": 20000, "seconds": 10, "raw_head_per_s": 4000, "cluster": "local"}')
        self.assertIsNone(why)
        self.assertEqual(data["objects_per_s"], 2000)
        self.assertEqual(data["ratio"], 0.5)
        self.assertEqual(data["cluster"], "local")
        for bad in ["nope", "[]", '{"objects": 1, "seconds": 0, "raw_head_per_s": 1}',
                    '{"objects": 1, "seconds": 1}', '{"objects": true, "seconds": 1, "raw_head_per_s": 1}']:
            data, why = e2e.parse_e2e(bad)
            self.assertIsNone(data, bad)
            self.assertTrue(why, bad)

    def test_list_efficiency(self):
        self.assertEqual(list_streams.list_efficiency({1: 100, 2: 150, 4: 400}), {1: 1.0, 2: 0.75, 4: 1.0})


def fleet_figures(n, wall=10.0, cpu_per_100k=3.0, redis_peak=1_000_000, commands=None, merge_s=1.0):
    return {"objects": n, "workers": 2, "end_to_end_s": wall, "objects_per_s": n / (wall - 1.5),
            "cpu_per_100k": cpu_per_100k, "redis_peak_bytes": redis_peak,
            "redis_per_object": (commands if commands is not None else 1000) / n, "worker_rss_kb": 90 * 1024,
            "merge_s": merge_s, "plan_s": 0.5, "result_bytes": n * 180}


def billion_sample(layout="flat", shards=10_500, lists=11_000, plan_s=12.0, done=200 << 20, parts=21_000,
                   single_parts=900):
    plan = (plan_s, 3.0, 60 * 1024, 60 * 1024, "")
    complete = (40.0, 30.0, 120 * 1024, 120 * 1024, "")
    completed = {"shards": shards, "parts": parts, "objects": 10**9, "complete_s": 35.0,
                 "merge": {"redis_read_s": 2.0, "plan_s": 0.02, "dataset_files": 170,
                           "dataset_max_parts_per_upload": 130, "file_size": 1 << 30, "bytes": 180 * 10**9,
                           "single": "two-level", "single_parts_per_upload": single_parts}}
    return billion.billion_row(layout, plan, lists, {"used_memory": 1 << 20}, {"used_memory": 5 << 20},
                               {"used_memory": done, "used_memory_peak": done + 1}, complete, completed)


class Scale(unittest.TestCase):
    def test_a_row_is_the_cost_per_object(self):
        r = scale.scale_row(fleet_figures(1_000_000, wall=50.0, redis_peak=2_000_000, commands=5_000, merge_s=4.0))
        self.assertEqual(r["end_to_end_per_s"], 20_000)
        self.assertEqual(r["redis_peak_bytes_per_object"], 2.0)
        self.assertEqual(r["redis_per_object"], 0.005)
        self.assertEqual(r["merge_ms_per_100k"], 400)
        self.assertEqual(r["record_bytes"], 180)
        self.assertAlmostEqual(r["redis_peak_mib"], 2_000_000 / 2**20)

    def test_growth_compares_the_largest_n_with_the_smallest(self):
        rows = [scale.scale_row(fleet_figures(10**5, wall=10, cpu_per_100k=3.0, redis_peak=10**6, merge_s=1)),
                scale.scale_row(fleet_figures(10**7, wall=1000, cpu_per_100k=3.3, redis_peak=2 * 10**6,
                                              merge_s=200))]
        g = scale.scale_growth(rows)
        self.assertEqual(g["factor"], 100)
        self.assertAlmostEqual(g["ratios"]["worker CPU"], 1.1)
        self.assertAlmostEqual(g["ratios"]["wall time"], 1.0)
        self.assertAlmostEqual(g["ratios"]["Redis peak memory"], 0.02)
        self.assertAlmostEqual(g["ratios"]["merge time"], 2.0)
        self.assertIsNone(scale.scale_growth(rows[:1]))

    def test_the_section_has_a_row_per_n(self):
        rows = [scale.scale_row(fleet_figures(n)) for n in (10**5, 10**6)]
        lines = scale.render({"rows": rows, "date": "d", "load": "1.0", "latency_us": 1000}, "docs/scale.png")
        self.assertEqual(lines[0], scale.SCALE_HEADING)
        self.assertTrue(any(line.startswith("| 100,000 |") for line in lines))
        self.assertTrue(any(line.startswith("| 1,000,000 |") for line in lines))
        self.assertIn("![cost per object against N, log-log](docs/scale.png)", lines)
        self.assertTrue(any(line.startswith("| 100,000 |") and "| – |" in line for line in lines),
                        "no operator figure: a dash")
        operator = {"date": "d2", "by_objects": [{"objects": 10**5, "shards": 11, "rss_kb": 25 * 1024}]}
        lines = scale.render({"rows": rows, "date": "d", "load": "1.0", "latency_us": 1000,
                              "operator": operator})
        self.assertTrue(any(line.startswith("| 100,000 |") and "| 25 MiB |" in line for line in lines), lines)
        self.assertTrue(any(line.startswith("| 1,000,000 |") and "| – |" in line for line in lines), lines)
        self.assertTrue(any("measured d2." in line for line in lines))


class Billion(unittest.TestCase):
    def test_the_planner_s_lists_leave_out_the_source_bucket_s_check(self):
        # The output bucket's check goes on to the versitygw: synthetic-s3
        # counts only the source's.
        r = billion_sample(lists=15_001)
        self.assertEqual((r["lists"], r["lists_served"]), (15_000, 15_001))

    def test_claims_are_judged_against_the_issue_limits(self):
        good = {c: met for c, _, met in billion.billion_claims([billion_sample()], {"rss_kb": 100 * 1024})}
        self.assertTrue(all(good.values()), good)
        bad = billion_sample(shards=9_999, lists=15_003, plan_s=31, done=(1 << 30) + 1, single_parts=10_001)
        claims = {c: met for c, _, met in billion.billion_claims([bad], {"rss_kb": 257 * 1024})}
        self.assertFalse(any(claims.values()), claims)
        unmeasured = billion.billion_claims([billion_sample()], None)[-1]
        self.assertIsNone(unmeasured[2])

    def test_the_section_renders_every_layout(self):
        rows = [billion_sample(layout) for layout in billion.BILLION_LAYOUTS]
        lines = billion.render({"rows": rows, "date": "d", "load": "1", "latency_us": 1000,
                                "record_bytes": 180.0})
        self.assertEqual(lines[0], billion.BILLION_HEADING)
        for layout in billion.BILLION_LAYOUTS:
            self.assertTrue(any(line.startswith(f"| {layout} | 10,500 |") for line in lines), layout)
        self.assertIn("| 200.0 MiB |", "".join(lines))

    def test_a_run_with_the_output_store_says_what_it_adds_to_the_plan(self):
        section = {"rows": [billion_sample()], "date": "d", "load": "1", "latency_us": 1000, "record_bytes": 180.0}
        before = "\n".join(billion.render(section))
        self.assertIn("less the two one-key checks of the source and output buckets", before)
        self.assertNotIn("versitygw", before)
        now = "\n".join(billion.render(dict(section, output_store="versitygw", keys=billion.BILLION)))
        self.assertIn("its output bucket on a versitygw behind synthetic-s3's `--forward`", now)
        self.assertIn("less the one-key check of the source bucket", now)
        self.assertIn("'plan s' includes the store check", now)
        self.assertNotIn("--billion-keys", now)
        small = "\n".join(billion.render(dict(section, output_store="versitygw", keys=20_000)))
        self.assertIn("This run served 20,000 keys per layout, not 10^9 (`--billion-keys`", small)

    def test_the_operator_figure_is_its_peak_rss_and_the_phases_it_went_through(self):
        phases = operator_rss.dedupe(["(none)", "Planning", "Planning", "Scanning", "Scanning", "Merging"])
        self.assertEqual(phases, ["(none)", "Planning", "Scanning", "Merging"])
        f = operator_rss.operator_figures(80 * 1024, 10_400, phases, 95.0)
        self.assertEqual(f["rss_kb"], 80 * 1024)
        self.assertIn("10,400 shards", f["text"])
        self.assertIn("**80 MiB**", f["text"])
        self.assertIn("Planning → Scanning → Merging", f["text"])
        sizes = [{"objects": 100_000, "shards": 13, "rss_kb": 20 * 1024},
                 {"objects": 10_000_000, "shards": 64, "rss_kb": 22 * 1024}]
        f = operator_rss.operator_figures(80 * 1024, 10_400, phases, 95.0, sizes)
        self.assertEqual(f["by_objects"], sizes)
        self.assertIn("100,000 objects, 13 shards: 20 MiB; 10,000,000 objects, 64 shards: 22 MiB.", f["text"])

    def test_sections_are_spliced_in_place_or_before_the_e2e(self):
        text = "# B\n\n## A\n\na\n\n## End to end in the e2e cluster\n\ne\n"
        once = splice.splice_sections(text, [["## S", "", "one"]])
        self.assertEqual(once, "# B\n\n## A\n\na\n\n## S\n\none\n\n## End to end in the e2e cluster\n\ne\n")
        twice = splice.splice_sections(once, [["## S", "", "two"]])
        self.assertEqual(twice, once.replace("one", "two"))
        self.assertEqual(splice.splice_sections("# B\n", [["## S", "x"]]), "# B\n\n## S\nx\n\n")

    def test_a_new_section_follows_the_one_spliced_before_it(self):
        text = "# B\n\n## A\n\na\n\n## Z\n\nz\n\n## End to end in the e2e cluster\n\ne\n"
        out = splice.splice_sections(text, [["## A", "", "a2"], ["## S", "", "s"]])
        self.assertEqual(out, text.replace("a\n\n## Z", "a2\n\n## S\n\ns\n\n## Z"))


def report_res(date="2026-12-01 00:00 UTC"):
    """The least a full run's results hold for render_markdown."""
    measured = {"ours-fast": client(40_000, 2.0), "hyper-loop": client(45_000, 1.5)}
    for c in measured.values():
        c["endpoint_share"] = 0.2
    return {"mode": "full", "runs": 3, "date": date, "latency_us": 1000, "skipped": {},
            "machine": {"nproc": 2, "cpu": "cpu", "kernel": "k", "python": "3", "load_before": (1, 1, 1),
                        "load_after": (1, 1, 1)},
            "clients": measured, "ratios": clients.ratios_to_ours(measured), "e2e_missing": "no file",
            "targets": targets.evaluate_targets(measured, None, None, None)}


# A BENCHMARKS.md as a full run leaves it, then edited by hand: a section
# of its own between two the run produces, and one at the end. Only the
# harness's long-standing API is used, so that these fail on a harness
# that drops such sections rather than on a missing name.
E2E = "## End to end in the e2e cluster"
MARKER = "_Carried over from an earlier BENCHMARKS.md: not measured in the run of {}._"
HAND = "## Merge: by hand\n\nMeasured 2026-11-23 with merge-time.\n\n| parts | s |\n| 1,000 | 6.1 |\n"
LAST = "## Metadata from MinIO\n\nMeasured by hand.\n"


def old_report():
    text = report.render_markdown(report_res("2026-11-01 00:00 UTC"))
    text = text.replace(E2E, HAND + "\n" + E2E)
    return text.rstrip("\n") + "\n\n" + LAST


def full_run(old, date="2026-12-01 00:00 UTC"):
    """What a full run of `date` writes over `old`, through write_reports."""
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "BENCHMARKS.md")
        with open(path, "w") as f:
            f.write(old)
        report.write_reports(report_res(date), argparse.Namespace(chart=None, markdown=path))
        with open(path) as f:
            return f.read()


class Report(unittest.TestCase):
    def test_the_run_says_how_long_each_section_measured(self):
        # run.timed keeps a section's minutes even when it fails midway.
        res = {}
        self.assertEqual(run.timed(res, "clients", lambda x: x + 1, 1), 2)
        with self.assertRaises(ZeroDivisionError):
            run.timed(res, "scale", lambda: 1 / 0)
        self.assertEqual(sorted(res["section_seconds"]), ["clients", "scale"])
        line = report.section_times({"clients": 318.0, "scale": 1040.2})
        self.assertEqual(line, ["- minutes of measuring by section: clients 5.3, scale 17.3; 22.6 in all"])
        self.assertEqual(report.section_times(None), [])

    def test_a_section_the_run_does_not_produce_is_kept_where_it_was_and_marked(self):
        out = full_run(old_report())
        headings = re.findall(r"(?m)^## .*", out)
        self.assertEqual(headings[-1], "## Metadata from MinIO")
        self.assertEqual(headings[headings.index("## Merge: by hand") + 1], E2E)
        marker = MARKER.format("2026-12-01 00:00 UTC")
        self.assertIn(HAND.replace("\n\n", f"\n\n{marker}\n\n", 1), out)
        self.assertIn(LAST.replace("\n\n", f"\n\n{marker}\n\n", 1), out)
        self.assertEqual(out.count(marker), 2, "only the kept sections are marked")

    def test_a_produced_section_replaces_its_old_copy(self):
        out = full_run(old_report().replace("None missed in this run.", "old reasons"))
        self.assertNotIn("old reasons", out)
        self.assertEqual(out.count("## Why targets are missed"), 1)
        self.assertEqual(out.count("# Benchmarks\n"), 1)
        self.assertIn("on 2026-12-01 00:00 UTC.", out.split("\n## ")[0])

    def test_the_header_names_the_carried_sections(self):
        out = full_run(old_report())
        header = out.split("\n## ")[0]
        self.assertNotIn("Every figure below was measured in this one run", header)
        self.assertIn('except in the 2 section(s) carried over from earlier measurements, each marked so under its '
                      'heading: "Merge: by hand", "Metadata from MinIO".', header)
        fresh = full_run("").split("\n## ")[0]
        self.assertIn("Every figure below was measured in this one run", fresh)

    def test_a_section_carried_again_has_one_line_with_the_latest_date(self):
        twice = full_run(full_run(old_report(), "2026-11-30 00:00 UTC"))
        self.assertEqual(twice, full_run(old_report()))
        self.assertEqual(twice.count("_Carried over"), 2)
        self.assertNotIn("2026-11-30", twice)


def saturation_fleet(workers_at, rates, pending_until, endpoint):
    """A fleet run's figures: a tick every second with the workers and rate
    given per tick, shards pending until `pending_until` s."""
    ticks = [{"secs": float(i), "workers": w, "rate": r, "throttles": 0, "pending": 50 if i < pending_until else 0,
              "saturated": "RateFlat" if i > 20 and len(set(workers_at)) > 1 else None}
             for i, (w, r) in enumerate(zip(workers_at, rates))]
    return {"objects": 100_000, "objects_per_s": 4_000.0, "run_s": 25.0, "cpu_per_100k": 8.0,
            "endpoint": dict({"requests": 100_500, "slowdowns": 0, "internal_errors": 0, "resets": 0,
                              "queued_us": 50_000}, **endpoint),
            "fleet": {"ticks": ticks, "started": 6}}


class Saturation(unittest.TestCase):
    def test_the_steady_rate_is_after_the_last_change_while_work_was_pending(self):
        # 1, 2, 4 workers, then 6 from t=10; the rate ramps, then holds at
        # 4,800; the tail (t >= 30) has no pending work and a falling rate.
        workers = [1] * 4 + [2] * 3 + [4] * 3 + [6] * 25
        rates = [800] * 4 + [1_600] * 3 + [3_200] * 3 + [4_800] * 20 + [1_000] * 5
        row = saturation.saturation_row("autoscaled", None, saturation_fleet(workers, rates, 30,
                                                                     {"slowdowns": 100, "resets": 400}), 5_000)
        self.assertAlmostEqual(row["steady_rate"], 4_800)
        self.assertAlmostEqual(row["share_of_capacity"], 0.96)
        self.assertEqual(row["final_workers"], 6)
        self.assertEqual(row["steps"], 4, "the start and three changes")
        self.assertAlmostEqual(row["slowdown_share"], 100 / 100_500)
        self.assertAlmostEqual(row["retry_share"], 500 / 100_000)
        self.assertEqual(row["saturated"], "RateFlat")
        self.assertAlmostEqual(row["queued_ms"], 50 / 100_000)

    def test_a_late_last_change_falls_back_to_the_last_third_of_the_busy_time(self):
        workers = [2] * 28 + [3] * 2
        row = saturation.saturation_row("x", None, saturation_fleet(workers, [1_000] * 20 + [3_000] * 10, 30, {}), 5_000)
        self.assertAlmostEqual(row["steady_rate"], 3_000)

    def test_claims_and_the_section(self):
        steady = lambda rate, slow=0, workers=3: saturation.saturation_row(  # noqa: E731
            "x", None, saturation_fleet([workers] * 30, [rate] * 30, 30, {"slowdowns": slow}), 5_000)
        rows = [dict(steady(2_000), label="too few", fixed=2),
                dict(steady(4_900, 3_000, workers=16), label="too many", fixed=16),
                dict(steady(4_700), label="autoscaled")]
        sat = {"objects": 100_000, "model": saturation.SATURATION_MODEL, "concurrency": 2, "rows": rows, "date": "d",
               "load": "1"}
        claims = {c: met for c, _, met in saturation.saturation_claims(sat)}
        self.assertTrue(all(claims.values()), claims)
        rows[2] = dict(steady(4_000, 1_500), label="autoscaled")
        claims = {c.split(":")[1].strip()[:8]: met for c, _, met in saturation.saturation_claims(sat)}
        self.assertEqual(claims, {"steady r": False, "503s <= ": False, "retries ": True, "settles ": True,
                                  "its extr": True, "more 503": True, "below C ": True})
        # Sixteen workers that do scale past the autoscaled three: the knee was missed.
        rows[1] = dict(steady(14_000, 3_000, workers=16), label="too many", fixed=16)
        claims = {c.split(":")[1].strip()[:8]: met for c, _, met in saturation.saturation_claims(sat)}
        self.assertFalse(claims["its extr"])
        # The work left, not the autoscaler, shrinks the fleet at the end: no
        # adjustment, and the steady rate is the busy time's.
        tail = saturation.saturation_row("x", None, saturation_fleet([11] * 25 + [3] * 5, [4_700] * 25 + [900] * 5, 25,
                                                             {}), 5_000)
        self.assertEqual((tail["final_workers"], tail["steps"]), (11, 1))
        self.assertAlmostEqual(tail["steady_rate"], 4_700)
        # Too many without more 503s, too few as fast as the autoscaled: missed.
        rows[0] = dict(steady(4_000), label="too few", fixed=2)
        rows[1] = dict(steady(4_900, 1_000, workers=16), label="too many", fixed=16)
        claims = {c.split(":")[1].strip()[:8]: met for c, _, met in saturation.saturation_claims(sat)}
        self.assertEqual((claims["more 503"], claims["below C "]), (False, False))
        # ... unless it kept the store's queue longer (other tenants wait).
        rows[1] = dict(rows[1], queued_ms=3.0)
        rows[2] = dict(rows[2], queued_ms=1.0)
        claims = {c.split(":")[1].strip()[:8]: met for c, _, met in saturation.saturation_claims(sat)}
        self.assertTrue(claims["more 503"])
        rows[1] = dict(rows[1], queued_ms=1.2)
        claims = {c.split(":")[1].strip()[:8]: met for c, _, met in saturation.saturation_claims(sat)}
        self.assertFalse(claims["more 503"], "a queue only a little longer is noise")
        rows[0], rows[1] = dict(steady(2_000), label="too few", fixed=2), dict(steady(4_900, 3_000, workers=16),
                                                                            label="too many", fixed=16)
        lines = saturation.render(sat, "docs/saturation.png")
        self.assertEqual(lines[0], saturation.SATURATION_HEADING)
        self.assertTrue(any(line.startswith("| too many | 16 |") for line in lines))
        self.assertTrue(any(line.startswith("| autoscaled | 1..16 (settled at 3) |") for line in lines))
        self.assertIn("![objects/s and workers over time, by fleet](docs/saturation.png)", lines)


def list_latency_sample(rates, n=150_000):
    """The LIST latency section from {(LIST median ms, shards in flight): objects/s}, through the harness's own
    row and ratio functions (fleet_once's figures made up)."""
    pages = dict(list_latency.LIST_LATENCY_PAGES)
    rows = []
    for (ms, shards), rate in rates.items():
        f = {"objects": n, "objects_per_s": rate, "run_s": n / rate, "plan_s": 1.0, "cpu_per_100k": 4.0,
             "worker_rss_kb": 50 * 1024,
             "endpoint": {"lists": n // 1000 + 40, "heads": n}}
        rows.append(list_latency.list_latency_row((ms, pages[ms]), shards, f))
    return {"objects": n, "model": list_latency.LIST_LATENCY_MODEL, "concurrency": 256, "plan": list_latency.LIST_LATENCY_PLAN,
            "runs": 3, "date": "d", "load": "1", "rows": list_latency.list_latency_ratios(rows)}


GOOD = {(5.0, 1): 16_000, (5.0, 4): 17_000, (100.0, 1): 9_600, (100.0, 4): 16_150}


class ListLatency(unittest.TestCase):
    def test_each_row_is_compared_with_the_fast_list_row_of_the_same_shards_in_flight(self):
        rows = {(r["list_median_ms"], r["shards_in_flight"]): r for r in list_latency_sample(GOOD)["rows"]}
        self.assertEqual(rows[(5.0, 1)]["vs_base"], 1.0)
        self.assertEqual(rows[(5.0, 4)]["vs_base"], 1.0)
        self.assertAlmostEqual(rows[(100.0, 1)]["vs_base"], 0.6)
        self.assertAlmostEqual(rows[(100.0, 4)]["vs_base"], 0.95)
        # One stream lists 1,000 keys per median page: 10,000/s at 100 ms, S times that with S streams.
        self.assertAlmostEqual(rows[(100.0, 1)]["list_bound"], 10_000)
        self.assertAlmostEqual(rows[(100.0, 4)]["list_bound"], 40_000)
        self.assertEqual((rows[(100.0, 4)]["list_p99_ms"], rows[(100.0, 4)]["heads"]), (150.0, 150_000))
        # Without its baseline a row has no ratio.
        alone = list_latency.list_latency_ratios([rows[(100.0, 4)]])
        self.assertIsNone(alone[0]["vs_base"])

    def test_claims_judge_four_shards_against_the_limit_and_show_one_shard_capped(self):
        claims = list_latency.list_latency_claims(list_latency_sample(GOOD))
        self.assertEqual(claims[0]["target"], "100 ms LIST pages, 4 shards in flight >= 0.9x the 5 ms LIST rate")
        self.assertEqual([c["met"] for c in claims], [True, True])
        self.assertEqual(claims[0]["text"], "0.95x (16,150 against 17,000 objects/s)")
        self.assertEqual(claims[1]["text"], "0.56x (9,600 against 17,000 objects/s with 4 shard(s) in flight; one "
                                            "LIST stream's bound: 10,000/s; against 5 ms pages with 1 shard in "
                                            "flight: 0.60x)")
        # The cap is against the best 5 ms rate: one shard in flight may be capped by more than LIST.
        capped = list_latency.list_latency_claims(list_latency_sample(
            {(5.0, 1): 7_400, (5.0, 4): 14_200, (100.0, 1): 6_200, (100.0, 4): 12_800}))[1]
        self.assertAlmostEqual(capped["value"], 6_200 / 14_200)
        self.assertTrue(capped["met"])
        # Capped with 4 shards too, and not capped with one: both missed.
        bad = list_latency.list_latency_claims(list_latency_sample(GOOD | {(100.0, 4): 15_000, (100.0, 1): 15_500}))
        self.assertEqual([c["met"] for c in bad], [False, False])
        # Not measured: neither judged.
        for ll in (None, {"rows": []}, list_latency_sample({(100.0, 4): 16_000})):
            self.assertEqual([c["met"] for c in list_latency.list_latency_claims(ll)], [None, None], ll)

    def test_the_target_is_judged_with_the_others(self):
        ll = list_latency_sample(GOOD | {(100.0, 4): 14_000})
        t = {x["target"]: x for x in targets.evaluate_targets({}, None, None, None, ll)}
        target = t[list_latency.LIST_LATENCY_TARGET]
        self.assertFalse(target["met"])
        self.assertAlmostEqual(target["value"], 14 / 17)
        self.assertIsNone({x["target"]: x for x in targets.evaluate_targets({}, None, None, None)}
                          [list_latency.LIST_LATENCY_TARGET]["met"])
        # Its explanation is its own, not the LIST streams'.
        self.assertEqual(targets.note_key(list_latency.LIST_LATENCY_TARGET), "LIST pages")

    def test_the_section_has_a_row_per_page_latency_and_shards_in_flight_and_the_claims(self):
        ll = list_latency_sample(GOOD)
        lines = list_latency.render(ll)
        self.assertEqual(lines[0], list_latency.LIST_LATENCY_HEADING)
        self.assertEqual(list_latency.LIST_LATENCY_HEADING, "## LIST latency: shards in flight (issue 14, item 2)")
        text = "\n".join(lines)
        for row in ["| 5 / 20 ms | 1 | 16,000 | 1.00x | 200,000/s | 4.00 | 50 MB | 190 | 9.4 |",
                    "| 5 / 20 ms | 4 | 17,000 | 1.00x | 800,000/s |",
                    "| 100 / 150 ms | 1 | 9,600 | 0.60x | 10,000/s |",
                    "| 100 / 150 ms | 4 | 16,150 | 0.95x | 40,000/s |",
                    "| claim | measured | met |",
                    "| 100 ms LIST pages, 4 shards in flight >= 0.9x the 5 ms LIST rate | 0.95x (16,150 against "
                    "17,000 objects/s) | **met** |"]:
            self.assertIn(row, text)
        self.assertIn("150,000 objects", text)
        self.assertIn("`--target-shards 16 --min-shard-objects 1000`", text)
        # A full run's report has the section and the target.
        res = report_res()
        res["list_latency"] = ll
        res["targets"] = targets.evaluate_targets(res["clients"], None, None, None, ll)
        text = report.render_markdown(res)
        self.assertIn(list_latency.LIST_LATENCY_HEADING + "\n", text)
        self.assertIn("| 100 ms LIST pages, 4 shards in flight >= 0.9x the 5 ms LIST rate | 0.95x", text.split(
            "\n## ", 2)[1])
        self.assertNotIn(list_latency.LIST_LATENCY_HEADING, report.render_markdown(report_res()))


class StoreFamily(unittest.TestCase):
    """The saturation section's family of store models (bench/store_family.py)."""

    def test_a_store_past_what_this_machine_drives_is_scaled_in_time(self):
        row = ("100k", 100_000, 0.5, 0.01, None, None, "flat")
        driven, flags, concurrency, f = fam.scaled(row)
        self.assertEqual((driven, f), (fam.DRIVEN_MAX, 20.0))
        # The queue holds as many requests at both scales: 0.5 ms x 100k = 10 ms x 5k.
        self.assertEqual(flags["queue_limit_ms"], 10.0)
        self.assertEqual(flags["throttle_share"], 0.01)
        # Each worker brings C' / 8: 2 in flight of 3.2 ms each, the model's
        # mean (log-normal: above its median) and the client's own time.
        mean_ms = flags["head_median_ms"] * fam.MEAN_OVER_MEDIAN + fam.CLIENT_MS
        self.assertAlmostEqual(concurrency / (mean_ms / 1000), driven / fam.WORKERS_AT_C, delta=1.0)
        self.assertAlmostEqual(flags["head_p99_ms"] / flags["head_median_ms"], fam.P99_OVER_MEDIAN, delta=0.01)
        self.assertIn("--throttle-share", fam.model_flags(flags))
        small = fam.scaled(("1k", 1_000, 5.0, 0.0, None, None, "flat"))
        self.assertEqual((small[0], small[3], small[1]["queue_limit_ms"]), (1_000, 1.0, 5.0))
        self.assertNotIn("throttle_share", small[1])
        prefix = fam.scaled(("p", 5_000, 5.0, 0.0, 0.5, None, "prefixes"))[1]
        self.assertEqual((prefix["prefix_limit"], prefix["partition_chars"]), (2_500, 2))

    def test_a_per_prefix_row_s_bucket_has_room_for_c_across_its_prefixes(self):
        # A per-prefix limit below C on a bucket of one prefix caps the
        # store itself below C: the row could never meet 0.9 C (it was so:
        # "nested" keys at 450,000 objects all fall under 0000/).
        for row in fam.FAMILY:
            if row[4]:
                self.assertEqual(row[6], "prefixes", row[0])
                self.assertGreaterEqual(16 * row[4], 1.0, row[0])

    def row(self, **kw):
        r = {"label": "x", "share_of_capacity": 0.95, "slowdown_share": 0.004, "retry_share": 0.005,
             "steps": 6, "final_workers": 9, "saturated": "Governed", "message": "m",
             "saturated_at": [("Governed", 4_800.0)], "sporadic_share": 0.001}
        r.update(kw)
        return r

    def test_every_row_is_judged_by_the_same_claims_and_says_why_it_falls_short(self):
        claims, why = fam.judge(self.row(), 5_000)
        self.assertTrue(all(m for _, m in claims), claims)
        self.assertEqual(why, "")
        claims, why = fam.judge(self.row(share_of_capacity=0.4, saturated="RateFlat",
                                         message="the rate stopped growing",
                                         saturated_at=[("RateFlat", 2_000.0)]), 5_000)
        self.assertEqual([m for _, m in claims], [False, True, True, True, False])
        self.assertIn("held by RateFlat: the rate stopped growing", why)
        self.assertIn("StoreSaturated (RateFlat) at 2,000/s, below the knee", why)
        # Where the store's queue refuses random arrivals below C, its knee
        # is there: StoreSaturated at 0.7 C is not early at 0.71 reachable.
        claims, _ = fam.judge(self.row(reachable=0.71, saturated_at=[("Throttling", 3_500.0)]), 5_000)
        self.assertTrue(claims[-1][1], claims)
        claims, _ = fam.judge(self.row(reachable=0.71, saturated_at=[("Throttling", 2_500.0)]), 5_000)
        self.assertFalse(claims[-1][1], claims)
        # The early one is named, not the first said.
        _, why = fam.judge(self.row(saturated_at=[("Governed", 4_800.0), ("RateFlat", 2_000.0)]), 5_000)
        self.assertIn("StoreSaturated (RateFlat) at 2,000/s, below the knee", why)
        _, why = fam.judge(self.row(share_of_capacity=0.6, final_workers=16, saturated=None), 5_000)
        self.assertIn("all 16 workers ran", why)
        # A queue too short for any client to meet both claims says so.
        _, why = fam.judge(self.row(share_of_capacity=0.36, reachable=0.45, queue_ms=0.5, scale=1.0,
                                    saturated=None), 5_000)
        self.assertIn("the store's queue (2.5 requests) refuses over 1 % of random arrivals above 0.45 C: no "
                      "client meets both claims; the fleet reached 0.80 of that", why)
        _, why = fam.judge(self.row(slowdown_share=0.03, sporadic_share=0.01), 5_000)
        self.assertIn("503s 3.00 % (1.00 % sporadic, 2.00 % from the store's queue)", why)

    def test_busy_ends_when_the_queue_first_runs_short(self):
        t = lambda secs, workers, pending: {"secs": secs, "workers": workers, "pending": pending}
        ticks = [t(0, 1, 250), t(1, 9, 100), t(2, 16, 20), t(3, 16, 10), t(4, 1, 1)]
        self.assertEqual(fam.busy_ticks(ticks), ticks[:3], "a shard handed back at the end is not busy")

    def test_rows_are_named_even_when_a_name_holds_a_comma(self):
        self.assertEqual(fam.row_names("base,100k store, sporadic 1 %,small store"),
                         ["base", "100k store, sporadic 1 %", "small store"])
        self.assertEqual(fam.row_names("short queue, sporadic 0.1 %"), ["short queue, sporadic 0.1 %"])
        with self.assertRaises(SystemExit):
            fam.row_names("base,no such store")

    def test_a_slower_store_s_row_has_fewer_objects_for_the_same_run_time(self):
        # 450,000 at the driven maximum; a fifth at 1,000/s; about half where
        # the queue lets no client past 0.45 C; never none.
        self.assertEqual(fam.row_objects(450_000, 5_000, 5_000, 1.0), 450_000)
        self.assertEqual(fam.row_objects(450_000, 1_000, 5_000, 1.0), 90_000)
        self.assertEqual(fam.row_objects(450_000, 5_000, 5_000, 0.45), 225_000)
        self.assertEqual(fam.row_objects(450_000, 1_000, 5_000, 0.45), 45_000)
        self.assertEqual(fam.row_objects(100, 1_000, 5_000, 0.1), 1_000)
        # Each row's duration at what it can reach stays within a factor of
        # two of the base row's, across the whole family.
        base = 450_000 / 5_000
        for row in fam.FAMILY:
            driven, flags, _, _ = fam.scaled(row)
            reach = fam.reachable(flags["queue_limit_ms"], driven)
            secs = fam.row_objects(450_000, driven, fam.DRIVEN_MAX, reach) / (min(reach, 0.9) / 0.9 * driven)
            self.assertTrue(0.5 * base <= secs <= 2 * base, (row[0], secs))

    def test_what_a_queue_lets_random_arrivals_reach(self):
        # 25 requests of room (5 ms at 5,000/s): 0.9 C is refused well under
        # 1 %; 2.5 requests (0.5 ms): 1 % is refused from about 0.45 C.
        self.assertLess(fam.refused_share(0.9, 25), 0.01)
        self.assertGreater(fam.refused_share(0.9, 2.5), 0.05)
        self.assertEqual(fam.reachable(50.0, 5_000), 1.0)
        self.assertTrue(0.40 <= fam.reachable(0.5, 5_000) <= 0.50)
        self.assertLess(fam.refused_share(0.3, 2.5), fam.refused_share(0.6, 2.5), "refusals grow with the load")

    def test_the_family_is_one_table(self):
        r = self.row(nominal=100_000, driven=5_000, queue_ms=0.5, sporadic=0.01, profile=None, prefix_share=None)
        r["claims"], r["why"] = fam.judge(r, 5_000)
        lines = fam.render({"objects": 20_000, "rows": [r, dict(r, label="y")], "driven_max": 5_000})
        table = [l for l in lines if l.startswith("| x") or l.startswith("| y")]
        self.assertEqual(len(table), 2)
        self.assertIn("| 100,000 (5,000) | 20,000 | 0.5 ms | 1 % | – | 0.95 | 9 |", table[0])
        lines = fam.render({"objects": 20_000, "rows": [dict(r, reachable=0.45)], "driven_max": 5_000})
        self.assertIn("| 1 % | 0.45 C | 0.95 |", lines[-1])
        self.assertIn("| 5/5 | – |", table[0])
        self.assertEqual(fam.render(None), [])
        names = [row[0] for row in fam.FAMILY]
        self.assertTrue(set(fam.QUICK) <= set(names))
        self.assertEqual(len(names), len(set(names)))


class Incremental(unittest.TestCase):
    def row(self, **over):
        r = {"objects": 1_000_000, "full": {"wall_s": 40.0, "heads": 1_000_000},
             "incremental": {"wall_s": 4.0, "heads": 7_500}, "full_changed": {"wall_s": 41.0},
             "heads_share": 0.0075, "wall_ratio": 0.1, "wall_ratio_changed": 0.098, "baseline_bytes_read": 2**28,
             "records_equal": True, "records_diff": None, "changes_exact": True, "changes_diff": None}
        r.update(over)
        r["claims"] = incremental.judge(r)
        return r

    def test_the_disk_a_row_needs_is_two_datasets_and_a_margin(self):
        self.assertEqual(incremental.disk_needed(10_000_000), 5_720_000_000)

    def test_claims_hold_at_the_limits_and_fail_past_them(self):
        self.assertTrue(all(m for _, m in self.row(heads_share=0.02, wall_ratio=0.15)["claims"]))
        missed = [c for c, m in self.row(heads_share=0.021, wall_ratio=0.2, records_equal=False)["claims"] if not m]
        self.assertEqual(len(missed), 3, missed)

    def test_record_streams_compare_to_the_first_difference(self):
        a = [{"key": "a", "size": 1}, {"key": "b", "size": 2}]
        self.assertIsNone(incremental.first_difference(iter(a), iter(list(a))))
        self.assertIn("'b'", incremental.first_difference(a, [a[0], {"key": "b", "size": 3}]))
        self.assertIn("one side ends", incremental.first_difference(a, a[:1]))
        self.assertIn("one side ends", incremental.first_difference(a[:1], a))

    def test_a_change_set_is_exact_only_when_every_change_is_there_with_its_kind(self):
        made = [("a", "added"), ("b", "removed")]
        self.assertIsNone(incremental.change_set_difference(iter(made), made))
        why = incremental.change_set_difference([("a", "added"), ("b", "content_changed")], made)
        self.assertIn("content_changed", why)
        self.assertIn("removed", why)

    def test_the_section_renders_its_rows_and_claims(self):
        section = {"rows": [self.row(), self.row(objects=10_000_000, changes_exact=False, changes_diff="2 missing")],
                   "date": "2026-11-27 08:00 UTC", "load": "5.0", "latency_us": 1000, "concurrency": 256,
                   "share": 0.01, "seed": 30}
        text = "\n".join(incremental.render(section))
        self.assertTrue(text.startswith(incremental.HEADING))
        self.assertIn("| 1,000,000 | 40.0 s | 1,000,000 | 4.0 s | 7,500 | 0.75 % | 0.100x", text)
        self.assertIn("shared", text)
        self.assertIn("10,000,000 objects: 2 missing", text)
        self.assertEqual(incremental.render({"rows": []}), [])
        # run.py puts it in its report and splices it alone (--only).
        spliced = splice.splice_sections("# Benchmarks\n\n## Method\n\nx\n", [incremental.render(section)])
        self.assertIn(incremental.HEADING, spliced)


def render_fixture():
    """BENCHMARKS.md as `run.py --render-from` writes it from
    fixtures/results-full.json (every section, built by the harness's own row
    functions) over fixtures/BENCHMARKS.old.md (a produced section to
    replace, hand-written ones to keep, one carried before), with the e2e
    file of fixtures/ and its notes. The temporary directory's path is
    replaced by $TMP."""
    with tempfile.TemporaryDirectory() as tmp:
        markdown, e2e_path = os.path.join(tmp, "BENCHMARKS.md"), os.path.join(tmp, "e2e.json")
        shutil.copy(os.path.join(FIXTURES, "BENCHMARKS.old.md"), markdown)
        shutil.copy(os.path.join(FIXTURES, "e2e.json"), e2e_path)
        os.utime(e2e_path, (1_790_000_000, 1_790_000_000))  # the e2e figure's date is its file's
        notes, report.NOTES_FILE = report.NOTES_FILE, os.path.join(FIXTURES, "notes.json")
        try:
            run.main(["--render-from", os.path.join(FIXTURES, "results-full.json"), "--markdown", markdown,
                      "--e2e", e2e_path])
        finally:
            report.NOTES_FILE = notes
        with open(markdown) as f:
            return f.read().replace(tmp, "$TMP")


class Rendering(unittest.TestCase):
    """The whole report, byte for byte: fixtures/BENCHMARKS.expected.md was
    written by the harness before it became a package (bench/run.py alone),
    so a change of any section's text or order, of splicing or of carrying
    shows here. After a deliberate change of the report, rewrite it:
    BENCH_UPDATE_EXPECTED=1 python3 bench/test_run.py Rendering, and read
    the diff."""

    EXPECTED = os.path.join(FIXTURES, "BENCHMARKS.expected.md")

    def test_the_report_from_a_results_json_is_the_expected_one(self):
        text = render_fixture()
        if os.environ.get("BENCH_UPDATE_EXPECTED") == "1":
            with open(self.EXPECTED, "w") as f:
                f.write(text)
        with open(self.EXPECTED) as f:
            expected = f.read()
        self.assertEqual(text, expected)
        # No placeholder left unformatted (a string part without its f, as
        # the saturation section's once printed "{sat['concurrency']}").
        self.assertEqual(re.findall(r"\{\w+\[[^}]*\]\}", text), [])
        # The fixture holds every section, so none of them is left out.
        headings = re.findall(r"(?m)^## .*", text)
        for heading in [scale.SCALE_HEADING, billion.BILLION_HEADING, saturation.SATURATION_HEADING,
                        list_latency.LIST_LATENCY_HEADING, incremental.HEADING, e2e.E2E_HEADING,
                        "## Merge: by hand", "## Hot path: by hand", "## Metadata from MinIO"]:
            self.assertEqual(headings.count(heading), 1, heading)
        self.assertIn("### The family of store models (issue 29)", text)

    def test_only_splices_each_measured_section_in_place(self):
        res = report.read_results(os.path.join(FIXTURES, "results-full.json"))
        sections = report.render_sections(res)
        self.assertEqual([s[0] for s in sections], [scale.SCALE_HEADING, billion.BILLION_HEADING,
                                                    saturation.SATURATION_HEADING, list_latency.LIST_LATENCY_HEADING,
                                                    incremental.HEADING])
        with open(os.path.join(FIXTURES, "BENCHMARKS.old.md")) as f:
            old = f.read()
        out = splice.splice_sections(old, sections)
        headings = re.findall(r"(?m)^## .*", out)
        # Scale in place of its old copy, the new ones after it, the rest where they were.
        self.assertEqual(headings, ["## Targets", "## Merge: by hand", scale.SCALE_HEADING, billion.BILLION_HEADING,
                                    saturation.SATURATION_HEADING, list_latency.LIST_LATENCY_HEADING,
                                    incremental.HEADING, "## Hot path: by hand", e2e.E2E_HEADING,
                                    "## Metadata from MinIO"])
        self.assertNotIn("An old scale table", out)
        self.assertIn("An old e2e figure, replaced.", out, "--only leaves the sections it did not measure")


class Layers(unittest.TestCase):
    """The harness package's modules import one way only (harness/__init__.py)."""

    def imports(self, path):
        """The package modules `path` imports (`from . import x`, `from .x import y`)."""
        found = set()
        with open(path) as f:
            tree = ast.parse(f.read())
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.level == 1:
                found |= {node.module} if node.module else {a.name for a in node.names}
        return found

    def test_every_module_imports_only_from_lower_layers(self):
        rank = {m: i for i, layer in enumerate(harness.LAYERS) for m in layer}
        folder = os.path.dirname(harness.__file__)
        modules = sorted(f[:-3] for f in os.listdir(folder) if f.endswith(".py") and f != "__init__.py")
        self.assertEqual(sorted(rank), modules, "every module has a layer in harness.LAYERS")
        for m in modules:
            for imported in self.imports(os.path.join(folder, m + ".py")):
                self.assertLess(rank[imported], rank[m], f"{m} imports {imported}, not below it")

    def test_the_check_sees_an_upward_import(self):
        with tempfile.NamedTemporaryFile("w", suffix=".py") as f:
            f.write("from .report import render_markdown\nfrom . import common, splice\n")
            f.flush()
            self.assertEqual(self.imports(f.name), {"report", "common", "splice"})


class E2ETimeline(unittest.TestCase):
    """e2e/timeline.py's timeline of the bench scan and its rendering."""

    @staticmethod
    def timeline_module():
        import importlib.util
        path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "e2e", "timeline.py")
        spec = importlib.util.spec_from_file_location("e2e_timeline", path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        return module

    def test_a_process_that_ended_keeps_the_cpu_it_used(self):
        t = self.timeline_module()
        samples = [
            {"t": 0.0, "stats": {"heads": 0}, "cpu": {"1": ["bucketscan-work", 1.0], "2": ["synthetic-s3", 5.0]},
             "machine": 10.0},
            {"t": 1.0, "stats": {"heads": 100}, "cpu": {"1": ["bucketscan-work", 1.5], "2": ["synthetic-s3", 5.2]},
             "machine": 11.0},
            {"t": 2.0, "stats": {"heads": 1100}, "cpu": {"1": ["bucketscan-work", 2.5], "2": ["synthetic-s3", 5.6],
                                                        "3": ["bucketscan-work", 0.4]}, "machine": 12.5},
            # The workers ended; the store is still seen.
            {"t": 3.0, "stats": {"heads": 2000}, "cpu": {"2": ["synthetic-s3", 6.0]}, "machine": 14.0},
        ]
        used = t.used_by_process(samples[1:])
        self.assertEqual(used["1"], ("bucketscan-work", 1.0), "seen until t=2: 1.5 -> 2.5")
        self.assertEqual(used["3"], ("bucketscan-work", 0.4), "started meanwhile: from zero")
        line = t.timeline(samples, 0.5)
        self.assertEqual(line["first_head_after_start_s"], 0.5)
        self.assertEqual(line["heading_s"], 2.0)
        self.assertEqual(line["peak_head_per_s"], 1000)
        self.assertEqual(line["cpu_cores_by_component"]["workers"], 0.7)
        self.assertEqual(line["machine_cores_busy"], 1.5)

    def test_the_timeline_renders_beside_the_e2e_figure(self):
        lines = e2e.render_timeline({"first_head_after_start_s": 1.0, "heading_s": 40.0, "climb_to_steady_s": 0.5,
                                     "steady_head_per_s": 25000, "peak_head_per_s": 30000, "tail_last_5pct_s": 2.0,
                                     "cores_busy": 1.8, "machine_cores_busy": 1.95,
                                     "cpu_cores_by_component": {"workers": 0.9, "store (synthetic-s3)": 0.8}})
        text = "\n".join(lines)
        self.assertIn("steady 25,000/s", text)
        self.assertIn("| workers | 0.90 |", text)
        self.assertEqual(e2e.render_timeline(None), [])

    def test_the_incremental_scan_in_the_cluster_renders_its_timeline(self):
        row = {"claims": [["wall time <= 0.15x the full scan's", False]], "incremental": {"heads": 75, "wall_s": 11.0},
               "full": {"heads": 10_000, "wall_s": 40.0}, "heads_share": 0.0075, "wall_ratio": 0.275,
               "timeline": {"phases_seconds": {"planning": 1.06, "scanning": 7.5, "merging": 3.1},
                            "timeline": {"first_head_after_start_s": 3.2, "heading_s": 5.0, "machine_cores_busy": 1.9,
                                         "cpu_cores_by_component": {"workers": 1.08, "results store": 0.46,
                                                                    "store": 0.25, "redis": 0.02}}}}
        text = "\n".join(e2e.render_incremental(row))
        self.assertIn("planning 1.1 s, scanning 7.5 s, merging 3.1 s", text)
        self.assertIn("the first HEAD 3.2 s after its start, the last 5.0 s later", text)
        self.assertIn("(workers 1.08, results store 0.46, store 0.25)", text)
        del row["timeline"]
        self.assertNotIn("Its timeline", "\n".join(e2e.render_incremental(row)))

    def test_the_heads_rate_and_cpu_per_head_come_from_the_timeline_not_the_phases(self):
        # Phases that overlap: objects over the scanning phase's seconds
        # would say 1.25x; the store's counter says 0.75x.
        figure = {"objects": 1_000_000, "seconds": 50.0, "raw_head_per_s": 40_000.0, "ratio": 0.5,
                  "objects_per_s": 20_000.0, "phases_seconds": {"planning": 2.0, "scanning": 20.0, "merging": 28.0},
                  "timeline": {"first_head_after_start_s": 2.0, "heading_s": 33.3, "climb_to_steady_s": 0.5,
                               "steady_head_per_s": 30_000, "peak_head_per_s": 35_000, "tail_last_5pct_s": 1.0,
                               "cores_busy": 1.8, "machine_cores_busy": 1.9,
                               "cpu_cores_by_component": {"workers": 1.0, "store (synthetic-s3)": 0.5,
                                                          "redis": 0.3}}}
        text = "\n".join(e2e.render({"e2e": figure, "e2e_path": "e2e.json", "machine": {"nproc": 2}}))
        self.assertNotIn("The scanning phase alone", text)
        self.assertIn("33.3 s at a steady 30,000/s, 0.75x the raw HEAD rate", text)
        # 1.5 cores / 30,000 HEAD/s = 50 µs; 2 cores / 40,000 HEAD/s = 50 µs.
        self.assertIn("spent 1.50 cores at the steady rate, 50 µs a HEAD, against at most 50 µs", text)
        self.assertIn("other processes took 0.30 cores and 0.10 stayed idle", text)
        self.assertIn("had 0.75x the raw run's cores", text)
        # Without a timeline, the phase's figure as before, and no CPU line.
        del figure["timeline"]
        text = "\n".join(e2e.render({"e2e": figure, "e2e_path": "e2e.json", "machine": {"nproc": 2}}))
        self.assertIn("The scanning phase alone: 50,000 objects/s, 1.25x", text)
        self.assertNotIn("CPU per HEAD", text)


if __name__ == "__main__":
    unittest.main()
