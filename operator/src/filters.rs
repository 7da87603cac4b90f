//! A BucketScan's `spec.filters` as the workers apply them
//! (`bucketscan_core::scan::filter`): checked where the schema cannot
//! (times it cannot read, glob syntax, include globs that no key under the
//! source prefix can match), put into the scan's stored spec, and passed as
//! flags to a planning Job.
//!
//! May import: `crd` and `bucketscan_core::scan::filter`.

use crate::crd::BucketScan;
use bucketscan_core::scan::filter::{FilterSpec, ObjectFilter};

/// The scan's filter, or why it cannot be used (the message for status).
pub fn object_filter(scan: &BucketScan) -> Result<ObjectFilter, String> {
    let f = &scan.spec.filters;
    let filter = ObjectFilter::new(FilterSpec {
        modified_after: f.modified_after.clone(),
        modified_before: f.modified_before.clone(),
        min_size: f.min_size_bytes,
        max_size: f.max_size_bytes,
        include: f.include.clone(),
        exclude: f.exclude.clone(),
        storage_classes: f.storage_classes.clone(),
    })
    .map_err(|e| format!("spec.filters: {e}"))?;
    filter
        .check_prefix(&scan.spec.source.prefix)
        .map_err(|e| format!("spec.filters.include: {e} (spec.source.prefix)"))?;
    Ok(filter)
}

/// `bucketscan-worker plan` flags for `filter` (as `--flag=VALUE`: a glob
/// may start with `-`).
pub fn plan_flags(filter: &FilterSpec) -> Vec<String> {
    let mut flags = Vec::new();
    let mut one = |name: &str, value: String| flags.push(format!("--{name}={value}"));
    if let Some(t) = &filter.modified_after {
        one("modified-after", t.clone());
    }
    if let Some(t) = &filter.modified_before {
        one("modified-before", t.clone());
    }
    if let Some(n) = filter.min_size {
        one("min-size", n.to_string());
    }
    if let Some(n) = filter.max_size {
        one("max-size", n.to_string());
    }
    for g in &filter.include {
        one("include", g.clone());
    }
    for g in &filter.exclude {
        one("exclude", g.clone());
    }
    for c in &filter.storage_classes {
        one("storage-class", c.clone());
    }
    flags
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::crd::{BucketScanSpec, Filters, Output, Source};

    fn scan(prefix: &str, filters: Filters) -> BucketScan {
        BucketScan::new(
            "s",
            BucketScanSpec {
                source: Source {
                    bucket: "photos".into(),
                    prefix: prefix.into(),
                    ..Source::default()
                },
                output: Output {
                    bucket: "results".into(),
                    ..Output::default()
                },
                filters,
                ..BucketScanSpec::default()
            },
        )
    }

    #[test]
    fn bad_filters_are_refused_with_the_field_and_the_fix() {
        let cases = [
            (
                Filters {
                    modified_after: Some("2026-05-01T00:00:00".into()),
                    ..Filters::default()
                },
                "spec.filters: the modified-after time \"2026-05-01T00:00:00\" is neither an RFC 3339 time",
            ),
            (
                Filters {
                    modified_after: Some("2026-05-02T00:00:00Z".into()),
                    modified_before: Some("2026-05-02T01:00:00+01:00".into()),
                    ..Filters::default()
                },
                "spec.filters: the modified-after time 2026-05-02T00:00:00Z is not before the modified-before time 2026-05-02T00:00:00Z",
            ),
            (
                Filters {
                    min_size_bytes: Some(2),
                    max_size_bytes: Some(1),
                    ..Filters::default()
                },
                "spec.filters: the minimum size 2 is above the maximum size 1 (bytes)",
            ),
            (
                Filters {
                    include: vec!["logs/[0-9".into()],
                    ..Filters::default()
                },
                "spec.filters: include glob \"logs/[0-9\": the '[' at character 6 has no closing ']'",
            ),
            (
                Filters {
                    exclude: vec!["[z-a]".into()],
                    ..Filters::default()
                },
                "spec.filters: exclude glob \"[z-a]\": the range z-a in the class at character 1 runs backwards",
            ),
        ];
        for (filters, message) in cases {
            let refused = object_filter(&scan("", filters.clone())).unwrap_err();
            assert!(refused.starts_with(message), "{filters:?}: {refused}");
            let invalid = crate::validate::validate(&scan("", filters)).unwrap_err();
            assert_eq!(invalid, refused, "validate says the same");
        }
        let relative = Filters {
            include: vec!["*.jpg".into()],
            ..Filters::default()
        };
        assert_eq!(
            object_filter(&scan("2026/", relative)).unwrap_err(),
            "spec.filters.include: include glob \"*.jpg\" can never match a key under the prefix \"2026/\": a \
             glob matches the whole key, prefix included, and '*' and '?' stop at '/' (did you mean \
             \"2026/*.jpg\"?) (spec.source.prefix)"
        );
    }

    #[test]
    fn good_filters_reach_the_stored_spec_and_the_plan_flags() {
        let filters = Filters {
            only_with_metadata: false,
            modified_after: Some("2026-05-01T02:00:00+02:00".into()),
            modified_before: Some("2026-06-01T00:00:00Z".into()),
            min_size_bytes: Some(1),
            max_size_bytes: Some(1 << 30),
            include: vec!["-odd/**".into(), "2026/**/*.jpg".into()],
            exclude: vec!["**/thumbs/**".into()],
            storage_classes: vec!["STANDARD".into()],
        };
        let scan = scan("", filters);
        assert_eq!(crate::validate::validate(&scan), Ok(()));
        let spec = crate::desired::spec_of(&scan);
        assert_eq!(
            spec.filter.spec().modified_after.as_deref(),
            Some("2026-05-01T00:00:00Z"),
            "normalised to UTC"
        );
        assert_eq!(spec.filter.spec().include, ["-odd/**", "2026/**/*.jpg"]);
        let args = crate::desired::plan_args(&scan, &crate::desired::Settings::default(), false);
        for flag in [
            "--modified-after=2026-05-01T00:00:00Z",
            "--modified-before=2026-06-01T00:00:00Z",
            "--min-size=1",
            "--max-size=1073741824",
            "--include=-odd/**",
            "--include=2026/**/*.jpg",
            "--exclude=**/thumbs/**",
            "--storage-class=STANDARD",
        ] {
            assert!(args.iter().any(|a| a == flag), "{flag} in {args:?}");
        }
        let unfiltered = super::tests::scan("", Filters::default());
        assert!(crate::desired::spec_of(&unfiltered).filter.is_empty());
        let plain_args = crate::desired::plan_args(&unfiltered, &crate::desired::Settings::default(), false);
        assert!(
            !plain_args.iter().any(|a| a.starts_with("--include")),
            "{plain_args:?}"
        );
    }
}
