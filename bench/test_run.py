#!/usr/bin/env python3
"""Unit tests of the harness's pure logic: medians, ratios, target
evaluation, the e2e file. Run: python3 bench/test_run.py (the Rust test
bench/tests/harness.rs runs it too)."""
import os
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import run  # noqa: E402


def client(head_per_s, cpu_per_100k, objects=100_000):
    cpu = cpu_per_100k * objects / 100_000
    wall = objects / head_per_s
    return run.figures(objects, wall, cpu, 10_240, None)


class Logic(unittest.TestCase):
    def test_median_ignores_missing_values(self):
        self.assertEqual(run.median([3, 1, 2]), 2)
        self.assertEqual(run.median([4, None, 1, 2, 3]), 2.5)
        self.assertIsNone(run.median([None]))

    def test_figures(self):
        f = run.figures(50_000, 2.0, 0.5, 2048, 4096)
        self.assertEqual(f["head_per_s"], 25_000)
        self.assertEqual(f["cpu_per_100k"], 1.0)
        self.assertEqual(f["cores_used"], 0.25)
        # HEAD/s per client core = HEAD/s / (CPU-s / wall-s).
        self.assertEqual(f["head_per_core_s"], 25_000 / 0.25)
        self.assertEqual((f["maxrss_mb"], f["tree_rss_mb"]), (2, 4))

    def test_summary_is_the_median_of_each_figure(self):
        runs = [client(100, 10), client(300, 30), client(200, 20)]
        s = run.summarize(runs)
        self.assertAlmostEqual(s["head_per_s"], 200)
        self.assertAlmostEqual(s["cpu_per_100k"], 20)
        self.assertEqual(s["runs"], 3)

    def test_ratios_compare_to_ours(self):
        clients = {"ours-fast": client(20_000, 5), "go-pool": client(2_000, 20)}
        r = run.ratios_to_ours(clients)
        self.assertAlmostEqual(r["go-pool"]["head_per_s"], 10)
        self.assertAlmostEqual(r["go-pool"]["cpu_per_100k"], 0.25)
        self.assertAlmostEqual(r["go-pool"]["head_per_core_s"], 4)
        self.assertAlmostEqual(r["ours-fast"]["head_per_s"], 1)
        self.assertEqual(run.ratios_to_ours({"go-pool": client(1, 1)}), {"go-pool": {}})
        self.assertIsNone(run.ratio(1, 0))

    def test_targets(self):
        clients = {
            "ours-fast": client(40_000, 2.0),
            "hyper-loop": client(45_000, 1.5),
            "go-pool": client(2_000, 5.0),  # ours: 2.5x per core, 0.4x CPU: met
            "boto3-multiprocessing": client(900, 10.0),  # 5x per core: missed
            "boto3-naive": client(300, 200.0),  # 100x per core: met
        }
        listing = {"rates": {1: 100, 2: 190, 4: 300, 8: 310}, "busy": {1: 0.2, 2: 0.4, 4: 0.6, 8: 0.9}}
        e2e, _ = run.parse_e2e('{"objects": 1000, "seconds": 1, "raw_head_per_s": 1100}')
        t = {x["target"]: x for x in run.evaluate_targets(clients, listing, 0.004, e2e)}
        self.assertTrue(t["HEAD/s per client core >= 2x Go pool"]["met"])
        self.assertTrue(t["CPU per 100k HEADs <= 0.5x Go's"]["met"])
        self.assertFalse(t["HEAD/s per client core >= 6x boto3 multiprocessing"]["met"])
        self.assertTrue(t["HEAD/s per client core >= 80x naive boto3"]["met"])
        self.assertTrue(t["fast path >= 0.8x bare hyper loop (HEAD/s, same in-flight)"]["met"])
        self.assertFalse(t["fast path >= 0.8x bare hyper loop (HEADs per CPU-second)"]["met"])
        self.assertTrue(t["2-shard LIST >= 0.8 x 2 x one stream"]["met"])
        self.assertFalse(t["4-shard LIST >= 0.8 x 4 x one stream"]["met"])
        # Saturated: reported, not judged.
        eight = t["8-shard LIST >= 0.8 x 8 x one stream"]
        self.assertIsNone(eight["met"])
        self.assertIn("saturated", eight["text"])
        self.assertTrue(t["Redis operations per object < 0.01"]["met"])
        self.assertTrue(t["end to end >= 0.8x raw HEAD rate"]["met"])

    def test_missing_figures_are_not_measured(self):
        t = run.evaluate_targets({"ours-fast": client(1, 1)}, None, None, None)
        self.assertTrue(all(x["met"] is None for x in t))
        self.assertTrue(any(x["target"].startswith("end to end") for x in t))
        redis = [x for x in run.evaluate_targets({}, None, 0.01, None) if x["target"].startswith("Redis")]
        self.assertFalse(redis[0]["met"], "0.01 is not below 0.01")

    def test_e2e_file(self):
        data, why = run.parse_e2e('{"objects": 20000, "seconds": 10, "raw_head_per_s": 4000, "cluster": "local"}')
        self.assertIsNone(why)
        self.assertEqual(data["objects_per_s"], 2000)
        self.assertEqual(data["ratio"], 0.5)
        self.assertEqual(data["cluster"], "local")
        for bad in ["nope", "[]", '{"objects": 1, "seconds": 0, "raw_head_per_s": 1}',
                    '{"objects": 1, "seconds": 1}', '{"objects": true, "seconds": 1, "raw_head_per_s": 1}']:
            data, why = run.parse_e2e(bad)
            self.assertIsNone(data, bad)
            self.assertTrue(why, bad)

    def test_list_efficiency(self):
        self.assertEqual(run.list_efficiency({1: 100, 2: 150, 4: 400}), {1: 1.0, 2: 0.75, 4: 1.0})


if __name__ == "__main__":
    unittest.main()
