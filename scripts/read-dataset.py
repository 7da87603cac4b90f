#!/usr/bin/env python3
"""Read a bucketscan result with DuckDB (an engine no one here wrote) and print
what it holds as one JSON object, for the Rust tests to compare with the
seeded bucket:

  {"records": {KEY: {"size": N, "status": S, "user_metadata": {..}}},
   "rows": N, "per_file": {FILE: ROWS}, "columns": [NAME, ...]}

Usage: read-dataset.py jsonl|csv FILE...   (files may be gzip: .gz)
Exits non-zero (never skips) when DuckDB is missing or a file does not parse.
"""
import json
import sys

import duckdb


def relation(con, fmt, files):
    if fmt == "csv":
        # Every column as text: the test compares exact strings, and RFC 4180
        # quoting (commas, quotes, newlines inside keys) must hold.
        return con.read_csv(
            files, header=True, all_varchar=True, delimiter=",", quotechar='"',
            escapechar='"', filename=True, strict_mode=True, sample_size=-1,
        )
    if fmt == "jsonl":
        return con.sql(
            "SELECT key, status, CAST(size AS VARCHAR) AS size, "
            "CAST(metadata AS VARCHAR) AS user_metadata, filename "
            "FROM read_json($files, format='newline_delimited', filename=true, "
            "columns={key: 'VARCHAR', status: 'VARCHAR', size: 'UBIGINT', metadata: 'JSON'})",
            params={"files": files},
        )
    raise SystemExit(f"unknown format {fmt!r}")


def main():
    fmt, files = sys.argv[1], sys.argv[2:]
    if not files:
        raise SystemExit("no files given")
    con = duckdb.connect()
    rel = relation(con, fmt, files)
    columns = [c for c in rel.columns if c != "filename"]
    rows = rel.select("key, status, size, user_metadata, filename").fetchall()
    records, per_file = {}, {}
    for key, status, size, meta, filename in rows:
        if key in records:
            raise SystemExit(f"key {key!r} appears twice")
        records[key] = {"size": int(size), "status": status, "user_metadata": json.loads(meta)}
        per_file[filename] = per_file.get(filename, 0) + 1
    json.dump({"records": records, "rows": len(rows), "per_file": per_file, "columns": columns}, sys.stdout)


main()
