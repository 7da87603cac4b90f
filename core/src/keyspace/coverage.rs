//! Coverage arithmetic: which parts of a prefix's keyspace a set of disjoint
//! shards leaves out, as shards. Recovery uses it to queue exactly the ranges
//! no finished shard covers.
//!
//! May import: `shard` only.

use super::shard::{key_before, prefix_end, Shard};

/// The parts of the scan's keyspace (keys starting with `prefix`) that no
/// shard in `covered` holds, as shards. `covered` must not overlap.
pub fn uncovered(prefix: &str, covered: &[Shard]) -> Vec<Shard> {
    let mut spans: Vec<(Option<String>, Option<String>)> =
        covered.iter().map(Shard::exclusive_bounds).collect();
    spans.sort();
    let mut gaps = Vec::new();
    // Keys after `cursor` (exclusive) are not yet known to be covered.
    let mut cursor = key_before(prefix);
    let scan_end = prefix_end(prefix);
    for (after, before) in spans {
        // The gap runs from just after `cursor` up to and including `after`.
        if let Some(a) = &after {
            if cursor.as_ref().is_none_or(|c| a > c) {
                gaps.push(Shard {
                    prefix: prefix.to_string(),
                    start_after: cursor.clone(),
                    end: Some(format!("{a}\0")),
                });
            }
        }
        match before {
            // Keys from `before` on are not covered by this span.
            Some(b) => cursor = key_before(&b).max(cursor),
            None => return gaps,
        }
    }
    // Nothing is left when the cursor is the last key before the scan's end.
    let at_end = matches!((&cursor, &scan_end), (Some(c), Some(e)) if key_before(e).as_ref() == Some(c));
    if !at_end {
        gaps.push(Shard {
            prefix: prefix.to_string(),
            start_after: cursor,
            end: scan_end,
        });
    }
    gaps
}

#[cfg(test)]
mod tests {
    use super::*;

    fn keys() -> Vec<String> {
        let mut k: Vec<String> = (0..300).map(|i| format!("p/{:02}/{i:03}", i % 30)).collect();
        k.extend([
            "p/".into(),
            "p/\u{1}".into(),
            "p/zz".into(),
            "q".into(),
            "o".into(),
        ]);
        k
    }

    /// Every key under the prefix is in exactly one of done + gaps.
    fn check(prefix: &str, done: &[Shard]) {
        let gaps = uncovered(prefix, done);
        for k in keys().iter().filter(|k| k.starts_with(prefix)) {
            let owners = done.iter().chain(&gaps).filter(|s| s.contains(k)).count();
            assert_eq!(
                owners, 1,
                "{k:?} is in {owners} shards; done {done:?}, gaps {gaps:?}"
            );
        }
        for g in &gaps {
            assert!(g.prefix == prefix, "{g:?}");
        }
    }

    #[test]
    fn the_gaps_and_the_done_shards_cover_the_keyspace_once() {
        let whole = Shard::prefix("p/");
        check("p/", &[]);
        check("p/", std::slice::from_ref(&whole));
        assert!(uncovered("p/", std::slice::from_ref(&whole)).is_empty());
        let (low, high) = whole.split_after("p/10/100");
        let (mid, top) = high.split_after("p/20/200");
        check("p/", std::slice::from_ref(&low));
        check("p/", std::slice::from_ref(&mid));
        check("p/", std::slice::from_ref(&top));
        check("p/", &[low.clone(), top.clone()]);
        check("p/", &[Shard::prefix("p/05/"), Shard::prefix("p/25/"), mid]);
        check("", &[Shard::prefix("p/"), Shard::prefix("q")]);
        assert_eq!(uncovered("p/", &[low, high]), Vec::<Shard>::new());
    }
}
