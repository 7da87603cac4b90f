//! A bucket of N objects that exists only as arithmetic: key `i` is a
//! function of `i` that grows with `i`, so a listing is a walk over indexes
//! and `StartAfter` or a skipped common prefix is a binary search. Nothing is
//! stored, so N can be 10^9. Its listing, and the same bucket changed by a
//! share of its objects: `bucket`.

use std::fmt::Write;

/// An odd multiplier (a bijection of u128): each index its own ETag.
pub const ETAG_MULTIPLIER: u128 = 0x9E37_79B9_7F4A_7C15_F39C_C060_5CED_C835;

/// How the keys are laid out.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Layout {
    /// Hex keys spread evenly over the 64-bit space, like hashed names.
    Flat,
    /// Directories: `DDDD/DDD/NNNNNNNNNNNN` (1,000 objects per leaf).
    Nested,
    /// 80 % under `hot/`, the rest over 100 `cold-NN/` prefixes.
    Skewed,
    /// 16 first-level prefixes of equal size: `PP/DDDDDDDDD/NNNNNNNNNNNN` (a store
    /// that limits each prefix, with room for the fleet in all of them).
    Prefixes,
}

impl std::str::FromStr for Layout {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "flat" => Ok(Layout::Flat),
            "nested" => Ok(Layout::Nested),
            "skewed" => Ok(Layout::Skewed),
            "prefixes" => Ok(Layout::Prefixes),
            _ => Err(format!("unknown layout {s:?}: flat, nested, skewed or prefixes")),
        }
    }
}

/// The bucket both the endpoint and the clients that know its keys agree on.
#[derive(clap::Args, Clone, Debug)]
pub struct BucketArgs {
    #[arg(long, default_value = "synthetic")]
    pub bucket: String,
    #[arg(long, default_value_t = 100_000)]
    pub objects: u64,
    /// flat, nested, skewed or prefixes
    #[arg(long, default_value = "flat")]
    pub layout: Layout,
}

impl BucketArgs {
    pub fn keyspace(&self) -> Keyspace {
        Keyspace {
            objects: self.objects,
            layout: self.layout,
        }
    }
}

#[derive(Clone, Copy, Debug)]
pub struct Keyspace {
    pub objects: u64,
    pub layout: Layout,
}

/// One object's HEAD answer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Object {
    pub size: u64,
    pub etag: String,
    /// User metadata (names without `x-amz-meta-`).
    pub metadata: Vec<(&'static str, String)>,
}

/// First-level prefixes of [`Layout::Prefixes`].
pub const PREFIXES: u64 = 16;

impl Keyspace {
    /// The key of object `i` (`i < objects`); strictly increasing in `i`.
    pub fn key(&self, i: u64) -> String {
        let mut k = String::with_capacity(32);
        match self.layout {
            Layout::Flat => {
                let step = u64::MAX / self.objects.max(1);
                let _ = write!(k, "{:016x}", i * step);
            }
            Layout::Nested => {
                let _ = write!(k, "{:04}/{:03}/{i:012}", i / 1_000_000, (i / 1_000) % 1_000);
            }
            Layout::Skewed => {
                let hot = self.hot();
                if i < hot {
                    let _ = write!(k, "hot/{i:012}");
                } else {
                    let j = i - hot;
                    let per = (self.objects - hot).div_ceil(100).max(1);
                    let _ = write!(k, "z-cold-{:02}/{i:012}", j / per);
                }
            }
            Layout::Prefixes => {
                let prefix = u128::from(i) * PREFIXES as u128 / u128::from(self.objects.max(1));
                // The middle level never wraps, so keys grow with `i` at any N.
                let _ = write!(k, "{prefix:02}/{:09}/{i:012}", i / 1_000);
            }
        }
        k
    }

    fn hot(&self) -> u64 {
        self.objects * 4 / 5
    }

    /// The object of `key`, if the bucket has it.
    pub fn index_of(&self, key: &str) -> Option<u64> {
        let i = self.first_at_or_after(key);
        (i < self.objects && self.key(i) == key).then_some(i)
    }

    /// The first index whose key is `>= bound`.
    pub fn first_at_or_after(&self, bound: &str) -> u64 {
        let (mut lo, mut hi) = (0, self.objects);
        while lo < hi {
            let mid = lo + (hi - lo) / 2;
            if self.key(mid).as_str() < bound {
                lo = mid + 1;
            } else {
                hi = mid;
            }
        }
        lo
    }

    /// The first index whose key is `> bound`.
    fn first_after(&self, bound: &str) -> u64 {
        let i = self.first_at_or_after(bound);
        if i < self.objects && self.key(i) == bound {
            i + 1
        } else {
            i
        }
    }

    /// The indexes of the keys strictly between `after` and `before` (`None`:
    /// unbounded), as a shard's exclusive bounds give them: a shard's object
    /// count without listing it.
    pub fn between(&self, after: Option<&str>, before: Option<&str>) -> std::ops::Range<u64> {
        let lo = after.map_or(0, |a| self.first_after(a));
        let hi = before.map_or(self.objects, |b| self.first_at_or_after(b));
        lo..hi.max(lo)
    }

    /// The sum of the sizes of objects `range` (sizes are `i % 4096`), in
    /// constant time however long the range.
    pub fn bytes(&self, range: std::ops::Range<u64>) -> u64 {
        fn below(n: u64) -> u64 {
            let full = n / 4_096 * (4_095 * 4_096 / 2);
            let rest = n % 4_096;
            full + rest * rest.saturating_sub(1) / 2
        }
        below(range.end) - below(range.start)
    }

    pub fn head(&self, i: u64) -> Object {
        let mut metadata = vec![("index", i.to_string()), ("team", format!("team-{}", i % 7))];
        if i.is_multiple_of(3) {
            metadata.push(("project", format!("p{}", i % 1_000)));
        }
        Object {
            size: Keyspace::size(i),
            etag: Keyspace::etag(i),
            metadata,
        }
    }

    /// Object `i`'s size (what a listing needs, without the metadata).
    pub fn size(i: u64) -> u64 {
        i % 4_096
    }

    /// Object `i`'s ETag.
    pub fn etag(i: u64) -> String {
        format!("{:032x}", (i as u128).wrapping_mul(ETAG_MULTIPLIER))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn all(ks: &Keyspace) -> Vec<String> {
        (0..ks.objects).map(|i| ks.key(i)).collect()
    }

    #[test]
    fn keys_grow_with_the_index_in_every_layout() {
        for layout in [Layout::Flat, Layout::Nested, Layout::Skewed, Layout::Prefixes] {
            let ks = Keyspace {
                objects: 25_000,
                layout,
            };
            let keys = all(&ks);
            assert!(keys.windows(2).all(|w| w[0] < w[1]), "{layout:?}");
            assert_eq!(ks.index_of(&keys[12_345]), Some(12_345));
            assert_eq!(ks.index_of("nope"), None);
        }
        let skewed = Keyspace {
            objects: 10_000,
            layout: Layout::Skewed,
        };
        assert_eq!(
            all(&skewed).iter().filter(|k| k.starts_with("hot/")).count(),
            8_000
        );
        let prefixes = Keyspace {
            objects: 16_000,
            layout: Layout::Prefixes,
        };
        let keys = all(&prefixes);
        for p in 0..PREFIXES {
            let under = keys.iter().filter(|k| k.starts_with(&format!("{p:02}/"))).count();
            assert_eq!(under, 1_000, "prefix {p:02}/");
        }
    }

    #[test]
    fn between_counts_the_keys_of_exclusive_bounds() {
        for layout in [Layout::Flat, Layout::Nested, Layout::Skewed, Layout::Prefixes] {
            let ks = Keyspace {
                objects: 5_000,
                layout,
            };
            let keys = all(&ks);
            for (a, b) in [
                (None, None),
                (Some(10), Some(4_000)),
                (Some(4_999), None),
                (None, Some(0)),
            ] {
                let after = a.map(|i: usize| keys[i].clone());
                let before = b.map(|i: usize| keys[i].clone());
                let want = keys
                    .iter()
                    .filter(|k| {
                        after.as_ref().is_none_or(|x| k > &x) && before.as_ref().is_none_or(|x| k < &x)
                    })
                    .count() as u64;
                let range = ks.between(after.as_deref(), before.as_deref());
                assert_eq!(range.end - range.start, want, "{layout:?} {a:?} {b:?}");
                let sizes: u64 = range.clone().map(|i| ks.head(i).size).sum();
                assert_eq!(ks.bytes(range), sizes);
            }
        }
    }
}
