//! An incremental scan's baseline scan (`spec.baseline.scan`): a Complete
//! BucketScan of the same namespace, whose manifest location is written into
//! the status before planning, so the plan (in the operator or in a Job)
//! reads it from there. What the manifest itself holds is checked when the
//! scan is planned (`fleet::incremental`), with the scan's own credentials.

use super::context::{Context, Error};
use super::report::write_status;
use crate::crd::{BucketScan, BucketScanStatus, Phase};
use kube::api::Api;
use kube::ResourceExt;

/// What to do about the baseline before planning.
pub(super) enum Resolved {
    /// Nothing to resolve, or resolved before: plan.
    Ready,
    /// Just resolved and written to the status: plan at the next look.
    Written,
    /// The baseline cannot be used: the scan fails with this message.
    Refused(String),
}

pub(super) async fn resolve(
    scan: &BucketScan,
    ctx: &Context,
    st: &mut BucketScanStatus,
    before: &BucketScanStatus,
) -> Result<Resolved, Error> {
    let Some(name) = scan.spec.baseline.as_ref().and_then(|b| b.scan.as_deref()) else {
        return Ok(Resolved::Ready);
    };
    if st.baseline.is_some() {
        return Ok(Resolved::Ready);
    }
    let namespace = scan.namespace().unwrap_or_default();
    let scans: Api<BucketScan> = Api::namespaced(ctx.client.clone(), &namespace);
    let found = scans.get_opt(name).await?;
    match judge(scan, name, found.as_ref()) {
        Ok(manifest) => {
            st.baseline = Some(manifest);
            write_status(ctx, scan, before, st).await?;
            Ok(Resolved::Written)
        }
        Err(message) => Ok(Resolved::Refused(message)),
    }
}

/// The manifest of baseline scan `name`, or why it cannot be one.
fn judge(scan: &BucketScan, name: &str, found: Option<&BucketScan>) -> Result<String, String> {
    if name == scan.name_any() {
        return Err("spec.baseline.scan names this scan itself".into());
    }
    let Some(base) = found else {
        return Err(format!(
            "baseline scan {name:?} does not exist in this namespace (spec.baseline.scan)"
        ));
    };
    let status = base.status.clone().unwrap_or_default();
    if status.phase != Phase::Complete {
        return Err(format!(
            "baseline scan {name:?} is {:?}, not Complete: only a complete scan holds every object",
            status.phase
        ));
    }
    if status.missing_ranges.unwrap_or(0) > 0 {
        return Err(format!(
            "baseline scan {name:?} is a partial result ({} key ranges missing: shards that failed for good); \
             an incremental scan would take their objects as deleted: retry it (kubectl bucketscan retry {name}) \
             until it is Complete without missing ranges, or use another scan",
            status.missing_ranges.unwrap_or(0)
        ));
    }
    if base.spec.source.bucket != scan.spec.source.bucket
        || base.spec.source.prefix != scan.spec.source.prefix
    {
        return Err(format!(
            "baseline scan {name:?} scanned s3://{}/{}, this scan scans s3://{}/{}",
            base.spec.source.bucket,
            base.spec.source.prefix,
            scan.spec.source.bucket,
            scan.spec.source.prefix
        ));
    }
    status
        .manifest
        .ok_or_else(|| format!("baseline scan {name:?} is Complete but names no manifest"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::crd::{Baseline, BucketScanSpec, Output, Source};

    fn scan(name: &str, bucket: &str, phase: Phase, manifest: Option<&str>) -> BucketScan {
        let mut s = BucketScan::new(
            name,
            BucketScanSpec {
                source: Source {
                    bucket: bucket.into(),
                    ..Source::default()
                },
                output: Output {
                    bucket: "out".into(),
                    ..Output::default()
                },
                baseline: Some(Baseline {
                    scan: Some("nightly-1".into()),
                    manifest: None,
                }),
                ..Default::default()
            },
        );
        s.status = Some(BucketScanStatus {
            phase,
            manifest: manifest.map(String::from),
            ..Default::default()
        });
        s
    }

    /// A Complete scan whose onDeadShards let it end with missing ranges.
    fn partial(mut s: BucketScan) -> BucketScan {
        let st = s.status.as_mut().unwrap();
        st.missing_ranges = Some(2);
        s
    }

    #[test]
    fn a_complete_scan_of_the_same_bucket_gives_its_manifest() {
        let new = scan("nightly-2", "photos", Phase::Pending, None);
        let base = scan(
            "nightly-1",
            "photos",
            Phase::Complete,
            Some("s3://out/n1/manifest.json"),
        );
        assert_eq!(
            judge(&new, "nightly-1", Some(&base)).unwrap(),
            "s3://out/n1/manifest.json"
        );
    }

    #[test]
    fn missing_running_foreign_or_self_baselines_are_refused_with_the_reason() {
        let new = scan("nightly-2", "photos", Phase::Pending, None);
        let cases = [
            (None, "nightly-1", "does not exist"),
            (
                Some(scan("nightly-1", "photos", Phase::Scanning, None)),
                "nightly-1",
                "not Complete",
            ),
            (
                Some(scan("nightly-1", "other", Phase::Complete, Some("s3://o/m"))),
                "nightly-1",
                "scanned s3://other/",
            ),
            (Some(new.clone()), "nightly-2", "itself"),
            (
                Some(partial(scan(
                    "nightly-1",
                    "photos",
                    Phase::Complete,
                    Some("s3://o/m"),
                ))),
                "nightly-1",
                "partial result",
            ),
        ];
        for (found, name, words) in cases {
            let e = judge(&new, name, found.as_ref()).unwrap_err();
            assert!(e.contains(words), "{e}");
        }
    }
}
