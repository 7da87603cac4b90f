#!/usr/bin/env bash
# The demo behind `just demo` (run inside scripts/with-test-servers.sh): seed a
# bucket on the local S3 server with objects, some with user metadata, and
# scan it with bucketscan-worker, then show the summary and the first records.
set -euo pipefail

CACHE=${BUCKETSCAN_CACHE:-$HOME/.cache/bucketscan}
WORKER=${CARGO_TARGET_DIR:-$CACHE/target}/release/bucketscan-worker
OBJECTS=${DEMO_OBJECTS:-5000}
export AWS_ACCESS_KEY_ID=demo AWS_SECRET_ACCESS_KEY=demo AWS_REGION=us-east-1
ENDPOINT=$BUCKETSCAN_TEST_MOTO_ENDPOINT

echo "== seeding s3://demo-bucket with $OBJECTS objects at $ENDPOINT"
"$CACHE/venv/bin/python" - "$ENDPOINT" "$OBJECTS" <<'PY'
import sys, boto3
from concurrent.futures import ThreadPoolExecutor
endpoint, n = sys.argv[1], int(sys.argv[2])
s3 = boto3.client("s3", endpoint_url=endpoint)
s3.create_bucket(Bucket="demo-bucket")
def put(i):
    team = ["genomics", "imaging", "finance"][i % 3]
    meta = {"Team": team, "Sample-Id": f"S{i:06d}"} if i % 4 else {}
    key = f"{team}/2026/{i % 12 + 1:02d}/object-{i:06d}.dat"
    s3.put_object(Bucket="demo-bucket", Key=key, Body=b"x" * (i % 100), Metadata=meta)
with ThreadPoolExecutor(16) as pool:
    list(pool.map(put, range(n)))
PY

OUT=$(mktemp -d)/result.jsonl
echo "== bucketscan-worker scan --bucket demo-bucket --output $OUT"
"$WORKER" scan --endpoint "$ENDPOINT" --path-style --bucket demo-bucket --output "$OUT"
echo "== first records of $OUT ($(wc -l <"$OUT") lines)"
head -n 5 "$OUT"
