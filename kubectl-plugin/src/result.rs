//! `kubectl bucketscan result`: where a complete scan's result and manifest
//! are, and the totals its status holds. The plugin stays off S3 (it would
//! need the tenant's credentials): the exact per-file figures are in the
//! manifest object it names.
//!
//! May import: error, render

use crate::error::Error;
use crate::render::thousands;
use bucketscan_api::crd::{BucketScan, ObjectCounts, Phase, ShardCounts};
use serde::Serialize;
use std::fmt::Write as _;

/// What `result --json` prints.
#[derive(Serialize, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct Summary {
    pub name: String,
    pub namespace: String,
    /// s3://BUCKET/PREFIXresult.EXT or s3://BUCKET/PREFIXdata/.
    pub output: String,
    /// s3://BUCKET/PREFIXmanifest.json: every file with its records and bytes.
    pub manifest: Option<String>,
    pub format: String,
    pub layout: String,
    pub gzip: bool,
    /// The status's live counters at completion (the manifest has exact ones).
    pub objects: Option<ObjectCounts>,
    pub shards: Option<ShardCounts>,
    pub completion_time: Option<String>,
}

/// The summary of a complete scan; an error naming the phase otherwise.
pub fn summary(scan: &BucketScan) -> Result<Summary, Error> {
    let name = scan.metadata.name.clone().unwrap_or_default();
    let st = scan.status.clone().unwrap_or_default();
    let output = match (&st.phase, st.output) {
        (Phase::Complete, Some(output)) => output,
        (Phase::Failed, _) => {
            return Err(Error::Failed {
                name,
                reason: crate::render::failure(scan.status.as_ref().expect("phase Failed")),
            })
        }
        (phase, _) => {
            return Err(Error::NotComplete {
                name,
                phase: format!("{phase:?}"),
            })
        }
    };
    let out = &scan.spec.output;
    Ok(Summary {
        name,
        namespace: scan.metadata.namespace.clone().unwrap_or_default(),
        output,
        manifest: st.manifest,
        format: format!("{:?}", out.format).to_lowercase(),
        layout: format!("{:?}", out.layout).to_lowercase(),
        gzip: out.gzip,
        objects: st.objects,
        shards: st.shards,
        completion_time: st.completion_time.map(|t| t.0.to_string()),
    })
}

/// The text form of [`Summary`].
pub fn text(s: &Summary) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "result:     {}", s.output);
    let gzip = if s.gzip { ", gzip" } else { "" };
    let _ = writeln!(out, "format:     {} ({} layout{gzip})", s.format, s.layout);
    if let Some(m) = &s.manifest {
        let _ = writeln!(
            out,
            "manifest:   {m}  (every file with its first/last key, records, bytes)"
        );
    }
    if let Some(o) = &s.objects {
        let _ = writeln!(
            out,
            "objects:    {} scanned: {} with metadata, {} vanished, {} errors",
            thousands(o.scanned),
            thousands(o.with_metadata),
            thousands(o.vanished),
            thousands(o.errors)
        );
        if o.filtered > 0 {
            let _ = writeln!(
                out,
                "filtered:   {} listed but left out by the scan's filters (no HEAD, no record)",
                thousands(o.filtered)
            );
        }
        let _ = writeln!(
            out,
            "bytes:      {} (sizes of the objects scanned)",
            thousands(o.bytes)
        );
    }
    if let Some(sh) = &s.shards {
        let _ = writeln!(
            out,
            "shards:     {} done, {} dead of {}",
            sh.done, sh.dead, sh.total
        );
    }
    if let Some(t) = &s.completion_time {
        let _ = writeln!(out, "completed:  {t}");
    }
    out.push_str("(counts are the status's live counters; the manifest has the exact ones)\n");
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use bucketscan_api::crd::{BucketScanSpec, BucketScanStatus};

    fn scan(status: BucketScanStatus) -> BucketScan {
        let mut scan = BucketScan::new("photos", BucketScanSpec::default());
        scan.metadata.namespace = Some("team".into());
        scan.status = Some(status);
        scan
    }

    #[test]
    fn only_a_complete_scan_has_a_result() {
        let running = scan(BucketScanStatus {
            phase: Phase::Merging,
            ..BucketScanStatus::default()
        });
        let err = summary(&running).unwrap_err().to_string();
        assert!(err.contains("no result yet (phase Merging)"), "{err}");
    }

    #[test]
    fn the_summary_has_the_location_and_totals() {
        let done = scan(BucketScanStatus {
            phase: Phase::Complete,
            output: Some("s3://out/team/photos/u/result.jsonl".into()),
            manifest: Some("s3://out/team/photos/u/manifest.json".into()),
            objects: Some(ObjectCounts {
                scanned: 20_000,
                with_metadata: 15_000,
                vanished: 3,
                errors: 1,
                bytes: 123_456_789,
                filtered: 0,
            }),
            ..BucketScanStatus::default()
        });
        let s = summary(&done).unwrap();
        assert_eq!(s.output, "s3://out/team/photos/u/result.jsonl");
        assert_eq!((s.format.as_str(), s.layout.as_str()), ("jsonl", "single"));
        let t = text(&s);
        assert!(
            t.contains("manifest:   s3://out/team/photos/u/manifest.json"),
            "{t}"
        );
        assert!(
            t.contains("20,000 scanned: 15,000 with metadata, 3 vanished, 1 errors"),
            "{t}"
        );
        assert!(t.contains("bytes:      123,456,789"), "{t}");
        assert!(!t.contains("filtered:"), "no filters, no line: {t}");
        let mut filtered = done.clone();
        filtered
            .status
            .as_mut()
            .unwrap()
            .objects
            .as_mut()
            .unwrap()
            .filtered = 4_321;
        let t = text(&summary(&filtered).unwrap());
        assert!(t.contains("filtered:   4,321 listed but left out"), "{t}");
    }
}
