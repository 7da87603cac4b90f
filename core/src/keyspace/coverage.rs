//! Coverage arithmetic: which parts of a prefix's keyspace a set of disjoint
//! shards leaves out, as shards, and whether shards overlap. Recovery and a
//! plan that died midway use it to queue exactly the ranges no shard covers;
//! the merge uses both to refuse shards that do not tile the keyspace.
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

/// Two shards that share a possible key, if any (the first such pair in key
/// order): a key in both would be scanned, and written, twice.
pub fn overlapping(shards: &[Shard]) -> Option<(Shard, Shard)> {
    let mut sorted: Vec<&Shard> = shards.iter().collect();
    sorted.sort_by(|a, b| a.cmp_in_key_order(b));
    // The shard seen so far that reaches furthest, and its exclusive end
    // (`None`: unbounded). Every earlier shard starts at or before the next
    // one, so the next overlaps one of them exactly when it holds a key
    // below this reach.
    let mut reach: Option<(&Shard, Option<String>)> = None;
    for shard in sorted {
        let (after, before) = shard.exclusive_bounds();
        if let Some((holder, end)) = &reach {
            if has_key_between(after.as_deref(), least(end.as_deref(), before.as_deref())) {
                return Some(((*holder).clone(), shard.clone()));
            }
        }
        let further = match &reach {
            None => true,
            Some((_, end)) => end.is_some() && before.as_ref().is_none_or(|b| Some(b) > end.as_ref()),
        };
        if further {
            reach = Some((shard, before));
        }
    }
    None
}

/// The lower of two exclusive ends (`None`: unbounded).
fn least<'a>(a: Option<&'a str>, b: Option<&'a str>) -> Option<&'a str> {
    match (a, b) {
        (Some(x), Some(y)) => Some(x.min(y)),
        (x, y) => x.or(y),
    }
}

/// Is there a valid key `k` with `after < k < before` (`None`: unbounded)?
/// The greatest valid key below `before` decides: keys are bounded in
/// length, so `after` followed by U+0000 may be no key (after a bound that
/// [`key_before`] padded to the longest key).
fn has_key_between(after: Option<&str>, before: Option<&str>) -> bool {
    let Some(before) = before else { return true };
    key_before(before).is_some_and(|greatest| after.is_none_or(|a| greatest.as_str() > a))
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

    #[test]
    fn overlapping_shards_are_found_and_a_tiling_has_none() {
        let whole = Shard::prefix("p/");
        let (low, high) = whole.split_after("p/10/100");
        let (mid, top) = high.split_after("p/20/200");
        assert_eq!(overlapping(&[top.clone(), low.clone(), mid.clone()]), None);
        assert_eq!(
            overlapping(&[Shard::prefix("p/05/"), Shard::prefix("p/25/")]),
            None
        );
        let only_p = Shard {
            prefix: "p/".into(),
            start_after: None,
            end: Some("p/\0".into()),
        };
        let after_p = Shard {
            prefix: "p/".into(),
            start_after: Some("p/".into()),
            end: None,
        };
        assert_eq!(
            overlapping(&[after_p.clone(), only_p.clone()]),
            None,
            "they only touch"
        );
        // A gap that starts after the greatest key below `h4/`: the key
        // after that bound is `h4/` itself, not the bound and U+0000 (a key
        // longer than S3 allows).
        let below = Shard {
            prefix: String::new(),
            start_after: None,
            end: Some("h4/".into()),
        };
        let gap = Shard {
            prefix: String::new(),
            start_after: key_before("h4/"),
            end: None,
        };
        assert_eq!(overlapping(&[below.clone(), gap.clone()]), None);
        assert!(uncovered("", &[below, gap]).is_empty());
        // A second plan that tiled the bucket differently.
        let (other_low, _) = whole.split_after("p/15/000");
        assert!(overlapping(&[low.clone(), high.clone(), other_low.clone()]).is_some());
        // A shard inside another, far from its neighbours.
        let inside = Shard::prefix("p/12/");
        let found =
            overlapping(&[low.clone(), mid.clone(), top.clone(), whole.clone(), inside]).expect("overlap");
        assert!(found.0 == whole || found.1 == whole, "{found:?}");
        // Every pair found shares a key of the test keyspace.
        for pair in [[low.clone(), other_low.clone()], [whole.clone(), top.clone()]] {
            let (a, b) = overlapping(&pair).expect("overlap");
            assert!(
                keys().iter().any(|k| a.contains(k) && b.contains(k)),
                "{a:?} {b:?}"
            );
        }
    }
}
