#!/usr/bin/env python3
"""Read a bucketscan result with DuckDB (an engine no one here wrote) and print
what it holds as one JSON object, for the Rust tests to compare with the
seeded bucket:

  {"records": {KEY: {"size": N, "status": S, "user_metadata": {..}}},
   "rows": N, "per_file": {FILE: ROWS}, "columns": [NAME, ...],
   "types": {NAME: ARROW TYPE}}          (types: parquet only, from pyarrow)

Usage: read-dataset.py jsonl|csv|parquet FILE...   (files may be gzip: .gz)
Exits non-zero (never skips) when DuckDB is missing or a file does not parse.
"""
import json
import sys

import duckdb
import pyarrow.parquet


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
    if fmt == "parquet":
        # The map column as a JSON object, as the other formats hold it.
        return con.sql(
            "SELECT *, CAST(to_json(user_metadata) AS VARCHAR) AS user_metadata_json "
            "FROM read_parquet($files, filename=true)",
            params={"files": files},
        ).select(
            "* EXCLUDE (user_metadata, user_metadata_json), user_metadata_json AS user_metadata"
        )
    raise SystemExit(f"unknown format {fmt!r}")


def parquet_types(files):
    """Every file's schema as pyarrow reads it; they must all be the same."""
    schemas = {f: pyarrow.parquet.read_schema(f) for f in files}
    first = next(iter(schemas.values()))
    for f, schema in schemas.items():
        if not schema.equals(first):
            raise SystemExit(f"{f} has another schema: {schema} vs {first}")
    return {field.name: str(field.type) for field in first}


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
    types = parquet_types(files) if fmt == "parquet" else {}
    json.dump(
        {"records": records, "rows": len(rows), "per_file": per_file, "columns": columns, "types": types},
        sys.stdout,
    )


main()
