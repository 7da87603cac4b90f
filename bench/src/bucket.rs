//! The bucket synthetic-s3 serves: the arithmetic [`Keyspace`], optionally
//! changed by a deterministic share of its objects ([`Changes`]), as an
//! incremental scan meets a bucket a day after its baseline. The changed
//! objects come in four equal parts: objects added (keys that sort between
//! existing ones), deleted, content rewritten (size and ETag change,
//! LastModified moves) and metadata replaced (ETag and size kept,
//! LastModified moves, user metadata differs).
//!
//! Still arithmetic (nothing per object is stored, so 10^9 objects cost
//! nothing): changed objects sit at a fixed stride over the indexes from an
//! offset the seed picks, and the seed rotates the kinds within each group of
//! four, so each kind is exactly a quarter. An object added at index `i` has
//! key `key(i)` + [`ADDED_SUFFIX`], which sorts after `key(i)` and before
//! `key(i + 1)` (every layout's keys have one length). A listing walks
//! positions: `2 i` is object `i`, `2 i + 1` the object added after it; the
//! continuation token is a position.
//!
//! Listing and HEAD agree on size, ETag and LastModified. Unchanged objects
//! have one fixed LastModified ([`UNCHANGED_LAST_MODIFIED`], before any
//! server's start), the changed ones the second after this server started,
//! so a scan that ran before it (a baseline) saw older times and an
//! incremental scan sees every change in the listing.
//!
//! May import: `keyspace`.

use crate::keyspace::{Keyspace, Object, ETAG_MULTIPLIER};

/// Appended to the key of an object to give the key of the object added
/// after it.
pub const ADDED_SUFFIX: &str = ".added";

/// LastModified of every unchanged object: 2026-11-02T10:00:00Z.
pub const UNCHANGED_LAST_MODIFIED: i64 = 1_793_613_600;

/// What changed since the unchanged bucket: `share` of its objects, picked
/// by `seed`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Changes {
    /// 0 to 1: changed objects (of the four kinds together) per object.
    pub share: f64,
    pub seed: u64,
}

/// What happened to one object.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum ChangeKind {
    /// A new object after this one (this one is unchanged).
    Added,
    Deleted,
    ContentRewritten,
    MetadataReplaced,
}

impl ChangeKind {
    /// The name bucketscan's change set gives this change (`change` column).
    pub fn change_set_name(self) -> &'static str {
        match self {
            ChangeKind::Added => "added",
            ChangeKind::Deleted => "removed",
            ChangeKind::ContentRewritten => "content_changed",
            ChangeKind::MetadataReplaced => "metadata_changed",
        }
    }
}

/// One listed object.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Entry {
    pub key: String,
    pub size: u64,
    pub etag: String,
    /// Unix seconds.
    pub last_modified: i64,
}

/// One ListObjectsV2 page.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Page {
    pub entries: Vec<Entry>,
    pub common_prefixes: Vec<String>,
    /// Position to continue from, when truncated.
    pub next: Option<u64>,
}

/// Which indexes changed: `slots` of them, `stride` apart from `offset`.
#[derive(Clone, Copy, Debug)]
struct Plan {
    slots: u64,
    stride: u64,
    offset: u64,
    seed: u64,
}

impl Plan {
    fn new(objects: u64, changes: Changes) -> Plan {
        let per_kind = ((objects as f64 * changes.share.clamp(0.0, 1.0)) / 4.0).round() as u64;
        let slots = (per_kind * 4).min(objects / 4 * 4);
        let stride = objects.checked_div(slots).unwrap_or(1);
        Plan {
            slots,
            stride,
            offset: mix(changes.seed, 0) % stride,
            seed: changes.seed,
        }
    }

    fn kind(&self, i: u64) -> Option<ChangeKind> {
        let d = i.checked_sub(self.offset)?;
        let slot = d / self.stride;
        if self.slots == 0 || !d.is_multiple_of(self.stride) || slot >= self.slots {
            return None;
        }
        // Each group of four slots has each kind once, in an order the seed
        // picks: equal parts, spread over the whole keyspace.
        let rotation = mix(self.seed, 1 + slot / 4);
        Some(match (slot % 4 + rotation) % 4 {
            0 => ChangeKind::Added,
            1 => ChangeKind::Deleted,
            2 => ChangeKind::ContentRewritten,
            _ => ChangeKind::MetadataReplaced,
        })
    }
}

/// A well-spread number from a seed and a stream (splitmix64's finaliser).
fn mix(seed: u64, stream: u64) -> u64 {
    let mut x = seed ^ stream.wrapping_mul(0x9E37_79B9_7F4A_7C15);
    x = (x ^ (x >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    x ^ (x >> 31)
}

/// An ETag no unchanged object has: `stream` (1 or more) in the high half of
/// the input of the same odd multiplier (a bijection of u128) as theirs.
fn other_etag(i: u64, seed: u64, stream: u64) -> String {
    let input = (i as u128) | (((mix(seed, stream) | 1) as u128) << 64);
    format!("{:032x}", input.wrapping_mul(ETAG_MULTIPLIER))
}

/// The bucket served: a keyspace and what changed in it.
#[derive(Clone, Copy, Debug)]
pub struct Bucket {
    pub keyspace: Keyspace,
    plan: Option<Plan>,
    /// LastModified of changed objects (unix seconds).
    changed_at: i64,
}

impl Bucket {
    /// The keyspace as it is.
    pub fn unchanged(keyspace: Keyspace) -> Bucket {
        Bucket {
            keyspace,
            plan: None,
            changed_at: UNCHANGED_LAST_MODIFIED,
        }
    }

    /// The keyspace with `changes`, the changed objects modified at
    /// `changed_at` (unix seconds; after [`UNCHANGED_LAST_MODIFIED`]).
    pub fn changed(keyspace: Keyspace, changes: Changes, changed_at: i64) -> Bucket {
        Bucket {
            keyspace,
            plan: Some(Plan::new(keyspace.objects, changes)),
            changed_at: changed_at.max(UNCHANGED_LAST_MODIFIED + 1),
        }
    }

    /// What happened to object `i`.
    pub fn change_of(&self, i: u64) -> Option<ChangeKind> {
        self.plan.and_then(|p| p.kind(i))
    }

    fn is_added_after(&self, i: u64) -> bool {
        self.change_of(i) == Some(ChangeKind::Added)
    }

    /// The object `key` names now, if the bucket has it.
    pub fn head(&self, key: &str) -> Option<(Object, i64)> {
        if let Some(base) = key.strip_suffix(ADDED_SUFFIX) {
            let i = self.keyspace.index_of(base)?;
            return self.is_added_after(i).then(|| self.added(i));
        }
        let i = self.keyspace.index_of(key)?;
        self.object(i)
    }

    /// Object `i`'s size, ETag and LastModified now (`None`: deleted): what
    /// a listing gives, without building its metadata.
    fn listed(&self, i: u64) -> Option<(u64, String, i64)> {
        let seed = self.plan.map_or(0, |p| p.seed);
        let (size, etag) = (Keyspace::size(i), Keyspace::etag(i));
        match self.change_of(i) {
            None | Some(ChangeKind::Added) => Some((size, etag, UNCHANGED_LAST_MODIFIED)),
            Some(ChangeKind::Deleted) => None,
            Some(ChangeKind::ContentRewritten) => {
                Some((size + 4_096, other_etag(i, seed, 1), self.changed_at))
            }
            Some(ChangeKind::MetadataReplaced) => Some((size, etag, self.changed_at)),
        }
    }

    /// Object `i` as it is now (`None`: deleted).
    fn object(&self, i: u64) -> Option<(Object, i64)> {
        let (size, etag, last_modified) = self.listed(i)?;
        let mut o = Object {
            size,
            etag,
            ..self.keyspace.head(i)
        };
        let seed = self.plan.map_or(0, |p| p.seed);
        match self.change_of(i) {
            Some(ChangeKind::MetadataReplaced) => {
                for (name, value) in &mut o.metadata {
                    if *name == "team" {
                        *value = format!("team-{}", (i + 1) % 7 + 7);
                    }
                }
                o.metadata.push(("replaced", seed.to_string()));
                Some((o, last_modified))
            }
            _ => Some((o, last_modified)),
        }
    }

    /// The object added after object `i`.
    fn added(&self, i: u64) -> (Object, i64) {
        let seed = self.plan.map_or(0, |p| p.seed);
        let (size, etag) = self.added_listed(i);
        let object = Object {
            size,
            etag,
            metadata: vec![("index", i.to_string()), ("added", seed.to_string())],
        };
        (object, self.changed_at)
    }

    /// The size and ETag of the object added after object `i`.
    fn added_listed(&self, i: u64) -> (u64, String) {
        let seed = self.plan.map_or(0, |p| p.seed);
        ((i.wrapping_mul(7) + 1) % 4_096, other_etag(i, seed, 2))
    }

    /// The key at position `p` (whether or not an object is there).
    fn key_at(&self, p: u64) -> String {
        let key = self.keyspace.key(p / 2);
        if p.is_multiple_of(2) {
            key
        } else {
            key + ADDED_SUFFIX
        }
    }

    /// The entry at position `p`, if an object is there now.
    fn entry_at(&self, p: u64, key: String) -> Option<Entry> {
        let i = p / 2;
        let (size, etag, last_modified) = if p.is_multiple_of(2) {
            self.listed(i)?
        } else if self.is_added_after(i) {
            let (size, etag) = self.added_listed(i);
            (size, etag, self.changed_at)
        } else {
            return None;
        };
        Some(Entry {
            key,
            size,
            etag,
            last_modified,
        })
    }

    fn end(&self) -> u64 {
        self.keyspace.objects * 2
    }

    /// The first position whose key is `>= bound`.
    fn at_or_after(&self, bound: &str) -> u64 {
        let i = self.keyspace.first_at_or_after(bound);
        // The object added after `i - 1` sorts between its key and `bound`'s
        // successor: it may be the first at or after `bound`.
        if i > 0 && self.is_added_after(i - 1) && self.key_at(2 * i - 1).as_str() >= bound {
            2 * i - 1
        } else {
            2 * i
        }
    }

    /// The first position whose key is `> bound`.
    fn after(&self, bound: &str) -> u64 {
        let p = self.at_or_after(bound);
        if p < self.end() && self.key_at(p) == bound {
            p + 1
        } else {
            p
        }
    }

    /// ListObjectsV2: keys starting with `prefix`, after `start_after` (or
    /// from position `from`, a continuation), rolled up at `delimiter`.
    pub fn list(
        &self,
        prefix: &str,
        start_after: Option<&str>,
        from: Option<u64>,
        delimiter: Option<&str>,
        max: usize,
    ) -> Page {
        let mut p = match from {
            Some(p) => p,
            None => {
                let floor = self.at_or_after(prefix);
                match start_after {
                    Some(a) => floor.max(self.after(a)),
                    None => floor,
                }
            }
        };
        let mut page = Page::default();
        while p < self.end() {
            // The odd positions without an added object cost no key.
            if p % 2 == 1 && !self.is_added_after(p / 2) {
                p += 1;
                continue;
            }
            if page.entries.len() + page.common_prefixes.len() == max {
                page.next = Some(p);
                break;
            }
            let key = self.key_at(p);
            if !key.starts_with(prefix) {
                break;
            }
            let rest = &key[prefix.len()..];
            if let Some(pos) = delimiter
                .filter(|d| !d.is_empty())
                .and_then(|d| rest.find(d).map(|at| at + d.len()))
            {
                let common = key[..prefix.len() + pos].to_string();
                p = self.at_or_after(&prefix_end(&common));
                page.common_prefixes.push(common);
                continue;
            }
            if let Some(entry) = self.entry_at(p, key) {
                page.entries.push(entry);
            }
            p += 1;
        }
        page
    }

    /// Every change, in key order: (key, kind). A walk over the changed
    /// indexes only (`share` x objects of them).
    pub fn changes(&self) -> impl Iterator<Item = (String, ChangeKind)> + '_ {
        let plan = self.plan.filter(|p| p.slots > 0);
        let slots = plan.map_or(0, |p| p.slots);
        (0..slots).map(move |slot| {
            let plan = plan.expect("slots only with a plan");
            let i = plan.offset + slot * plan.stride;
            let kind = plan.kind(i).expect("a slot is a change");
            let key = self.keyspace.key(i);
            match kind {
                ChangeKind::Added => (key + ADDED_SUFFIX, kind),
                _ => (key, kind),
            }
        })
    }
}

/// The smallest string above every string starting with `p` (the keys here
/// are ASCII, so bumping the last byte is enough).
fn prefix_end(p: &str) -> String {
    let mut bytes = p.as_bytes().to_vec();
    while let Some(last) = bytes.pop() {
        if last < 0x7f {
            bytes.push(last + 1);
            return String::from_utf8(bytes).expect("ASCII");
        }
    }
    "\u{7f}".repeat(p.len() + 1)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::keyspace::Layout;
    use std::collections::BTreeMap;

    fn keyspace(objects: u64, layout: Layout) -> Keyspace {
        Keyspace { objects, layout }
    }

    const AT: i64 = UNCHANGED_LAST_MODIFIED + 86_400;

    /// Every object of the bucket, by brute force over positions: the model
    /// the listing is checked against.
    fn all(bucket: &Bucket) -> Vec<Entry> {
        (0..bucket.end())
            .filter_map(|p| bucket.entry_at(p, bucket.key_at(p)))
            .collect()
    }

    #[test]
    fn a_share_of_one_percent_changes_one_percent_in_four_equal_parts() {
        for (objects, seed) in [(1_000_000, 7), (10_000, 1), (1_000_000_000, 42)] {
            let b = Bucket::changed(keyspace(objects, Layout::Flat), Changes { share: 0.01, seed }, AT);
            let mut by_kind = BTreeMap::new();
            for (_, kind) in b.changes() {
                *by_kind.entry(kind).or_insert(0u64) += 1;
            }
            assert_eq!(by_kind.values().sum::<u64>(), objects / 100, "{objects}");
            assert_eq!(by_kind.len(), 4);
            assert!(by_kind.values().all(|&n| n == objects / 400), "{by_kind:?}");
        }
    }

    #[test]
    fn seeds_pick_other_objects_and_the_same_seed_the_same() {
        let ks = keyspace(100_000, Layout::Nested);
        let changes = |seed| {
            Bucket::changed(ks, Changes { share: 0.01, seed }, AT)
                .changes()
                .collect::<Vec<_>>()
        };
        assert_eq!(changes(3), changes(3));
        assert_ne!(changes(3), changes(4));
    }

    #[test]
    fn keys_stay_in_order_and_the_bucket_is_what_changed() {
        for layout in [Layout::Flat, Layout::Nested, Layout::Skewed, Layout::Prefixes] {
            let ks = keyspace(20_000, layout);
            let before = all(&Bucket::unchanged(ks));
            let b = Bucket::changed(ks, Changes { share: 0.02, seed: 9 }, AT);
            let after = all(&b);
            assert!(after.windows(2).all(|w| w[0].key < w[1].key), "{layout:?}");
            // Each change, against the unchanged bucket.
            let old: BTreeMap<_, _> = before.iter().map(|e| (e.key.clone(), e)).collect();
            let new: BTreeMap<_, _> = after.iter().map(|e| (e.key.clone(), e)).collect();
            let changes: BTreeMap<_, _> = b.changes().collect();
            assert_eq!(changes.len(), 400);
            for (key, kind) in &changes {
                let (o, n) = (old.get(key), new.get(key));
                match kind {
                    ChangeKind::Added => assert!(o.is_none() && n.is_some(), "{key}"),
                    ChangeKind::Deleted => assert!(o.is_some() && n.is_none(), "{key}"),
                    ChangeKind::ContentRewritten => {
                        let (o, n) = (o.unwrap(), n.unwrap());
                        assert!(
                            o.size != n.size && o.etag != n.etag && n.last_modified == AT,
                            "{key}"
                        );
                    }
                    ChangeKind::MetadataReplaced => {
                        let (o, n) = (o.unwrap(), n.unwrap());
                        assert!(
                            o.size == n.size && o.etag == n.etag && n.last_modified == AT,
                            "{key}"
                        );
                        let (ho, hn) = (Bucket::unchanged(ks).head(key).unwrap().0, b.head(key).unwrap().0);
                        assert_ne!(ho.metadata, hn.metadata, "{key}");
                    }
                }
            }
            // Every other object is as it was.
            for (key, entry) in &new {
                if !changes.contains_key(key) {
                    assert_eq!(old.get(key), Some(entry), "{key}");
                    assert_eq!(entry.last_modified, UNCHANGED_LAST_MODIFIED);
                }
            }
            // As many added as deleted.
            assert_eq!(new.len(), old.len());
            // HEAD agrees with the listing, and nothing else is there.
            for e in after.iter().step_by(37) {
                let (o, lm) = b.head(&e.key).expect("listed, so there");
                assert_eq!((o.size, &o.etag, lm), (e.size, &e.etag, e.last_modified));
            }
            for (key, kind) in &changes {
                assert_eq!(b.head(key).is_none(), *kind == ChangeKind::Deleted, "{key}");
            }
            assert!(b.head(&(ks.key(5) + "x")).is_none());
        }
    }

    /// Listing equals a brute-force filter of all keys, page by page.
    #[test]
    fn listing_matches_a_model_of_s3() {
        let ks = keyspace(3_500, Layout::Nested);
        for bucket in [
            Bucket::unchanged(ks),
            Bucket::changed(ks, Changes { share: 0.1, seed: 5 }, AT),
        ] {
            let keys: Vec<String> = all(&bucket).into_iter().map(|e| e.key).collect();
            let added = keys.iter().find(|k| k.ends_with(ADDED_SUFFIX)).cloned();
            for (prefix, start_after, delimiter) in [
                ("", None, None),
                ("0000/002/", None, None),
                ("0000/", Some("0000/001/000000001500"), None),
                ("", added.as_deref(), None),
                ("", None, Some("/")),
                ("0000/", None, Some("/")),
                ("0000/00", Some("0000/001/"), Some("/")),
            ] {
                let mut want_keys = Vec::new();
                let mut want_prefixes: Vec<String> = Vec::new();
                for k in keys
                    .iter()
                    .filter(|k| k.starts_with(prefix) && start_after.is_none_or(|a| k.as_str() > a))
                {
                    match delimiter.and_then(|d| {
                        k[prefix.len()..]
                            .find(d)
                            .map(|p| k[..prefix.len() + p + d.len()].to_string())
                    }) {
                        Some(cp) if want_prefixes.last() != Some(&cp) => want_prefixes.push(cp),
                        Some(_) => {}
                        None => want_keys.push(k.clone()),
                    }
                }
                let (mut got_keys, mut got_prefixes, mut from) = (Vec::new(), Vec::new(), None);
                loop {
                    let page = bucket.list(prefix, start_after, from, delimiter, 700);
                    got_keys.extend(page.entries.into_iter().map(|e| e.key));
                    got_prefixes.extend(page.common_prefixes);
                    match page.next {
                        Some(n) => from = Some(n),
                        None => break,
                    }
                }
                assert_eq!(got_keys, want_keys, "{prefix:?} {start_after:?} {delimiter:?}");
                assert_eq!(
                    got_prefixes, want_prefixes,
                    "{prefix:?} {start_after:?} {delimiter:?}"
                );
            }
        }
    }

    #[test]
    fn a_billion_objects_cost_nothing_to_list_deep_inside() {
        let ks = keyspace(1_000_000_000, Layout::Flat);
        let b = Bucket::changed(ks, Changes { share: 0.01, seed: 1 }, AT);
        let page = b.list("", Some(&ks.key(777_777_777)), None, None, 1000);
        assert_eq!(page.entries.len(), 1000);
        assert!(page.entries[0].key > ks.key(777_777_777));
        assert!(page.entries[0].key <= ks.key(777_777_778));
    }
}
