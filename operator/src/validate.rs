//! Checks on a BucketScan that its schema cannot express. The message is
//! what the user sees in status and events.

use crate::crd::{BucketScan, Phase};
use crate::desired::output_prefix;
use bucketscan_core::fleet::spec::prefixes_overlap;
use kube::ResourceExt;

pub fn validate(scan: &BucketScan) -> Result<(), String> {
    baseline(scan)?;
    crate::filters::object_filter(scan)?;
    let src = &scan.spec.source;
    let out = output_prefix(scan);
    if scan.spec.output.bucket != src.bucket {
        return Ok(());
    }
    if out.starts_with(&src.prefix) {
        return Err(format!(
            "the output s3://{}/{out} lies inside the scanned keyspace s3://{}/{}: the scan would read \
             its own parts; choose another output bucket or prefix",
            scan.spec.output.bucket, src.bucket, src.prefix
        ));
    }
    if src.prefix.starts_with(&out) {
        return Err(format!(
            "the scanned keyspace s3://{}/{} lies inside the output s3://{}/{out}: the scan writes and \
             deletes its parts under the output prefix; choose another output bucket or prefix",
            src.bucket, src.prefix, scan.spec.output.bucket
        ));
    }
    Ok(())
}

/// `spec.baseline.manifest` must name a manifest object.
fn baseline(scan: &BucketScan) -> Result<(), String> {
    let Some(location) = scan.spec.baseline.as_ref().and_then(|b| b.manifest.as_deref()) else {
        return Ok(());
    };
    if bucketscan_core::scan::baseline::split_location(location).is_none() {
        return Err(format!(
            "spec.baseline.manifest {location:?} is not s3://BUCKET/KEY of a result's manifest.json"
        ));
    }
    Ok(())
}

/// Whether the scan's `workers.image` is one the operator allows. A
/// BucketScan creates pods, so a cluster may limit it to trusted images. An
/// entry allows one repository at any tag or digest (`reg.example/bucketscan`
/// allows `reg.example/bucketscan:1.2` and `...@sha256:...`, not
/// `reg.example/bucketscan-evil`), or, ending with `/`, every image under that
/// path; `*` allows any image. The operator fills an unset list with the
/// repository of its own default image (`desired::image_repository`), which a scan
/// that names no image always gets.
pub fn worker_image(scan: &BucketScan, allowed: &[String]) -> Result<(), String> {
    let Some(image) = &scan.spec.workers.image else {
        return Ok(());
    };
    if allowed.iter().any(|a| a == "*" || image_matches(image, a)) {
        return Ok(());
    }
    Err(format!(
        "workers.image {image:?} is not allowed by this operator; allowed: {} (chart value \
         worker.allowedImages); remove workers.image to use the default image",
        allowed.join(", ")
    ))
}

/// A scan may run only in a namespace the operator was given (chart value
/// `scanNamespaces`: the operator's RBAC reads Secrets there and nowhere
/// else). An empty list, or `*` in it, allows every namespace.
pub fn scan_namespace(scan: &BucketScan, allowed: &[String]) -> Result<(), String> {
    let ns = scan.namespace().unwrap_or_default();
    if allowed.is_empty() || allowed.iter().any(|a| a == "*" || *a == ns) {
        return Ok(());
    }
    Err(format!(
        "namespace {ns:?} may not run BucketScans: this operator runs them only in {} (chart value \
         scanNamespaces; each listed namespace gets a RoleBinding to read its Secrets)",
        allowed.join(", ")
    ))
}

/// Whether the operator may send requests to the scan's endpoint (it does
/// for scans with a credentials Secret: planning and cleanup). This is the
/// check the URL alone allows; the addresses a name resolves to are checked
/// again when the operator connects (`s3::allowlist`), with the same
/// message ([`endpoint_refused`]).
pub fn endpoint(scan: &BucketScan, allowed: &bucketscan_core::s3::EndpointAllowlist) -> Result<(), String> {
    if crate::desired::uses_pod_identity(scan) {
        return Ok(()); // reached from the scan's own pods only
    }
    allowed
        .check_url(scan.spec.source.endpoint.as_deref())
        .map_err(|why| endpoint_refused(scan, &why))
}

/// The condition's message when the allowlist refuses the scan's endpoint.
pub fn endpoint_refused(scan: &BucketScan, why: &str) -> String {
    format!(
        "spec.source.endpoint {:?} is refused ({why}): the operator sends a scan's requests only to the \
         endpoints its allowlist allows (chart value operator.allowedEndpoints, flag --allowed-endpoints); \
         loopback and link-local addresses (the instance metadata service) only when listed",
        scan.spec.source.endpoint.as_deref().unwrap_or_default()
    )
}

fn image_matches(image: &str, entry: &str) -> bool {
    if entry.ends_with('/') {
        return image.starts_with(entry);
    }
    match image.strip_prefix(entry) {
        Some(rest) => rest.is_empty() || rest.starts_with(':') || rest.starts_with('@'),
        None => false,
    }
}

/// Whether `scan`, about to be planned, would write where another scan that
/// is still running writes or reads: two scans sharing an output would
/// overwrite and delete each other's parts, and an output inside another
/// scan's keyspace would end up in its result. Of two scans not yet planned
/// the older (then the first by namespace and name) goes ahead; a scan that is
/// planned already always does.
///
/// Two scans are on the same store when their endpoints, normalised
/// ([`store_of`]), are equal: `http://MinIO.storage.svc:80/` is
/// `http://minio.storage.svc`, and a short name (`http://minio:9000`)
/// names a Service of the scan's own namespace, so it is another store in
/// another namespace.
///
/// A scan of another namespace is never named, nor its bucket or prefix,
/// and the refusal is one message whatever the reason (its output or the
/// keyspace it scans): a tenant learns nothing of another's scans from it
/// but that one runs.
pub fn output_conflict(scan: &BucketScan, others: &[BucketScan]) -> Result<(), String> {
    let bucket = &scan.spec.output.bucket;
    let out = output_prefix(scan);
    let ours_store = store_of(scan);
    let same_store = |o: &BucketScan| store_of(o) == ours_store;
    for other in others.iter().filter(|o| blocks(scan, o) && same_store(o)) {
        let ours = other.namespace() == scan.namespace();
        let name = format!("{}/{}", other.namespace().unwrap_or_default(), other.name_any());
        let other_out = output_prefix(other);
        let overlaps_output = &other.spec.output.bucket == bucket && prefixes_overlap(&out, &other_out);
        let src = &other.spec.source;
        let inside_keyspace = &src.bucket == bucket && out.starts_with(&src.prefix);
        if !ours && (overlaps_output || inside_keyspace) {
            return Err(format!(
                "the output s3://{bucket}/{out} conflicts with a scan in another namespace that is \
                 still running (the two would write into each other's files): choose another output \
                 bucket or prefix"
            ));
        }
        if overlaps_output {
            return Err(format!(
                "the output s3://{bucket}/{out} overlaps the output s3://{bucket}/{other_out} of \
                 BucketScan {name}, which is still running: the two scans would overwrite and delete \
                 each other's parts; choose another output prefix or wait until {name} has finished"
            ));
        }
        if inside_keyspace {
            return Err(format!(
                "the output s3://{bucket}/{out} lies inside the keyspace s3://{}/{} that BucketScan \
                 {name} is scanning: its result would contain this scan's parts; choose another \
                 output prefix or wait until {name} has finished",
                src.bucket, src.prefix
            ));
        }
    }
    Ok(())
}

/// The store a scan's endpoint names, normalised: scheme and host in lower
/// case, no trailing dot or slash, the scheme's default port written out; a
/// Service name qualified with the scan's namespace (`minio` and
/// `minio.NS.svc.cluster.local` are `minio.NS.svc`). No endpoint: AWS.
fn store_of(scan: &BucketScan) -> String {
    let Some(endpoint) = scan.spec.source.endpoint.as_deref() else {
        return "aws".into();
    };
    // The CRD admits only `http(s)://AUTHORITY[/]`.
    let Some((scheme, authority)) = endpoint.trim_end_matches('/').split_once("://") else {
        return endpoint.to_string();
    };
    let scheme = scheme.to_ascii_lowercase();
    let authority = authority.rsplit_once('@').map_or(authority, |(_, a)| a);
    let (host, port) = match authority.rsplit_once(':') {
        Some((host, port)) if !port.contains(']') => (host, port.parse::<u16>().ok()),
        _ => (authority, None),
    };
    let port = port.unwrap_or(if scheme == "http" { 80 } else { 443 });
    let mut host = host.trim_end_matches('.').to_ascii_lowercase();
    let literal = host.starts_with('[') || host.parse::<std::net::Ipv4Addr>().is_ok();
    if !literal {
        if !host.contains('.') {
            host = format!("{host}.{}.svc", scan.namespace().unwrap_or_default());
        } else if let Some(service) = host.strip_suffix(".svc.cluster.local") {
            host = format!("{service}.svc");
        }
    }
    format!("{scheme}://{host}:{port}")
}

/// Whether `other` is a running scan that goes before `scan`: one that is
/// planned, or an older one of the same namespace not planned yet (of two
/// that start together, one goes first). An unplanned scan of another
/// namespace never blocks: a scan stuck before its plan would otherwise
/// hold every newer scan of that bucket, cluster-wide.
/// A scan being retried rewrites its result's files in place: refused while
/// a running scan of its namespace reads that result as its baseline
/// (`spec.baseline.scan`), which would read files as they are replaced.
pub fn read_as_baseline(scan: &BucketScan, others: &[&BucketScan]) -> Result<(), String> {
    let name = scan.name_any();
    let reader = others.iter().find(|o| {
        o.namespace() == scan.namespace()
            && o.uid() != scan.uid()
            && o.metadata.deletion_timestamp.is_none()
            && !matches!(
                o.status.as_ref().map(|s| &s.phase),
                Some(Phase::Complete | Phase::Failed)
            )
            && o.spec.baseline.as_ref().and_then(|b| b.scan.as_deref()) == Some(name.as_str())
    });
    match reader {
        Some(o) => Err(format!(
            "BucketScan {} is running and reads this scan's result as its baseline; a retry would \
             rewrite that result under it: retry once {} has finished",
            o.name_any(),
            o.name_any()
        )),
        None => Ok(()),
    }
}

fn blocks(scan: &BucketScan, other: &BucketScan) -> bool {
    let live = other.metadata.deletion_timestamp.is_none()
        && !matches!(
            other.status.as_ref().map(|s| &s.phase),
            Some(Phase::Complete | Phase::Failed)
        );
    if !live || other.uid() == scan.uid() {
        return false;
    }
    let planned = other
        .status
        .as_ref()
        .is_some_and(|s| crate::status::is_true(&s.conditions, crate::status::PLANNED));
    let age = |s: &BucketScan| {
        (
            s.metadata.creation_timestamp.as_ref().map(|t| t.0),
            s.namespace(),
            s.name_any(),
        )
    };
    planned || (other.namespace() == scan.namespace() && age(other) < age(scan))
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
                ..Default::default()
            },
        );
        s.metadata.namespace = Some("ns".into());
        s.metadata.uid = Some("u1".into());
        s
    }

    #[test]
    fn a_scan_read_as_a_running_scan_s_baseline_is_not_retried() {
        let mut baseline = scan("", "out", None);
        baseline.metadata.name = Some("nightly-1".into());
        let reader = |name: &str, ns: &str, phase: Phase| {
            let mut r = scan("", "out", Some(name));
            r.metadata.name = Some(name.into());
            r.metadata.namespace = Some(ns.into());
            r.metadata.uid = Some(format!("u-{name}"));
            r.spec.baseline = Some(crate::crd::Baseline {
                scan: Some("nightly-1".into()),
                manifest: None,
            });
            r.status = Some(crate::crd::BucketScanStatus {
                phase,
                ..Default::default()
            });
            r
        };
        let running = reader("nightly-2", "ns", Phase::Scanning);
        let refused = read_as_baseline(&baseline, &[&baseline, &running]).unwrap_err();
        assert!(refused.contains("BucketScan nightly-2 is running"), "{refused}");
        let done = reader("nightly-2", "ns", Phase::Complete);
        let elsewhere = reader("nightly-3", "other", Phase::Scanning);
        assert_eq!(read_as_baseline(&baseline, &[&done, &elsewhere]), Ok(()));
    }

    #[test]
    fn a_baseline_manifest_must_be_an_s3_object() {
        let mut s = scan("", "out", None);
        for (location, ok) in [
            ("s3://out/nightly/manifest.json", true),
            ("out/nightly/manifest.json", false),
            ("s3://out", false),
            ("s3:///manifest.json", false),
        ] {
            s.spec.baseline = Some(crate::crd::Baseline {
                scan: None,
                manifest: Some(location.into()),
            });
            let judged = validate(&s);
            assert_eq!(judged.is_ok(), ok, "{location}: {judged:?}");
            if let Err(e) = judged {
                assert!(e.contains("s3://BUCKET/KEY"), "{e}");
            }
        }
    }

    fn live(name: &str, bucket: &str, prefix: &str, created: i64) -> BucketScan {
        let mut s = scan("", bucket, Some(prefix));
        s.spec.source.bucket = "elsewhere".into();
        s.metadata.name = Some(name.into());
        s.metadata.uid = Some(format!("uid-{name}"));
        s.metadata.creation_timestamp = Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
            k8s_openapi::jiff::Timestamp::from_second(created).unwrap(),
        ));
        s
    }

    #[test]
    fn scans_run_only_in_the_namespaces_the_operator_was_given() {
        let s = scan("", "results", None); // namespace "ns"
        let list = |v: &[&str]| v.iter().map(|n| n.to_string()).collect::<Vec<_>>();
        assert!(scan_namespace(&s, &[]).is_ok());
        assert!(scan_namespace(&s, &list(&["*"])).is_ok());
        assert!(scan_namespace(&s, &list(&["a", "ns"])).is_ok());
        let refused = scan_namespace(&s, &list(&["a", "b"])).unwrap_err();
        assert!(
            refused.contains("\"ns\"") && refused.contains("a, b") && refused.contains("scanNamespaces"),
            "{refused}"
        );
        assert!(scan_namespace(&s, &list(&["n"])).is_err(), "names match whole");
    }

    #[test]
    fn a_scan_may_not_write_where_a_running_scan_writes_or_reads() {
        let me = live("me", "results", "shared/sub", 100);
        assert!(output_conflict(&me, &[live("far", "results", "other/", 50)]).is_ok());
        assert!(output_conflict(&me, &[live("bucket", "results2", "shared/", 50)]).is_ok());
        let err = output_conflict(&me, &[live("older", "results", "shared/", 50)]).unwrap_err();
        assert!(
            err.contains("s3://results/shared/sub/ overlaps the output s3://results/shared/")
                && err.contains("BucketScan ns/older"),
            "{err}"
        );
        // Of two unplanned scans the older goes ahead, whichever asks.
        let younger = live("younger", "results", "shared/", 200);
        assert!(output_conflict(&me, std::slice::from_ref(&younger)).is_ok());
        assert!(output_conflict(&younger, std::slice::from_ref(&me)).is_err());
        // A planned scan always goes ahead; a finished or deleted one never blocks.
        let mut planned = younger.clone();
        let mut st = crate::crd::BucketScanStatus::default();
        crate::status::set_condition(
            &mut st.conditions,
            crate::status::PLANNED,
            true,
            "Planned",
            "1 shards",
            None,
            &k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(k8s_openapi::jiff::Timestamp::now()),
        );
        planned.status = Some(st.clone());
        assert!(output_conflict(&me, std::slice::from_ref(&planned)).is_err());
        st.phase = Phase::Complete;
        planned.status = Some(st);
        assert!(output_conflict(&me, std::slice::from_ref(&planned)).is_ok());
        let mut deleted = live("deleted", "results", "shared/", 50);
        deleted.metadata.deletion_timestamp = deleted.metadata.creation_timestamp.clone();
        assert!(output_conflict(&me, &[deleted]).is_ok());
        // Itself is no conflict.
        assert!(output_conflict(&me, std::slice::from_ref(&me)).is_ok());
        // Another namespace's scan: blocks only once planned, on the same
        // store, and is never named.
        let mut theirs = live("theirs", "results", "shared/", 50);
        theirs.metadata.namespace = Some("other-tenant".into());
        assert!(
            output_conflict(&me, std::slice::from_ref(&theirs)).is_ok(),
            "unplanned"
        );
        theirs.status = Some(crate::crd::BucketScanStatus {
            phase: Phase::Scanning,
            ..planned.status.clone().unwrap()
        });
        let err = output_conflict(&me, std::slice::from_ref(&theirs)).unwrap_err();
        assert!(err.contains("a scan in another namespace"), "{err}");
        for secret in ["other-tenant", "theirs", "s3://results/shared/ "] {
            assert!(!err.contains(secret), "{secret} in {err}");
        }
        // Writing into their keyspace: the same message (no oracle of
        // which of their buckets and prefixes it is).
        let mut their_reader = theirs.clone();
        their_reader.spec.output.bucket = "elsewhere".into();
        their_reader.spec.source.bucket = "results".into();
        their_reader.spec.source.prefix = "shared/".into();
        assert_eq!(
            output_conflict(&me, std::slice::from_ref(&their_reader)).unwrap_err(),
            err
        );
        // The same store written differently is the same store ...
        let mut me_store = me.clone();
        me_store.spec.source.endpoint = Some("http://MinIO.storage.svc.:80/".into());
        theirs.spec.source.endpoint = Some("http://minio.storage.svc.cluster.local".into());
        assert_eq!(
            output_conflict(&me_store, std::slice::from_ref(&theirs)).unwrap_err(),
            err
        );
        // ... and a Service's short name is a store of each namespace.
        me_store.spec.source.endpoint = Some("http://minio:9000".into());
        theirs.spec.source.endpoint = Some("http://minio:9000".into());
        assert!(output_conflict(&me_store, std::slice::from_ref(&theirs)).is_ok());
        theirs.spec.source.endpoint = Some("http://minio.ns.svc:9000".into());
        assert!(output_conflict(&me_store, std::slice::from_ref(&theirs)).is_err());
        theirs.spec.source.endpoint = Some("https://another-store.example".into());
        assert!(output_conflict(&me, &[theirs]).is_ok(), "another store");
        // Writing into a running scan's keyspace is one.
        let mut reader = live("reader", "other", "x/", 50);
        reader.spec.source.bucket = "results".into();
        reader.spec.source.prefix = "shared/".into();
        let err = output_conflict(&me, &[reader]).unwrap_err();
        assert!(err.contains("inside the keyspace s3://results/shared/"), "{err}");
    }

    #[test]
    fn a_worker_image_outside_the_allowlist_is_refused() {
        let mut s = scan("", "results", None);
        let allowed = vec![
            "reg.example/bucketscan".to_string(),
            "mirror.example/team/".to_string(),
        ];
        assert!(worker_image(&s, &allowed).is_ok(), "no image named: the default");
        for ok in [
            "reg.example/bucketscan",
            "reg.example/bucketscan:1.2",
            "reg.example/bucketscan@sha256:00",
            "mirror.example/team/anything:3",
        ] {
            s.spec.workers.image = Some(ok.into());
            assert!(worker_image(&s, &allowed).is_ok(), "{ok}");
            assert!(worker_image(&s, &["*".into()]).is_ok(), "any: {ok}");
            assert!(worker_image(&s, &[]).is_err(), "an empty list allows none: {ok}");
        }
        for bad in [
            "reg.example/bucketscan-evil:1",
            "reg.example/bucketscanx",
            "evil.example/reg.example/bucketscan",
            "mirror.example/team",
            "mirror.example/teamx/a",
        ] {
            s.spec.workers.image = Some(bad.into());
            let err = worker_image(&s, &allowed).unwrap_err();
            assert!(
                err.contains(bad) && err.contains("reg.example/bucketscan, mirror.example/team/"),
                "{err}"
            );
        }
    }

    #[test]
    fn without_a_list_only_the_default_image_s_repository_is_allowed() {
        use crate::desired::image_repository;
        for (image, repository) in [
            ("bucketscan:0.1.0", "bucketscan"),
            ("bucketscan", "bucketscan"),
            (
                "reg.example:5000/team/bucketscan:1.2",
                "reg.example:5000/team/bucketscan",
            ),
            ("reg.example:5000/bucketscan", "reg.example:5000/bucketscan"),
            ("reg.example/bucketscan:1@sha256:00", "reg.example/bucketscan"),
            ("reg.example/bucketscan@sha256:00", "reg.example/bucketscan"),
        ] {
            assert_eq!(image_repository(image), repository, "{image}");
        }
        let mut s = scan("", "results", None);
        let default = vec![image_repository(crate::desired::DEFAULT_IMAGE).to_string()];
        assert_eq!(default, ["ghcr.io/bucketscan/bucketscan"]);
        s.spec.workers.image = Some("ghcr.io/bucketscan/bucketscan:0.2.0".into());
        assert!(worker_image(&s, &default).is_ok());
        s.spec.workers.image = Some("evil.example/miner:1".into());
        let err = worker_image(&s, &default).unwrap_err();
        assert!(
            err.contains("allowed: ghcr.io/bucketscan/bucketscan (chart value worker.allowedImages)"),
            "{err}"
        );
    }

    #[test]
    fn the_output_must_not_lie_inside_the_scanned_keys() {
        assert!(validate(&scan("", "results", None)).is_ok());
        assert!(validate(&scan("2026/", "photos", Some("scans/"))).is_ok());
        let err = validate(&scan("", "photos", None)).unwrap_err();
        assert!(
            err.contains("s3://photos/ns/s/u1/") && err.contains("inside the scanned keyspace"),
            "{err}"
        );
        assert!(validate(&scan("scans/", "photos", Some("scans/1/"))).is_err());
        // Nor the scanned keys inside the output (its parts are deleted from there).
        let err = validate(&scan("out/parts/", "photos", Some("out"))).unwrap_err();
        assert!(err.contains("lies inside the output s3://photos/out/"), "{err}");
        assert!(validate(&scan("outside/", "photos", Some("out"))).is_ok());
    }
}
