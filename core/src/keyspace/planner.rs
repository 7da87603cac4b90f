//! Splits a bucket (or a prefix of it) into shards of similar size using only
//! LIST requests.
//!
//! The keyspace is refined like a trie: a node is either every key under a
//! prefix or one exact key. A node too big for one page is expanded into
//! children, first by the delimiter (common prefixes, like directories) and,
//! where that gives nothing (flat or hashed keys), by the next character of the
//! key, found with `StartAfter` skips: one LIST per distinct character. Big
//! nodes are expanded breadth first until there are enough of them; runs of
//! small neighbours are then merged into shards of about the mean size.
//!
//! The shards of a plan are disjoint and, at planning time, cover every key
//! under the prefix. A key created later in a gap between two shards that were
//! not merged may be missed, as with any listing of a changing bucket.
//!
//! May import: `shard` and `s3` (it lists through `S3`).

use crate::keyspace::shard::{key_before, prefix_end, Shard, MAX_KEY_BYTES};
use crate::s3::error::S3Error;
use crate::s3::{ListPage, ListRequest, S3};
use futures::stream::{self, StreamExt, TryStreamExt};
use std::future::Future;

/// Whatever can answer a ListObjectsV2 request: S3 itself, or an in-memory
/// keyspace in unit tests of the planning logic.
pub trait Lister: Sync {
    fn list(&self, req: &ListRequest) -> impl Future<Output = Result<ListPage, S3Error>> + Send;
}

/// LIST against one bucket of an S3 endpoint.
pub struct BucketLister<'a> {
    pub s3: &'a S3,
    pub bucket: &'a str,
}

impl Lister for BucketLister<'_> {
    fn list(&self, req: &ListRequest) -> impl Future<Output = Result<ListPage, S3Error>> + Send {
        self.s3.list_page(self.bucket, req)
    }
}

#[derive(Clone, Debug)]
pub struct PlanOptions {
    pub prefix: String,
    /// Split on this first (usually "/"); `None` splits by key characters only.
    pub delimiter: Option<String>,
    pub target_shards: usize,
    /// Small neighbours are merged up to at least this many objects.
    pub min_shard_objects: u64,
    /// Keys per LIST page (S3's maximum is 1,000).
    pub page_size: i32,
    /// Upper bound on LIST requests spent on planning.
    pub max_requests: usize,
    /// LIST requests in flight while planning.
    pub parallelism: usize,
}

impl Default for PlanOptions {
    fn default() -> Self {
        PlanOptions {
            prefix: String::new(),
            delimiter: Some("/".into()),
            target_shards: 64,
            min_shard_objects: 0,
            page_size: 1000,
            max_requests: 5000,
            parallelism: 32,
        }
    }
}

/// A shard and how many objects the planner saw in it.
#[derive(Clone, Debug, PartialEq)]
pub struct PlannedShard {
    pub shard: Shard,
    /// Objects seen; a lower bound when `exact` is false.
    pub estimated_objects: u64,
    pub exact: bool,
}

#[derive(Clone, Debug, PartialEq, Eq)]
enum NodeKind {
    /// Every key that starts with the string.
    Prefix,
    /// Exactly this key.
    Key,
}

#[derive(Clone, Debug)]
struct Node {
    kind: NodeKind,
    text: String,
    /// Keys seen; a lower bound unless `exact`.
    count: u64,
    exact: bool,
    depth: usize,
}

impl Node {
    fn key(text: String, depth: usize) -> Node {
        Node {
            kind: NodeKind::Key,
            text,
            count: 1,
            exact: true,
            depth,
        }
    }
    fn prefix(text: String, count: u64, exact: bool, depth: usize) -> Node {
        Node {
            kind: NodeKind::Prefix,
            text,
            count,
            exact,
            depth,
        }
    }
    fn is_big(&self) -> bool {
        !self.exact
    }
    /// Inclusive lower bound of the node's range.
    fn low(&self) -> &str {
        &self.text
    }
    /// Exclusive upper bound of the node's range.
    fn high(&self) -> Option<String> {
        match self.kind {
            NodeKind::Prefix => prefix_end(&self.text),
            NodeKind::Key => Some(format!("{}\0", self.text)),
        }
    }
}

struct Planner<'a, L: Lister> {
    lister: &'a L,
    opts: &'a PlanOptions,
    requests: std::sync::atomic::AtomicUsize,
}

/// Plan the shards of `opts.prefix`.
pub async fn plan<L: Lister>(lister: &L, opts: &PlanOptions) -> Result<Vec<PlannedShard>, S3Error> {
    let planner = Planner {
        lister,
        opts,
        requests: Default::default(),
    };
    let root = planner.probe(opts.prefix.clone(), 0).await?;
    let mut nodes = vec![root];
    loop {
        let big = nodes.iter().filter(|n| n.is_big()).count();
        if big == 0 || big >= opts.target_shards || planner.spent() >= opts.max_requests {
            break;
        }
        let depth = nodes
            .iter()
            .filter(|n| n.is_big() && n.text.len() < MAX_KEY_BYTES)
            .map(|n| n.depth)
            .min();
        let Some(depth) = depth else { break };
        // Expand every big node of the shallowest level, a few at a time.
        let expanded: Vec<Vec<Node>> = stream::iter(nodes.into_iter().map(|n| {
            let expand = n.is_big() && n.depth == depth && n.text.len() < MAX_KEY_BYTES;
            let planner = &planner;
            async move {
                if expand {
                    planner.expand(&n).await
                } else {
                    Ok(vec![n])
                }
            }
        }))
        .buffered(opts.parallelism.clamp(1, 8))
        .try_collect()
        .await?;
        nodes = expanded.into_iter().flatten().collect();
    }
    Ok(merge_into_shards(&opts.prefix, nodes, opts))
}

impl<L: Lister> Planner<'_, L> {
    fn spent(&self) -> usize {
        self.requests.load(std::sync::atomic::Ordering::Relaxed)
    }

    async fn list(&self, req: ListRequest) -> Result<ListPage, S3Error> {
        self.requests.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        self.lister.list(&req).await
    }

    /// Count the keys under a prefix, up to one page.
    async fn probe(&self, prefix: String, depth: usize) -> Result<Node, S3Error> {
        let page = self
            .list(ListRequest {
                prefix: prefix.clone(),
                max_keys: self.opts.page_size,
                ..ListRequest::default()
            })
            .await?;
        let count = page.objects.len() as u64;
        Ok(Node::prefix(prefix, count, page.next.is_none(), depth))
    }

    async fn expand(&self, node: &Node) -> Result<Vec<Node>, S3Error> {
        if let Some(d) = &self.opts.delimiter {
            if node.text == self.opts.prefix || node.text.ends_with(d.as_str()) {
                if let Some(children) = self.expand_by_delimiter(node, d).await? {
                    return Ok(children);
                }
            }
        }
        self.expand_by_character(node).await
    }

    /// Children from common prefixes. Returns `None` (split by characters
    /// instead) when the level has no common prefixes, or holds a page or
    /// more of objects itself, or the budget runs out.
    async fn expand_by_delimiter(&self, node: &Node, delimiter: &str) -> Result<Option<Vec<Node>>, S3Error> {
        let page_size = self.opts.page_size as usize;
        let mut keys = Vec::new();
        let mut prefixes = Vec::new();
        let mut continuation = None;
        loop {
            let page = self
                .list(ListRequest {
                    prefix: node.text.clone(),
                    delimiter: Some(delimiter.to_string()),
                    continuation: continuation.take(),
                    max_keys: self.opts.page_size,
                    ..ListRequest::default()
                })
                .await?;
            keys.extend(page.objects.into_iter().map(|o| o.key));
            prefixes.extend(page.common_prefixes);
            if keys.len() >= page_size {
                return Ok(None);
            }
            match page.next {
                Some(token) if self.spent() < self.opts.max_requests => continuation = Some(token),
                Some(_) => return Ok(None),
                None => break,
            }
        }
        if prefixes.is_empty() {
            return Ok(None);
        }
        let depth = node.depth + 1;
        let probes: Vec<Node> = stream::iter(prefixes.into_iter().map(|p| self.probe(p, depth)))
            .buffered(self.opts.parallelism.max(1))
            .try_collect()
            .await?;
        let mut children: Vec<Node> = keys.into_iter().map(|k| Node::key(k, depth)).collect();
        children.extend(probes);
        children.sort_by(|a, b| a.text.cmp(&b.text));
        Ok(Some(children))
    }

    /// Children by the character after the node's prefix (the node itself
    /// when the budget runs out first).
    async fn expand_by_character(&self, node: &Node) -> Result<Vec<Node>, S3Error> {
        let groups = self
            .groups_by_character(&node.text, None, None, node.depth + 1)
            .await?;
        Ok(groups.unwrap_or_else(|| vec![node.clone()]))
    }

    /// The keys under `base` that sort after `after` and before `before`,
    /// grouped by the character after `base`: one LIST per distinct
    /// character, skipping the rest of a big group with `StartAfter`.
    /// `None` when the budget runs out before the groups cover the range.
    async fn groups_by_character(
        &self,
        base: &str,
        after: Option<String>,
        before: Option<&str>,
        depth: usize,
    ) -> Result<Option<Vec<Node>>, S3Error> {
        let page_size = self.opts.page_size as u64;
        let mut children: Vec<Node> = Vec::new();
        let mut start_after = after;
        loop {
            let page = self
                .list(ListRequest {
                    prefix: base.to_string(),
                    start_after: start_after.clone(),
                    max_keys: self.opts.page_size,
                    ..ListRequest::default()
                })
                .await?;
            for object in &page.objects {
                if before.is_some_and(|b| object.key.as_str() >= b) {
                    return Ok(Some(children));
                }
                let Some(c) = object.key[base.len()..].chars().next() else {
                    children.push(Node::key(object.key.clone(), depth));
                    continue;
                };
                let group = format!("{base}{c}");
                match children.last_mut() {
                    Some(last) if last.kind == NodeKind::Prefix && last.text == group => last.count += 1,
                    _ => children.push(Node::prefix(group, 1, true, depth)),
                }
            }
            let Some(last_key) = page.objects.last().map(|o| o.key.clone()) else {
                break;
            };
            if page.next.is_none() {
                break;
            }
            // The last group may go on past this page.
            let last = children.last_mut().expect("a page with objects made a group");
            if last.kind == NodeKind::Prefix && last.count >= page_size {
                last.exact = false;
                match prefix_end(&last.text).and_then(|e| key_before(&e)) {
                    Some(skip) => start_after = Some(skip),
                    None => break,
                }
            } else {
                start_after = Some(last_key);
            }
            if self.spent() >= self.opts.max_requests {
                return Ok(None);
            }
        }
        Ok(Some(children))
    }
}

/// Where to split what is left of a shard being scanned, so that another
/// worker can take the upper part: `remaining` starts after the listing's
/// position. The keys left are grouped by their next character after the
/// longest prefix they share (descending while they all share one more), and
/// the split falls between the groups that divide the keys seen most evenly,
/// as far as `max_requests` LISTs can tell. Returns the key to split after
/// (see [`Shard::split_after`]), or `None` when less than a page is left.
pub async fn split_point<L: Lister>(
    lister: &L,
    remaining: &Shard,
    max_requests: usize,
) -> Result<Option<String>, S3Error> {
    let opts = PlanOptions {
        max_requests,
        ..PlanOptions::default()
    };
    let planner = Planner {
        lister,
        opts: &opts,
        requests: Default::default(),
    };
    let first = planner
        .list(ListRequest {
            prefix: remaining.prefix.clone(),
            start_after: remaining.start_after.clone(),
            max_keys: opts.page_size,
            ..ListRequest::default()
        })
        .await?;
    let (Some(first_key), Some(page_end)) = (first.objects.first(), first.objects.last()) else {
        return Ok(None);
    };
    if first.next.is_none() || remaining.is_past_end(&page_end.key) {
        return Ok(None);
    }
    let high = remaining.end.clone().or_else(|| prefix_end(&remaining.prefix));
    let mut base = match &high {
        Some(h) => common_prefix(&first_key.key, h).to_string(),
        None => remaining.prefix.clone(),
    };
    while planner.spent() < max_requests {
        let Some(groups) = planner
            .groups_by_character(&base, remaining.start_after.clone(), high.as_deref(), 0)
            .await?
        else {
            return Ok(None);
        };
        match groups.as_slice() {
            [] => return Ok(None),
            [only] if only.kind == NodeKind::Prefix && only.text.len() < MAX_KEY_BYTES => {
                base = only.text.clone(); // all on one branch: look one character deeper
            }
            [_] => return Ok(None),
            _ => return Ok(key_before(groups[most_even_split(&groups)].low())),
        }
    }
    Ok(None)
}

/// The group to start the upper part at (never the first), so that the keys
/// seen below and above it are closest to even.
fn most_even_split(groups: &[Node]) -> usize {
    let total: u64 = groups.iter().map(|g| g.count).sum();
    let mut below = 0;
    let mut best = (u64::MAX, 1);
    for (i, previous) in groups.iter().enumerate().take(groups.len() - 1) {
        below += previous.count;
        let imbalance = (2 * below).abs_diff(total);
        if imbalance < best.0 {
            best = (imbalance, i + 1);
        }
    }
    best.1
}

/// Walk the nodes in key order: each big node is a shard of its own, runs of
/// small neighbours are merged up to about the mean shard size.
fn merge_into_shards(root: &str, nodes: Vec<Node>, opts: &PlanOptions) -> Vec<PlannedShard> {
    let total: u64 = nodes.iter().map(|n| n.count).sum();
    let target = (total / opts.target_shards.max(1) as u64)
        .max(opts.page_size as u64)
        .max(opts.min_shard_objects);
    let mut shards = Vec::new();
    let mut run: Vec<Node> = Vec::new();
    let mut run_count = 0;
    for node in nodes {
        if node.is_big() || run_count + node.count > target {
            shards.extend(run_to_shard(root, &run));
            run.clear();
            run_count = 0;
        }
        if node.is_big() {
            shards.extend(run_to_shard(root, &[node]));
        } else {
            run_count += node.count;
            run.push(node);
        }
    }
    shards.extend(run_to_shard(root, &run));
    shards
}

fn run_to_shard(root: &str, run: &[Node]) -> Option<PlannedShard> {
    let (first, last) = (run.first()?, run.last()?);
    let count = run.iter().map(|n| n.count).sum();
    let exact = run.iter().all(|n| n.exact);
    if run.len() == 1 && first.kind == NodeKind::Prefix {
        return Some(PlannedShard {
            shard: Shard::prefix(first.text.clone()),
            estimated_objects: count,
            exact,
        });
    }
    // Every key between two strings that share a prefix shares it too.
    let mut prefix = common_prefix(first.low(), &last.text).to_string();
    if prefix.len() < root.len() {
        prefix = root.to_string();
    }
    let start_after = if first.low() == prefix {
        None
    } else {
        key_before(first.low())
    };
    let end = last.high().filter(|h| Some(h) != prefix_end(&prefix).as_ref());
    Some(PlannedShard {
        shard: Shard {
            prefix,
            start_after,
            end,
        },
        estimated_objects: count,
        exact,
    })
}

fn common_prefix<'a>(a: &'a str, b: &str) -> &'a str {
    let mut len = 0;
    for ((i, ca), cb) in a.char_indices().zip(b.chars()) {
        if ca != cb {
            break;
        }
        len = i + ca.len_utf8();
    }
    &a[..len]
}

#[cfg(test)]
mod tests {
    //! The planning logic against an in-memory keyspace that answers LIST the
    //! way S3 does. The same planner runs against real S3 servers in the
    //! worker's integration tests.
    use super::*;
    use crate::s3::ListedObject;
    use std::collections::BTreeSet;

    struct MemoryBucket(BTreeSet<String>);

    impl Lister for MemoryBucket {
        fn list(&self, req: &ListRequest) -> impl Future<Output = Result<ListPage, S3Error>> + Send {
            let after = req
                .continuation
                .clone()
                .or(req.start_after.clone())
                .unwrap_or_default();
            let mut page = ListPage::default();
            let mut last_seen = None;
            for key in self
                .0
                .range::<String, _>((std::ops::Bound::Excluded(after), std::ops::Bound::Unbounded))
            {
                if !key.starts_with(&req.prefix) {
                    // Sorted: keys below the prefix come first, then the prefix's keys.
                    if key.as_str() < req.prefix.as_str() {
                        continue;
                    }
                    break;
                }
                if page.objects.len() + page.common_prefixes.len() == req.max_keys as usize {
                    page.next = last_seen.clone();
                    break;
                }
                let rest = &key[req.prefix.len()..];
                if let Some(d) = req.delimiter.as_deref().filter(|d| rest.contains(*d)) {
                    let cp = format!("{}{}{}", req.prefix, &rest[..rest.find(d).unwrap()], d);
                    if page.common_prefixes.last() != Some(&cp) {
                        page.common_prefixes.push(cp.clone());
                    }
                    last_seen = Some(prefix_end(&cp).and_then(|e| key_before(&e)).unwrap_or(cp));
                    continue;
                }
                page.objects.push(ListedObject {
                    key: key.clone(),
                    size: 1,
                    etag: None,
                    last_modified: None,
                    storage_class: None,
                });
                last_seen = Some(key.clone());
            }
            std::future::ready(Ok(page))
        }
    }

    fn opts(target: usize) -> PlanOptions {
        PlanOptions {
            target_shards: target,
            page_size: 100,
            ..PlanOptions::default()
        }
    }

    async fn check_partition(keys: &BTreeSet<String>, o: &PlanOptions) -> Vec<usize> {
        let shards = plan(&MemoryBucket(keys.clone()), o).await.unwrap();
        let mut sizes = Vec::new();
        for s in &shards {
            sizes.push(keys.iter().filter(|k| s.shard.contains(k)).count());
        }
        for k in keys {
            let owners = shards.iter().filter(|s| s.shard.contains(k)).count();
            assert_eq!(owners, 1, "{k:?} is in {owners} shards: {shards:#?}");
        }
        sizes
    }

    fn hashed(n: usize) -> BTreeSet<String> {
        (0..n)
            .map(|i| format!("{:016x}", (i as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15)))
            .collect()
    }

    #[tokio::test]
    async fn flat_hashed_keys_split_evenly() {
        let keys = hashed(20_000);
        let sizes = check_partition(&keys, &opts(16)).await;
        assert!(sizes.len() >= 16, "{sizes:?}");
        let max = *sizes.iter().max().unwrap();
        assert!(max <= 20_000 / 16 * 2, "largest shard {max} of {sizes:?}");
    }

    #[tokio::test]
    async fn skewed_prefix_is_split_further() {
        let mut keys = BTreeSet::new();
        for i in 0..8000 {
            keys.insert(format!("hot/{i:05}/obj"));
        }
        for d in 0..20 {
            for i in 0..100 {
                keys.insert(format!("cold{d:02}/f{i}"));
            }
        }
        keys.insert("top-level-file".into());
        let sizes = check_partition(&keys, &opts(16)).await;
        let max = *sizes.iter().max().unwrap();
        assert!(max <= 10_000 / 16 * 2, "largest shard {max} of {sizes:?}");
    }

    #[tokio::test]
    async fn odd_keys_and_prefix_keys_are_covered_once() {
        let mut keys: BTreeSet<String> = [
            "a",
            "a/",
            "a/b",
            "a//b",
            "/lead",
            "x\u{1}y",
            "é/ü",
            "\u{10FFFF}z",
            "sp ace",
            "a\0b",
        ]
        .into_iter()
        .map(String::from)
        .collect();
        for i in 0..500 {
            keys.insert(format!("a/{i}"));
        }
        for o in [
            opts(8),
            PlanOptions {
                delimiter: None,
                ..opts(8)
            },
            PlanOptions {
                prefix: "a".into(),
                ..opts(8)
            },
        ] {
            let scoped: BTreeSet<String> = keys
                .iter()
                .filter(|k| k.starts_with(&o.prefix))
                .cloned()
                .collect();
            check_partition(&scoped, &o).await;
        }
    }

    #[tokio::test]
    async fn small_and_empty_buckets_are_one_shard() {
        let keys: BTreeSet<String> = (0..50).map(|i| format!("k{i}")).collect();
        assert_eq!(check_partition(&keys, &opts(8)).await, vec![50]);
        assert_eq!(check_partition(&BTreeSet::new(), &opts(8)).await, vec![0]);
    }

    #[tokio::test]
    async fn planning_respects_its_request_budget() {
        let keys = hashed(5000);
        let o = PlanOptions {
            max_requests: 3,
            ..opts(64)
        };
        check_partition(&keys, &o).await;
    }

    /// Keys of `keys` in the remaining range below and above the split.
    async fn split_sizes(keys: &BTreeSet<String>, remaining: &Shard) -> Option<(usize, usize)> {
        let at = split_point(&MemoryBucket(keys.clone()), remaining, 50)
            .await
            .unwrap()?;
        let (lower, upper) = remaining.split_after(&at);
        let below = keys.iter().filter(|k| lower.contains(k)).count();
        let above = keys.iter().filter(|k| upper.contains(k)).count();
        let all = keys.iter().filter(|k| remaining.contains(k)).count();
        assert_eq!(below + above, all, "the split at {at:?} covers the range once");
        Some((below, above))
    }

    #[tokio::test]
    async fn the_rest_of_a_shard_splits_about_evenly() {
        let keys: BTreeSet<String> = (0..20_000).map(|i| format!("hot/{:03}/{i:06}", i % 97)).collect();
        let whole = Shard::prefix("hot/");
        let (below, above) = split_sizes(&keys, &whole.resumed_after("hot/010/000010"))
            .await
            .unwrap();
        assert!(below.min(above) * 3 >= below.max(above), "{below} / {above}");

        let bounded = Shard {
            end: Some("hot/050/".into()),
            ..whole.resumed_after("hot/020/")
        };
        let (below, above) = split_sizes(&keys, &bounded).await.unwrap();
        assert!(below.min(above) * 3 >= below.max(above), "{below} / {above}");

        let hashed_rest = Shard::default().resumed_after(&format!("{:016x}", 1u64 << 60));
        let (below, above) = split_sizes(&hashed(20_000), &hashed_rest).await.unwrap();
        assert!(below.min(above) * 3 >= below.max(above), "{below} / {above}");
    }

    #[tokio::test]
    async fn less_than_a_page_left_is_not_split() {
        let keys: BTreeSet<String> = (0..1500).map(|i| format!("k{i:05}")).collect();
        assert_eq!(
            split_sizes(&keys, &Shard::default().resumed_after("k00600")).await,
            None
        );
        let short = Shard {
            end: Some("k00900".into()),
            ..Shard::default()
        };
        assert_eq!(split_sizes(&keys, &short).await, None);
        assert!(split_sizes(&keys, &Shard::default()).await.is_some());
    }
}
