//! Checks on a BucketScan that its schema cannot express. The message is
//! what the user sees in status and events.

use crate::crd::BucketScan;
use crate::desired::output_prefix;

pub fn validate(scan: &BucketScan) -> Result<(), String> {
    let src = &scan.spec.source;
    let out = output_prefix(scan);
    if scan.spec.output.bucket == src.bucket && out.starts_with(&src.prefix) {
        return Err(format!(
            "the output s3://{}/{out} lies inside the scanned keyspace s3://{}/{}: the scan would read \
             its own parts; choose another output bucket or prefix",
            scan.spec.output.bucket, src.bucket, src.prefix
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::crd::{BucketScanSpec, Output, Source};

    fn scan(source_prefix: &str, output_bucket: &str, output_prefix: Option<&str>) -> BucketScan {
        let mut s = BucketScan::new(
            "s",
            BucketScanSpec {
                source: Source {
                    bucket: "photos".into(),
                    prefix: source_prefix.into(),
                    region: "us-east-1".into(),
                    ..Source::default()
                },
                output: Output {
                    bucket: output_bucket.into(),
                    prefix: output_prefix.map(String::from),
                    ..Output::default()
                },
                workers: Default::default(),
                sharding: Default::default(),
                filters: Default::default(),
                max_requests_per_second: None,
                ttl_seconds_after_finished: None,
            },
        );
        s.metadata.namespace = Some("ns".into());
        s
    }

    #[test]
    fn the_output_must_not_lie_inside_the_scanned_keys() {
        assert!(validate(&scan("", "results", None)).is_ok());
        assert!(validate(&scan("2026/", "photos", Some("scans/"))).is_ok());
        let err = validate(&scan("", "photos", None)).unwrap_err();
        assert!(
            err.contains("s3://photos/ns/s/") && err.contains("inside the scanned keyspace"),
            "{err}"
        );
        assert!(validate(&scan("scans/", "photos", Some("scans/1/"))).is_err());
    }
}
