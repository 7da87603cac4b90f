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
//! Every loop over pages follows the listing to its end through
//! [`Pages`] (an empty page is not the end), and every LIST, common-prefix
//! probes included, is paid from one request budget.
//!
//! The shards of a plan tile the prefix's keyspace: the first starts at the
//! prefix, each ends exactly where the next begins, the last runs to the end
//! of the prefix. So they are disjoint and cover every key under the prefix,
//! also one created after planning between two nodes the planner saw.
//!
//! May import: `shard` and `s3` (it lists through a [`Lister`]).

use crate::keyspace::shard::{key_before, prefix_end, Shard, MAX_KEY_BYTES};
use crate::s3::error::S3Error;
use crate::s3::pages::Pages;
pub use crate::s3::pages::{BucketLister, Lister};
use crate::s3::{ListPage, ListRequest};
use futures::stream::{self, StreamExt, TryStreamExt};
use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};

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
}

/// LIST requests a planning run may still make, shared by its parallel
/// expansions: a request is taken before it is sent, so the budget holds
/// exactly however many run at once.
struct Budget {
    spent: AtomicUsize,
    max: usize,
}

impl Budget {
    fn new(max: usize) -> Budget {
        Budget {
            spent: AtomicUsize::new(0),
            max,
        }
    }

    /// Take `n` requests if all of them fit.
    fn take(&self, n: usize) -> bool {
        self.spent
            .fetch_update(Relaxed, Relaxed, |spent| {
                (spent + n <= self.max).then_some(spent + n)
            })
            .is_ok()
    }

    fn left(&self) -> usize {
        self.max.saturating_sub(self.spent.load(Relaxed))
    }

    fn is_spent(&self) -> bool {
        self.left() == 0
    }
}

/// The first keys of a listing, up to about a page of them.
#[derive(Default)]
struct Sample {
    first: Option<String>,
    count: u64,
    /// The listing was read to its end (or to the range's end).
    complete: bool,
}

struct Planner<'a, L: Lister> {
    lister: &'a L,
    opts: &'a PlanOptions,
    budget: Budget,
}

/// Plan the shards of `opts.prefix`.
pub async fn plan<L: Lister>(lister: &L, opts: &PlanOptions) -> Result<Vec<PlannedShard>, S3Error> {
    let planner = Planner::new(lister, opts);
    let root = planner.probe(opts.prefix.clone(), 0, false).await?;
    let mut nodes = vec![root];
    loop {
        let big = nodes.iter().filter(|n| n.is_big()).count();
        if big == 0 || big >= opts.target_shards || planner.budget.is_spent() {
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
    Ok(tile(&opts.prefix, nodes, opts))
}

/// A plan from places in the keyspace known without a LIST: `marks` are
/// keys where runs of about so many objects begin (an incremental scan's
/// baseline: where each block of its result begins, and the records it
/// holds). Shards begin at marks, merged into runs as [`plan`] merges the
/// nodes it saw, so each shard reads its baseline from the block it begins
/// at. Marks outside `opts.prefix` are left out; the estimates are not
/// exact (the bucket changed since). `None` when the marks are too few to
/// give half of `opts.target_shards`: a plan by LIST does better then.
pub fn plan_from_marks(
    opts: &PlanOptions,
    marks: impl IntoIterator<Item = (String, u64)>,
) -> Option<Vec<PlannedShard>> {
    let mut nodes: Vec<Node> = Vec::new();
    // A key longer than S3 allows is no key of the bucket (the marks are a
    // manifest's word).
    let mut marks: Vec<(String, u64)> = marks
        .into_iter()
        .filter(|(key, _)| key.starts_with(&opts.prefix) && key.len() <= MAX_KEY_BYTES)
        .collect();
    marks.sort_unstable();
    for (key, objects) in marks {
        match nodes.last_mut() {
            Some(last) if last.text == key => last.count = last.count.saturating_add(objects),
            _ => nodes.push(Node::prefix(key, objects, true, 0)),
        }
    }
    let target = opts.target_shards.max(1);
    if nodes.len() < target.div_ceil(2) {
        return None;
    }
    // At most MARKS_PER_SHARD marks a shard to tile: each shard still
    // begins at a mark, and a manifest of millions of blocks costs no more.
    let per = nodes.len().div_ceil(target.saturating_mul(MARKS_PER_SHARD));
    if per > 1 {
        nodes = nodes
            .chunks(per)
            .map(|run| {
                let count = run.iter().fold(0u64, |sum, n| sum.saturating_add(n.count));
                Node::prefix(run[0].text.clone(), count, true, 0)
            })
            .collect();
    }
    // Runs of marks merge up to the mean (and `min_shard_objects`), not up
    // to a LIST page as nodes a planner saw do: a mark's count is no
    // sample of a page.
    let runs = PlanOptions {
        page_size: 1,
        ..opts.clone()
    };
    let mut planned = tile(&opts.prefix, nodes, &runs);
    // Runs merge to about the target; far more shards than that would come
    // only of counts no scan wrote: planned by LIST instead.
    if planned.len() > 2 * target + 1 {
        return None;
    }
    for p in &mut planned {
        p.exact = false;
    }
    Some(planned)
}

/// Marks kept per shard of the target in a plan from marks.
const MARKS_PER_SHARD: usize = 16;

impl<'a, L: Lister> Planner<'a, L> {
    fn new(lister: &'a L, opts: &'a PlanOptions) -> Self {
        Planner {
            lister,
            opts,
            budget: Budget::new(opts.max_requests),
        }
    }

    /// A listing of `prefix` after `start_after`, a page at a time.
    fn pages(&self, prefix: &str, start_after: Option<String>, delimiter: Option<&str>) -> Pages<'a, L> {
        let req = ListRequest {
            prefix: prefix.to_string(),
            start_after,
            delimiter: delimiter.map(str::to_string),
            max_keys: self.opts.page_size,
            ..ListRequest::default()
        };
        Pages::new(self.lister, req)
    }

    /// The next page of `pages`, paid from the budget: `None` when the
    /// listing has ended or the budget is spent (`pages.ended()` tells which).
    async fn next_page(&self, pages: &mut Pages<'_, L>) -> Result<Option<ListPage>, S3Error> {
        if pages.ended() || !self.budget.take(1) {
            return Ok(None);
        }
        pages.next().await
    }

    /// The first keys below `before` of a listing, up to a page of them,
    /// through as many pages as that takes (pages may be short or empty).
    /// `first_paid`: the first request was taken from the budget already.
    async fn sample(
        &self,
        mut pages: Pages<'_, L>,
        before: Option<&str>,
        first_paid: bool,
    ) -> Result<Sample, S3Error> {
        let limit = self.opts.page_size.max(1) as u64;
        let mut sample = Sample::default();
        let mut paid = first_paid;
        while sample.count < limit {
            let page = if std::mem::take(&mut paid) {
                pages.next().await?
            } else {
                self.next_page(&mut pages).await?
            };
            let Some(page) = page else { break };
            for object in page.objects {
                if before.is_some_and(|b| object.key.as_str() >= b) {
                    sample.complete = true;
                    return Ok(sample);
                }
                sample.count += 1;
                sample.first.get_or_insert(object.key);
            }
        }
        sample.complete = pages.ended();
        Ok(sample)
    }

    /// Count the keys under a prefix, up to a page of them.
    async fn probe(&self, prefix: String, depth: usize, first_paid: bool) -> Result<Node, S3Error> {
        let sample = self
            .sample(self.pages(&prefix, None, None), None, first_paid)
            .await?;
        Ok(Node::prefix(prefix, sample.count, sample.complete, depth))
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

    /// Children from common prefixes, each probed. Returns `None` (split by
    /// characters instead) when the level has no common prefixes, or holds a
    /// page or more of objects itself, or more common prefixes than the
    /// budget can probe (a million directories must not cost a million
    /// LISTs: characters split them within the budget).
    async fn expand_by_delimiter(&self, node: &Node, delimiter: &str) -> Result<Option<Vec<Node>>, S3Error> {
        let page_size = self.opts.page_size as usize;
        let mut keys = Vec::new();
        let mut prefixes = Vec::new();
        let mut pages = self.pages(&node.text, None, Some(delimiter));
        while let Some(page) = self.next_page(&mut pages).await? {
            keys.extend(page.objects.into_iter().map(|o| o.key));
            prefixes.extend(page.common_prefixes);
            if keys.len() >= page_size || prefixes.len() > self.budget.left() {
                return Ok(None);
            }
        }
        if !pages.ended() || prefixes.is_empty() || !self.budget.take(prefixes.len()) {
            return Ok(None);
        }
        let depth = node.depth + 1;
        let probes: Vec<Node> = stream::iter(prefixes.into_iter().map(|p| self.probe(p, depth, true)))
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
    /// grouped by the character after `base`: one listing per distinct
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
        let mut pages = self.pages(base, after, None);
        loop {
            let Some(page) = self.next_page(&mut pages).await? else {
                return Ok(pages.ended().then_some(children));
            };
            for object in page.objects {
                if before.is_some_and(|b| object.key.as_str() >= b) {
                    return Ok(Some(children));
                }
                add_to_groups(&mut children, base, object.key, depth);
            }
            // A page's worth of one group: skip the rest of it (once).
            let Some(last) = children
                .last_mut()
                .filter(|g| g.kind == NodeKind::Prefix && g.exact)
            else {
                continue;
            };
            if last.count >= page_size && !pages.ended() {
                last.exact = false;
                match prefix_end(&last.text).and_then(|e| key_before(&e)) {
                    Some(skip) => pages = self.pages(base, Some(skip), None),
                    None => return Ok(Some(children)), // the group runs to the end of the keyspace
                }
            }
        }
    }
}

/// Count `key` in its group: the key itself when it is `base`, else the
/// prefix of `base` and the next character (groups arrive in key order).
fn add_to_groups(children: &mut Vec<Node>, base: &str, key: String, depth: usize) {
    let Some(c) = key[base.len()..].chars().next() else {
        children.push(Node::key(key, depth));
        return;
    };
    let group = format!("{base}{c}");
    match children.last_mut() {
        Some(last) if last.kind == NodeKind::Prefix && last.text == group => last.count += 1,
        _ => children.push(Node::prefix(group, 1, true, depth)),
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
    let planner = Planner::new(lister, &opts);
    let high = remaining.end.clone().or_else(|| prefix_end(&remaining.prefix));
    let pages = planner.pages(&remaining.prefix, remaining.start_after.clone(), None);
    let sample = planner.sample(pages, remaining.end.as_deref(), false).await?;
    let Some(first_key) = sample.first.filter(|_| !sample.complete) else {
        return Ok(None); // less than a page left
    };
    let mut base = match &high {
        Some(h) => common_prefix(&first_key, h).to_string(),
        None => remaining.prefix.clone(),
    };
    while !planner.budget.is_spent() {
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

/// Cut the prefix's keyspace into shards at the planned nodes, walking them in
/// key order: each big node starts a shard of its own, runs of small
/// neighbours share one up to about the mean shard size. A shard runs from
/// its first node to the next shard's first node (the first from the prefix
/// itself, the last to the end of the prefix), so the shards tile the
/// keyspace with no gap, whatever was created between nodes after planning.
fn tile(root: &str, nodes: Vec<Node>, opts: &PlanOptions) -> Vec<PlannedShard> {
    // Saturating: a baseline's counts (`plan_from_marks`) are a manifest's
    // word, not objects seen.
    let total: u64 = nodes.iter().fold(0u64, |sum, n| sum.saturating_add(n.count));
    let target = (total / opts.target_shards.max(1) as u64)
        .max(opts.page_size as u64)
        .max(opts.min_shard_objects);
    // (lowest string, objects, exact, is one big node) of each shard to be.
    let mut runs: Vec<(String, u64, bool, bool)> = Vec::new();
    for node in nodes {
        match runs.last_mut() {
            Some((_, count, exact, false))
                if !node.is_big() && count.saturating_add(node.count) <= target =>
            {
                *count += node.count;
                *exact &= node.exact;
            }
            _ => runs.push((node.low().to_string(), node.count, node.exact, node.is_big())),
        }
    }
    coalesce(&mut runs, opts.target_shards.max(1), target);
    match runs.first_mut() {
        Some(first) => first.0 = root.to_string(),
        None => runs.push((root.to_string(), 0, true, false)),
    }
    let highs: Vec<Option<String>> = runs
        .iter()
        .skip(1)
        .map(|run| Some(run.0.clone()))
        .chain([prefix_end(root)])
        .collect();
    runs.into_iter()
        .zip(highs)
        .map(|((low, count, exact, _), high)| PlannedShard {
            shard: range_shard(root, &low, high),
            estimated_objects: count,
            exact,
        })
        .collect()
}

/// Merge neighbouring runs, big nodes too, while there are more than
/// `target` and a pair has seen no more than `max_objects` together.
/// Breadth first expansion overshoots: a level of 16 big nodes short of a
/// target of 64 becomes 256 (one per hex character), each seen only as "a
/// page or more", so the rule above never merges them and a bucket of
/// 400,000 keys got 256 shards of 1,600 with a few dozen Redis steps each.
/// The pairs with the fewest objects seen go together first, so the shards
/// stay as even as the plan can tell; live splitting evens out the rest.
fn coalesce(runs: &mut Vec<(String, u64, bool, bool)>, target: usize, max_objects: u64) {
    while runs.len() > target {
        let excess = runs.len() - target;
        // Pairs (i, i + 1) by objects seen together, fewest first; each run
        // joins at most one pair per pass.
        let mut pairs: Vec<(u64, usize)> = (0..runs.len() - 1)
            .map(|i| (runs[i].1.saturating_add(runs[i + 1].1), i))
            .filter(|(together, _)| *together <= max_objects)
            .collect();
        if pairs.is_empty() {
            return;
        }
        pairs.sort_unstable();
        let mut taken = vec![false; runs.len()];
        // joins_next[i]: run i + 1 goes into run i.
        let mut joins_next = vec![false; runs.len()];
        let mut merges = 0;
        for (_, i) in pairs {
            if merges == excess {
                break;
            }
            if !taken[i] && !taken[i + 1] {
                taken[i] = true;
                taken[i + 1] = true;
                joins_next[i] = true;
                merges += 1;
            }
        }
        let mut merged: Vec<(String, u64, bool, bool)> = Vec::with_capacity(runs.len() - merges);
        let mut next = std::mem::take(runs).into_iter().zip(joins_next).peekable();
        while let Some(((low, mut count, mut exact, mut big), joins)) = next.next() {
            if joins {
                if let Some(((_, c, e, b), _)) = next.next() {
                    count = count.saturating_add(c);
                    exact &= e;
                    big |= b;
                }
            }
            merged.push((low, count, exact, big));
        }
        *runs = merged;
    }
}

/// The shard of the keys under `root` from `low` (inclusive) up to `high`
/// (exclusive; `None`: the end of the keyspace), with the longest prefix that
/// holds them all, so that listing it asks the server for no more than that.
fn range_shard(root: &str, low: &str, high: Option<String>) -> Shard {
    let prefix = if prefix_end(low) == high {
        low.to_string() // exactly the keys that start with `low`
    } else {
        // Every string between two that share a prefix shares it too.
        let shared = high.as_deref().map_or("", |h| common_prefix(low, h));
        if shared.len() > root.len() { shared } else { root }.to_string()
    };
    Shard {
        start_after: if low == prefix { None } else { key_before(low) },
        end: high.filter(|h| Some(h) != prefix_end(&prefix).as_ref()),
        prefix,
    }
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
    use crate::s3::codec::wire_start_after;
    use crate::s3::ListedObject;
    use std::collections::BTreeSet;
    use std::future::Future;
    use std::sync::atomic::Ordering;

    /// A bucket in memory that answers ListObjectsV2 the way S3 servers may:
    /// pages of at most `page_cap` entries whatever was asked for (servers may
    /// return fewer), every `empty_every`-th answer an empty page that is still
    /// truncated, continuation tokens that are not keys, and, like moto, an
    /// error (HTTP 500) for a `StartAfter` holding a character servers refuse.
    /// Requests pass through the S3 client's own wire cut and filter, so
    /// `StartAfter`s are cut the way moto sees them. Counts requests.
    struct MemoryBucket {
        keys: BTreeSet<String>,
        page_cap: usize,
        empty_every: usize,
        requests: AtomicUsize,
    }

    impl MemoryBucket {
        /// Full pages, never an empty truncated one.
        fn plain(keys: BTreeSet<String>) -> MemoryBucket {
            MemoryBucket {
                keys,
                page_cap: usize::MAX,
                empty_every: 0,
                requests: AtomicUsize::new(0),
            }
        }

        /// Pages of at most 7 entries, every third one empty but truncated.
        fn awkward(keys: BTreeSet<String>) -> MemoryBucket {
            MemoryBucket {
                page_cap: 7,
                empty_every: 3,
                ..MemoryBucket::plain(keys)
            }
        }

        fn requests(&self) -> usize {
            self.requests.load(Ordering::Relaxed)
        }

        /// The server's side: `req` as it arrived on the wire.
        fn serve(&self, req: &ListRequest) -> Result<ListPage, S3Error> {
            let n = self.requests.fetch_add(1, Ordering::Relaxed) + 1;
            if let Some(a) = req.start_after.as_deref() {
                assert!(a.len() <= MAX_KEY_BYTES, "StartAfter of {} bytes", a.len());
                if wire_start_after(a).as_deref() != Some(a) {
                    return Err(S3Error::Server {
                        status: 500,
                        detail: format!("StartAfter {a:?} holds a character servers refuse"),
                    });
                }
            }
            // A token is "{request}|{last key or prefix listed}".
            let from_token = req
                .continuation
                .as_deref()
                .map(|t| t.split_once('|').expect("our token").1);
            let after = from_token.or(req.start_after.as_deref()).unwrap_or_default();
            let token = |at: &str| Some(format!("{n}|{at}"));
            if self.empty_every > 0 && n.is_multiple_of(self.empty_every) {
                return Ok(ListPage {
                    next: token(after),
                    ..ListPage::default()
                });
            }
            let limit = (req.max_keys as usize).min(self.page_cap);
            let mut page = ListPage::default();
            let mut last_seen: Option<String> = None;
            let range = (
                std::ops::Bound::Excluded(after.to_string()),
                std::ops::Bound::Unbounded,
            );
            for key in self.keys.range::<String, _>(range) {
                if !key.starts_with(&req.prefix) {
                    // Sorted: keys below the prefix come first, then the prefix's keys.
                    if key.as_str() < req.prefix.as_str() {
                        continue;
                    }
                    break;
                }
                let rest = &key[req.prefix.len()..];
                if let Some(d) = req.delimiter.as_deref().filter(|d| rest.contains(*d)) {
                    let cp = format!("{}{}{}", req.prefix, &rest[..rest.find(d).unwrap()], d);
                    if page.common_prefixes.last() == Some(&cp) {
                        continue;
                    }
                    if page.objects.len() + page.common_prefixes.len() == limit {
                        page.next = last_seen.as_deref().and_then(token);
                        break;
                    }
                    page.common_prefixes.push(cp.clone());
                    last_seen = Some(prefix_end(&cp).and_then(|e| key_before(&e)).unwrap_or(cp));
                    continue;
                }
                if page.objects.len() + page.common_prefixes.len() == limit {
                    page.next = last_seen.as_deref().and_then(token);
                    break;
                }
                page.objects.push(ListedObject {
                    key: key.clone(),
                    size: 1,
                    etag: None,
                    last_modified: None,
                    storage_class: None,
                    listed_metadata: None,
                    checksum_algorithm: None,
                    checksum_type: None,
                });
                last_seen = Some(key.clone());
            }
            Ok(page)
        }
    }

    impl Lister for MemoryBucket {
        fn list(&self, req: &ListRequest) -> impl Future<Output = Result<ListPage, S3Error>> + Send {
            let on_the_wire = ListRequest {
                start_after: req.start_after.as_deref().and_then(wire_start_after),
                ..req.clone()
            };
            let page = self.serve(&on_the_wire).map(|mut page| {
                if let Some(after) = &req.start_after {
                    page.keep_after(after);
                }
                page
            });
            std::future::ready(page)
        }
    }

    fn opts(target: usize) -> PlanOptions {
        PlanOptions {
            target_shards: target,
            page_size: 100,
            ..PlanOptions::default()
        }
    }

    /// Plan on a plain and on an awkward bucket; every key must be in exactly
    /// one shard of each plan. Returns the plain plan's shard sizes.
    async fn check_partition(keys: &BTreeSet<String>, o: &PlanOptions) -> Vec<usize> {
        check_partition_on(&MemoryBucket::awkward(keys.clone()), o).await;
        check_partition_on(&MemoryBucket::plain(keys.clone()), o).await
    }

    async fn check_partition_on(bucket: &MemoryBucket, o: &PlanOptions) -> Vec<usize> {
        let keys = &bucket.keys;
        let shards = plan(bucket, o).await.unwrap();
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

    /// 16 first-level nodes are short of a target of 32, so each is expanded
    /// into 16 more: 256 nodes each seen only as "a page or more". They are
    /// merged back to the target (it was 256 shards of 156 objects, each
    /// with its own Redis steps), evenly.
    #[tokio::test]
    async fn an_overshooting_level_is_merged_back_to_the_target() {
        let keys = hashed(40_000);
        let sizes = check_partition(&keys, &opts(32)).await;
        assert!(
            (16..=32).contains(&sizes.len()),
            "{} shards: {sizes:?}",
            sizes.len()
        );
        let max = *sizes.iter().max().unwrap();
        assert!(max <= 40_000 / 32 * 2, "largest shard {max} of {sizes:?}");
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

    /// Keys under characters servers refuse in a StartAfter (the client cuts
    /// it earlier and filters, so whole pages come back empty), several pages
    /// of each, and 1,024-byte keys ending in the greatest characters.
    fn refused_character_keyspace() -> BTreeSet<String> {
        let mut keys = BTreeSet::new();
        for c in ['\t', '\u{1}', '\u{7f}', '\u{FFFE}', '\u{FFFF}'] {
            for i in 0..350 {
                keys.insert(format!("p{c}{i:04}"));
                keys.insert(format!("q/{c}/{i:04}"));
            }
        }
        for tail in ['\u{FFFF}', '\u{10FFFF}', '\u{7f}', 'z'] {
            let long = format!("r{}", tail.to_string().repeat(MAX_KEY_BYTES));
            let mut end = MAX_KEY_BYTES;
            while !long.is_char_boundary(end) {
                end -= 1;
            }
            keys.insert(long[..end].to_string());
        }
        keys
    }

    #[tokio::test]
    async fn prefixes_holding_refused_characters_are_covered_past_their_first_page() {
        let keys = refused_character_keyspace();
        for o in [
            opts(4),
            opts(32),
            PlanOptions {
                delimiter: None,
                ..opts(32)
            },
            PlanOptions {
                prefix: "p".into(),
                ..opts(16)
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
    async fn the_rest_of_a_shard_under_refused_characters_splits_exactly() {
        let keys = refused_character_keyspace();
        for after in ["p\u{1}0100", "p\t0349", "q/\u{7f}/0000", "p"] {
            split_sizes(&keys, &Shard::default().resumed_after(after)).await;
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

    /// The shard target is reached only as far as the LIST budget allows: a
    /// big target needs the budget raised with it (`bucketscan-worker plan
    /// --plan-list-budget`), and the plan stays within whichever budget.
    #[tokio::test]
    async fn a_large_shard_target_needs_a_budget_to_match() {
        let keys = hashed(20_000);
        let shards_within = |max_requests| async move {
            let bucket = MemoryBucket::plain(hashed(20_000));
            let o = PlanOptions {
                max_requests,
                page_size: 10,
                min_shard_objects: 0,
                ..opts(500)
            };
            let shards = plan(&bucket, &o).await.unwrap();
            assert!(bucket.requests() <= max_requests, "{} LISTs", bucket.requests());
            shards.len()
        };
        let small = shards_within(100).await;
        assert!(
            small < 500,
            "100 LISTs cannot plan 500 shards of hashed keys: {small}"
        );
        let large = shards_within(1_000).await;
        assert!(large >= 500, "1,000 LISTs reach the target of 500: {large}");
        let o = PlanOptions {
            max_requests: 1_000,
            page_size: 10,
            min_shard_objects: 0,
            ..opts(500)
        };
        check_partition_on(&MemoryBucket::plain(keys), &o).await;
    }

    /// Keys of `keys` in the remaining range below and above the split.
    async fn split_sizes(keys: &BTreeSet<String>, remaining: &Shard) -> Option<(usize, usize)> {
        // The awkward bucket's tiny and empty pages must not change the answer's exactness.
        let awkward = split_point(&MemoryBucket::awkward(keys.clone()), remaining, 500)
            .await
            .unwrap();
        if let Some(at) = &awkward {
            let (lower, upper) = remaining.split_after(at);
            let all = keys.iter().filter(|k| remaining.contains(k)).count();
            let both = keys
                .iter()
                .filter(|k| lower.contains(k) || upper.contains(k))
                .count();
            assert_eq!(both, all, "the split at {at:?} covers the range once");
        }
        let at = split_point(&MemoryBucket::plain(keys.clone()), remaining, 50)
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

    #[tokio::test]
    async fn many_directories_cost_no_more_than_the_request_budget() {
        // Probing every directory would be one LIST each: 20,000 here, as a
        // million would be a million. The budget caps them all.
        let keys: BTreeSet<String> = (0..20_000).map(|i| format!("d{i:05}/obj")).collect();
        let o = PlanOptions {
            max_requests: 300,
            ..opts(64)
        };
        for bucket in [
            MemoryBucket::plain(keys.clone()),
            MemoryBucket::awkward(keys.clone()),
        ] {
            let sizes = check_partition_on(&bucket, &o).await;
            assert!(bucket.requests() <= 300, "{} LISTs", bucket.requests());
            assert!(sizes.len() > 1, "the budget still bought a split: {sizes:?}");
        }
    }

    /// `shards` tile the keyspace under `root`: in key order, the first
    /// starts at `root`, each ends exactly where the next begins (nothing
    /// between them in any valid key), the last runs to the end of `root`.
    fn assert_tiles(root: &str, shards: &[Shard]) {
        let mut bounds: Vec<_> = shards.iter().map(Shard::exclusive_bounds).collect();
        // By lower bound, then upper, unbounded last (a split can leave an
        // empty shard that starts where the next one does).
        bounds.sort_by(|a, b| (&a.0, a.1.is_none(), &a.1).cmp(&(&b.0, b.1.is_none(), &b.1)));
        assert_eq!(
            bounds.first().map(|b| b.0.clone()),
            Some(key_before(root)),
            "{shards:#?}"
        );
        assert_eq!(
            bounds.last().map(|b| b.1.clone()),
            Some(prefix_end(root)),
            "{shards:#?}"
        );
        for pair in bounds.windows(2) {
            let before = pair[0].1.as_deref().expect("only the last is unbounded");
            assert_eq!(key_before(before), pair[1].0, "{shards:#?}");
        }
    }

    /// Every key under `root` in exactly one of `shards`.
    fn assert_each_once<'a>(root: &str, shards: &[Shard], keys: impl Iterator<Item = &'a String>) {
        for k in keys.filter(|k| k.starts_with(root)) {
            let owners = shards.iter().filter(|s| s.contains(k)).count();
            assert_eq!(owners, 1, "{k:?} is in {owners} shards: {shards:#?}");
        }
    }

    fn plan_strategy() -> impl proptest::strategy::Strategy<Value = (String, PlanOptions, bool)> {
        use proptest::prelude::*;
        (
            prop::sample::select(vec!["", "a", "a/", "\u{FFFF}"]),
            2i32..12,
            1usize..24,
            any::<bool>(),
            any::<bool>(),
            prop::sample::select(vec![3usize, 20, 5000]),
        )
            .prop_map(|(root, page_size, target, by_delimiter, awkward, max_requests)| {
                let o = PlanOptions {
                    prefix: root.to_string(),
                    delimiter: by_delimiter.then(|| "/".to_string()),
                    target_shards: target,
                    page_size,
                    max_requests,
                    ..PlanOptions::default()
                };
                (root.to_string(), o, awkward)
            })
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(300))]

        /// For random keyspaces, options and page shapes, the plan tiles the
        /// prefix (so keys created after planning, `later`, are covered too),
        /// and so do its shards after random splits, and the done shards with
        /// the gaps `uncovered` finds for them.
        #[test]
        fn plans_splits_and_gaps_tile_the_keyspace(
            keys in proptest::collection::btree_set(crate::keyspace::shard::tests::key_strategy(), 0..120),
            later in proptest::collection::vec(crate::keyspace::shard::tests::key_strategy(), 0..40),
            (root, o, awkward) in plan_strategy(),
            picks in proptest::collection::vec(proptest::prelude::any::<proptest::sample::Index>(), 0..6),
        ) {
            let keys: BTreeSet<String> = keys.into_iter().filter(|k| k.starts_with(&root)).collect();
            let bucket = if awkward { MemoryBucket::awkward(keys.clone()) } else { MemoryBucket::plain(keys.clone()) };
            let runtime = tokio::runtime::Builder::new_current_thread().build().unwrap();
            let planned = runtime.block_on(plan(&bucket, &o)).unwrap();
            proptest::prop_assert!(bucket.requests() <= o.max_requests.max(1));
            let mut shards: Vec<Shard> = planned.into_iter().map(|p| p.shard).collect();
            assert_tiles(&root, &shards);
            assert_each_once(&root, &shards, keys.iter().chain(&later));

            let candidates: Vec<&String> = keys.iter().chain(&later).filter(|k| k.starts_with(&root)).collect();
            let mut done = Vec::new();
            for (n, pick) in picks.iter().enumerate() {
                if candidates.is_empty() {
                    break;
                }
                let at = pick.get(&candidates);
                let Some(owner) = shards.iter().position(|s| s.contains(at)) else {
                    continue; // its shard is done already
                };
                let (lower, upper) = shards.remove(owner).split_after(at);
                shards.extend([lower, upper]);
                if n % 2 == 0 {
                    done.push(shards.swap_remove(owner.min(shards.len() - 1)));
                }
            }
            let gaps = crate::keyspace::coverage::uncovered(&root, &done);
            let all: Vec<Shard> = done.iter().chain(&gaps).cloned().collect();
            assert_tiles(&root, &all);
            assert_each_once(&root, &all, keys.iter().chain(&later));
            shards.extend(done);
            assert_tiles(&root, &shards);
        }
    }

    /// A plan from a baseline's marks tiles the prefix, begins each shard at
    /// a mark (the block a shard's baseline reading begins at), evens out
    /// the objects, and is not taken from too few marks.
    #[test]
    fn a_plan_from_marks_tiles_the_prefix_and_begins_its_shards_at_marks() {
        let opts = PlanOptions {
            prefix: "p/".into(),
            target_shards: 4,
            page_size: 10,
            ..PlanOptions::default()
        };
        // Twelve blocks of 100 objects under p/, and two outside it; one
        // key twice (two files whose blocks begin at the same key).
        let mut marks: Vec<(String, u64)> = (0..12).map(|i| (format!("p/{:02}-first", i * 3), 100)).collect();
        marks.extend([
            ("a".to_string(), 500),
            ("q".to_string(), 500),
            ("p/09-first".to_string(), 100),
        ]);
        let planned = plan_from_marks(&opts, marks.clone()).expect("enough marks");
        let shards: Vec<Shard> = planned.iter().map(|p| p.shard.clone()).collect();
        assert_tiles("p/", &shards);
        // About the target: runs merge while they stay within the mean.
        assert!((4..=5).contains(&planned.len()), "{planned:#?}");
        assert_eq!(
            planned.iter().map(|p| p.estimated_objects).sum::<u64>(),
            1_300,
            "marks outside the prefix are left out"
        );
        assert!(
            planned.iter().all(|p| !p.exact && p.estimated_objects <= 400),
            "{planned:#?}"
        );
        // Every shard after the first begins at a mark: its first key is
        // the block's, and no key sorts between its start and that key.
        for p in &planned[1..] {
            let after = p.shard.start_after.as_deref().expect("a start");
            let mark = marks
                .iter()
                .map(|(k, _)| k)
                .find(|k| key_before(k).as_deref() == Some(after));
            assert!(mark.is_some(), "{p:?} does not begin at a mark");
        }
        let keys: Vec<String> = (0..40)
            .map(|i| format!("p/{i:02}-first"))
            .chain(["p/".into(), "p/zz".into()])
            .collect();
        assert_each_once("p/", &shards, keys.iter());
        // Marks of a forged manifest: a million blocks with counts that
        // overflow any sum. No sum overflows, the work stays bounded (16
        // marks a shard are tiled), and runs that cannot merge to about the
        // target leave the plan to LIST.
        let forged = (0..1_000_000u64).map(|i| (format!("p/{i:07}"), u64::MAX / 3));
        assert!(plan_from_marks(&opts, forged).is_none());
        // A key longer than S3 allows begins no shard.
        let long = format!("p/15-{}", "x".repeat(2_000));
        let with_long = marks.iter().cloned().chain([(long.clone(), 10_000)]);
        let planned = plan_from_marks(&opts, with_long).expect("enough marks");
        assert!(planned
            .iter()
            .all(|p| p.shard.start_after.as_deref() != key_before(&long).as_deref()));
        // Fewer marks than half the target: planned by LIST instead.
        assert!(plan_from_marks(&opts, marks[..1].to_vec()).is_none());
        assert!(plan_from_marks(&opts, Vec::new()).is_none());
    }
}
