//! Shards: the unit of work. A shard is a contiguous range of keys that one
//! listing stream can cover: keys that start with `prefix`, sort strictly after
//! `start_after` (S3's own exclusive `StartAfter`) and strictly before `end`.
//!
//! Split points are always "after key `k`": the lower half gets `end = k + "\0"`
//! (every key `<= k` sorts before `k + "\0"`, nothing sorts between `k` and
//! `k + "\0"`), the upper half gets `start_after = k`. That keeps every split
//! exact, with no key lost or covered twice.
//!
//! May import: S3's key length limit from `s3::codec`, nothing else (pure
//! range arithmetic).

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

pub use crate::s3::codec::MAX_KEY_BYTES;

#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Shard {
    /// Every key in the shard starts with this prefix (may be empty).
    #[serde(default)]
    pub prefix: String,
    /// Keys must sort strictly after this one (exclusive), as S3's `StartAfter`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub start_after: Option<String>,
    /// Keys must sort strictly before this one (exclusive); `None` is unbounded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub end: Option<String>,
}

impl Shard {
    /// The whole keyspace under `prefix`.
    pub fn prefix(prefix: impl Into<String>) -> Self {
        Shard {
            prefix: prefix.into(),
            ..Shard::default()
        }
    }

    /// Does `key` belong to this shard? (Used for filtering and in tests; the
    /// listing itself asks S3 for exactly this range.)
    pub fn contains(&self, key: &str) -> bool {
        key.starts_with(&self.prefix)
            && self.start_after.as_deref().is_none_or(|s| key > s)
            && self.end.as_deref().is_none_or(|e| key < e)
    }

    /// Is `key` at or past the shard's end, so listing must stop?
    pub fn is_past_end(&self, key: &str) -> bool {
        self.end.as_deref().is_some_and(|e| key >= e)
    }

    /// The smallest string the shard's keys are above or at: where it starts
    /// in key order (shards sort by it).
    pub fn lower_bound(&self) -> &str {
        match &self.start_after {
            Some(s) if s.as_str() > self.prefix.as_str() => s,
            _ => &self.prefix,
        }
    }

    /// Key order of disjoint shards: by where their keys begin, then where
    /// they end (an unbounded end last). [`Shard::lower_bound`] alone ties
    /// between a shard that holds the key `p/` and its sibling that starts
    /// after it (`start_after: p/`), and a tie leaves a merge unsorted.
    pub fn cmp_in_key_order(&self, other: &Shard) -> std::cmp::Ordering {
        let (a_after, a_before) = self.exclusive_bounds();
        let (b_after, b_before) = other.exclusive_bounds();
        a_after
            .cmp(&b_after)
            .then_with(|| (a_before.is_none(), a_before).cmp(&(b_before.is_none(), b_before)))
    }

    /// The shard's keys as one exclusive interval `(after, before)` of the
    /// whole keyspace, prefix included: a key `k` is in the shard when
    /// `after < k < before` (`None`: unbounded). Exact because [`key_before`]
    /// and [`prefix_end`] are.
    pub fn exclusive_bounds(&self) -> (Option<String>, Option<String>) {
        let after = match (&self.start_after, key_before(&self.prefix)) {
            (Some(a), Some(p)) => Some(a.clone().max(p)),
            (a, p) => a.clone().or(p),
        };
        let before = match (&self.end, prefix_end(&self.prefix)) {
            (Some(e), Some(p)) => Some(e.clone().min(p)),
            (e, p) => e.clone().or(p),
        };
        (after, before)
    }

    /// Split into the keys `<= key` and the keys `> key`. `key` must lie inside
    /// the shard, so both halves are non-empty ranges.
    pub fn split_after(&self, key: &str) -> (Shard, Shard) {
        let lower = Shard {
            end: Some(format!("{key}\0")),
            ..self.clone()
        };
        let upper = Shard {
            start_after: Some(key.to_string()),
            ..self.clone()
        };
        (lower, upper)
    }

    /// The same range, resumed after `checkpoint` (the last key already done).
    pub fn resumed_after(&self, checkpoint: &str) -> Shard {
        Shard {
            start_after: Some(checkpoint.to_string()),
            ..self.clone()
        }
    }

    /// A stable id derived from the range alone: a retried or re-planned shard
    /// gets the same id, so its output key is the same and overwrites.
    pub fn id(&self) -> String {
        let mut h = Sha256::new();
        for part in [
            Some(self.prefix.as_str()),
            self.start_after.as_deref(),
            self.end.as_deref(),
        ] {
            match part {
                Some(s) => {
                    h.update([1u8]);
                    h.update((s.len() as u64).to_be_bytes());
                    h.update(s.as_bytes());
                }
                None => h.update([0u8]),
            }
        }
        hex::encode(&h.finalize()[..12])
    }
}

impl std::fmt::Display for Shard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{:?}", self.prefix)?;
        if let Some(s) = &self.start_after {
            write!(f, " after {}", Readable(s))?;
        }
        if let Some(e) = &self.end {
            write!(f, " before {}", Readable(e))?;
        }
        Ok(())
    }
}

/// A bound for people: the padding of [`key_before`] (a long run of the
/// highest character) is shown as `…` instead of a kilobyte of escapes.
struct Readable<'a>(&'a str);

impl std::fmt::Display for Readable<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let trimmed = self
            .0
            .trim_end_matches(['\0', '\u{7F}', '\u{7FF}', '\u{FFFF}', '\u{10FFFF}']);
        if self.0.len() - trimmed.len() > 16 {
            write!(f, "{trimmed:?}…")
        } else {
            write!(f, "{:?}", self.0)
        }
    }
}

/// The smallest string greater than every string that starts with `prefix`,
/// or `None` when there is none (prefix empty or all U+10FFFF).
pub fn prefix_end(prefix: &str) -> Option<String> {
    let mut chars: Vec<char> = prefix.chars().collect();
    while let Some(last) = chars.pop() {
        if let Some(next) = next_char(last) {
            chars.push(next);
            return Some(chars.into_iter().collect());
        }
    }
    None
}

/// The greatest valid S3 key (UTF-8, at most [`MAX_KEY_BYTES`]) that sorts
/// before `key` in byte order, so that `StartAfter = key_before(k)` lists from
/// `k` inclusive. Returns `None` for the empty key (nothing sorts before it).
/// The result may hold characters servers refuse in a `StartAfter` (the
/// padding ends with U+FFFF or DEL when 3 or 1 bytes are left); the S3 client
/// cuts those on the wire and filters (`s3::codec::wire_start_after`).
pub fn key_before(key: &str) -> Option<String> {
    let mut out = key.to_string();
    let last = out.pop()?;
    if last == '\0' {
        // `a` < `a\0` with nothing in between.
        return Some(out);
    }
    out.push(prev_char(last));
    // Pad with the greatest characters that fit: every key between this and
    // `key` would have to be longer than S3 allows.
    while out.len() + 4 <= MAX_KEY_BYTES {
        out.push('\u{10FFFF}');
    }
    let tail = match MAX_KEY_BYTES.saturating_sub(out.len()) {
        3 => Some('\u{FFFF}'),
        2 => Some('\u{7FF}'),
        1 => Some('\u{7F}'),
        _ => None,
    };
    out.extend(tail);
    Some(out)
}

fn next_char(c: char) -> Option<char> {
    match c {
        '\u{D7FF}' => Some('\u{E000}'),
        '\u{10FFFF}' => None,
        c => char::from_u32(c as u32 + 1),
    }
}

fn prev_char(c: char) -> char {
    match c {
        '\u{E000}' => '\u{D7FF}',
        c => char::from_u32(c as u32 - 1).expect("caller excludes U+0000"),
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    #[test]
    fn split_after_is_exact() {
        let s = Shard::prefix("p/");
        let (lo, hi) = s.split_after("p/m");
        for k in ["p/a", "p/m", "p/m\0", "p/m\u{1}", "p/ma", "p/z"] {
            assert!(
                lo.contains(k) ^ hi.contains(k),
                "{k:?} must be in exactly one half"
            );
        }
        assert!(lo.contains("p/m"));
        assert!(hi.contains("p/ma"));
    }

    #[test]
    fn prefix_end_bounds_the_prefix() {
        assert_eq!(prefix_end("a/").as_deref(), Some("a0"));
        assert_eq!(prefix_end("").as_deref(), None);
        assert_eq!(prefix_end("a\u{10FFFF}").as_deref(), Some("b"));
        assert_eq!(prefix_end("\u{D7FF}").as_deref(), Some("\u{E000}"));
        let end = prefix_end("x/y").unwrap();
        assert!("x/y\u{10FFFF}zz" < end.as_str() && "x/z" >= end.as_str());
    }

    #[test]
    fn key_before_is_greatest_valid_key_below() {
        let k = "photos/b";
        let p = key_before(k).unwrap();
        assert!(p.as_str() < k);
        assert!(p.len() <= MAX_KEY_BYTES && p.len() > MAX_KEY_BYTES - 4);
        assert!("photos/a\u{10FFFF}\u{10FFFF}" < p.as_str());
        assert!("photos/a" < p.as_str());
        assert_eq!(key_before("a\0").as_deref(), Some("a"));
        assert_eq!(key_before(""), None);
        assert!(key_before("\u{E000}").unwrap().starts_with('\u{D7FF}'));
        // Exact: after the U+10FFFF padding, the greatest character of the
        // three bytes left is U+FFFF (a valid key, though servers refuse it in
        // a StartAfter), so no valid key lies between it and "b".
        let greatest_below_b = format!("a{}\u{FFFF}", "\u{10FFFF}".repeat(255));
        assert_eq!(greatest_below_b.len(), MAX_KEY_BYTES);
        assert_eq!(key_before("b"), Some(greatest_below_b));
        let two_left = format!("\u{80}{}", "\u{10FFFF}".repeat(255));
        assert_eq!(key_before("\u{81}"), Some(format!("{two_left}\u{7FF}")));
    }

    #[test]
    fn id_is_stable_and_distinguishes_ranges() {
        let a = Shard::prefix("a");
        assert_eq!(a.id(), Shard::prefix("a").id());
        assert_ne!(a.id(), Shard::prefix("b").id());
        let (lo, hi) = a.split_after("am");
        assert_ne!(lo.id(), hi.id());
        // `None` and `Some("")` are different ranges on the wire; keep them apart.
        let empty_after = Shard {
            start_after: Some(String::new()),
            ..a.clone()
        };
        assert_ne!(a.id(), empty_after.id());
    }

    /// Keys over an alphabet of the characters that sit at the edges of byte
    /// order and of what servers accept; some padded to exactly 1,024 bytes.
    pub(crate) fn key_strategy() -> impl proptest::strategy::Strategy<Value = String> {
        use proptest::prelude::*;
        let alphabet = vec![
            '\0',
            '\u{1}',
            '\t',
            '/',
            'a',
            'b',
            '~',
            '\u{7F}',
            '\u{80}',
            '\u{7FF}',
            '\u{D7FF}',
            '\u{E000}',
            '\u{FFFD}',
            '\u{FFFE}',
            '\u{FFFF}',
            '\u{10000}',
            '\u{10FFFF}',
        ];
        let ch = prop::sample::select(alphabet);
        (
            prop::collection::vec(ch.clone(), 0..6),
            prop::option::weighted(0.2, ch),
        )
            .prop_map(|(chars, pad)| {
                let mut key: String = chars.into_iter().collect();
                if let Some(c) = pad {
                    while key.len() + c.len_utf8() <= MAX_KEY_BYTES {
                        key.push(c);
                    }
                }
                key
            })
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(2000))]

        /// `key_before(s)` is the greatest valid key below `s`: every valid
        /// key `t` sorts below `s` exactly when it sorts at or below it.
        #[test]
        fn key_before_is_the_exact_predecessor(s in key_strategy(), t in key_strategy()) {
            match key_before(&s) {
                None => proptest::prop_assert!(s.is_empty()),
                Some(before) => {
                    proptest::prop_assert!(before.len() <= MAX_KEY_BYTES && before < s);
                    proptest::prop_assert_eq!(t < s, t <= before, "{:?} / {:?}", t, before);
                }
            }
        }

        /// `prefix_end(p)` bounds exactly the keys that start with `p`.
        #[test]
        fn prefix_end_bounds_exactly_the_keys_under_a_prefix(p in key_strategy(), t in key_strategy()) {
            let under = t.starts_with(&p);
            let in_range = t >= p && prefix_end(&p).is_none_or(|e| t < e);
            proptest::prop_assert_eq!(under, in_range, "{:?} / {:?}", t, p);
        }

        /// `split_after(k)` puts every key in exactly one half, `k` below.
        #[test]
        fn split_after_puts_every_key_in_one_half(p in key_strategy(), k in key_strategy(), t in key_strategy()) {
            let shard = Shard::prefix(p.chars().take(2).collect::<String>());
            let (lower, upper) = shard.split_after(&k);
            proptest::prop_assert_eq!(shard.contains(&t), lower.contains(&t) || upper.contains(&t));
            proptest::prop_assert!(!(lower.contains(&t) && upper.contains(&t)));
            proptest::prop_assert_eq!(lower.contains(&t), shard.contains(&t) && t <= k);
            let (after, before) = shard.exclusive_bounds();
            let inside = after.is_none_or(|a| t > a) && before.is_none_or(|b| t < b);
            proptest::prop_assert_eq!(inside, shard.contains(&t));
        }
    }
}
