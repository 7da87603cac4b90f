"""The benchmark harness behind `just bench`, one module per concern;
bench/run.py (the command line and which sections a run measures) is its
entry point.

Layers, lowest first. A module imports only from layers below its own, never
from its own or one above, so there is no import cycle (test_run.py checks
it against LAYERS):

1. common: paths, the bucket, credentials, sizes by mode; pure helpers of
   figures and reports (median, ratio, summarize, judge, fmt), the log.
2. processes: child processes (run_client), the synthetic-s3 Endpoint, a
   free port, waiting for a server, a private Redis's counters.
3. bench: Bench, one run's context (binaries, environment, temporary
   directory), the versitygw output store and one scan through the queue
   (fleet_once), which every fleet section shares.
4. The sections, each measuring, judging and rendering its own part of
   BENCHMARKS.md: clients, list_streams, fleet, scale, billion (10^9 keys),
   list_latency, incremental, store_family (the saturation section's family
   of store models), e2e (the end-to-end figure).
5. What builds on a section: operator_rss (the operator's peak RSS, with
   the 10^9 section's keyspace), saturation (with its store_family),
   targets (every target, from the clients, LIST streams and LIST latency
   sections), splice (BENCHMARKS.md as sections; the e2e section closes it).
6. report: the whole BENCHMARKS.md, the sections `--only` splices, reading
   results back and writing the reports.
"""

LAYERS = [
    ["common"],
    ["processes"],
    ["bench"],
    ["clients", "list_streams", "fleet", "scale", "billion", "list_latency", "incremental", "store_family", "e2e"],
    ["operator_rss", "saturation", "targets", "splice"],
    ["report"],
]
