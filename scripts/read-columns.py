#!/usr/bin/env python3
"""Read every column of a bucketscan result with DuckDB (an engine no one
here wrote) and print them per key as one JSON object, for the Rust tests to
compare with what the objects were written with:

  {KEY: {COLUMN: VALUE, ...}, ...}

Values are as DuckDB types them: booleans and numbers as JSON, timestamps as
RFC 3339 text (UTC), maps as objects, null for a missing value.

Usage: read-columns.py jsonl|csv|parquet FILE...
Exits non-zero (never skips) when DuckDB is missing or a file does not parse.
"""
import datetime
import json
import sys

import duckdb


def relation(con, fmt, files):
    if fmt == "csv":
        return con.read_csv(files, header=True, delimiter=",", quotechar='"', escapechar='"',
                            strict_mode=True, sample_size=-1)
    if fmt == "jsonl":
        return con.sql("SELECT * FROM read_json($files, format='newline_delimited')",
                       params={"files": files})
    if fmt == "parquet":
        return con.sql("SELECT * FROM read_parquet($files)", params={"files": files})
    raise SystemExit(f"unknown format {fmt!r}")


def plain(value):
    if isinstance(value, datetime.datetime):
        if value.tzinfo is not None:
            value = value.astimezone(datetime.timezone.utc).replace(tzinfo=None)
        return value.strftime("%Y-%m-%dT%H:%M:%SZ")
    if isinstance(value, dict) and set(value) == {"key", "value"} and isinstance(value["key"], list):
        return dict(zip(value["key"], value["value"]))
    return value


def main():
    fmt, files = sys.argv[1], sys.argv[2:]
    if not files:
        raise SystemExit("no files given")
    con = duckdb.connect()
    con.sql("SET TimeZone = 'UTC'")
    rel = relation(con, fmt, files)
    # Timestamps as text in SQL: their Python form with a time zone needs
    # pytz, which this reader does without.
    rel = rel.select(", ".join(
        f"strftime(\"{name}\", '%Y-%m-%dT%H:%M:%SZ') AS \"{name}\"" if str(kind).startswith("TIMESTAMP")
        else f"\"{name}\""
        for name, kind in zip(rel.columns, rel.types)
    ))
    columns = rel.columns
    out = {}
    for row in rel.fetchall():
        record = {name: plain(value) for name, value in zip(columns, row)}
        if record["key"] in out:
            raise SystemExit(f"key {record['key']!r} appears twice")
        out[record["key"]] = record
    json.dump(out, sys.stdout, default=str)


main()
