//! Where each bucket lives. A client starts with one region (the flag, the
//! environment or the profile); AWS answers a request signed for the wrong
//! region with a redirect naming the right one (`x-amz-bucket-region` on a
//! 301 or 400, or `<Region>` in an `AuthorizationHeaderMalformed` document),
//! and every later request for that bucket is signed (and, on AWS, addressed)
//! for the region learnt here. Source and output buckets may differ. A
//! region is learnt only when an S3 error code says so, or, for a bodiless
//! HEAD answer, when HeadBucket confirms it (`signed`).
//!
//! May import: nothing of the crate.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, RwLock};

#[derive(Debug)]
pub struct BucketRegions {
    default: Arc<str>,
    learnt: RwLock<HashMap<String, Arc<str>>>,
    /// Skips the lock on the hot path while nothing was learnt (the usual case).
    any_learnt: AtomicBool,
}

impl BucketRegions {
    pub fn new(default: &str) -> BucketRegions {
        BucketRegions {
            default: Arc::from(default),
            learnt: RwLock::new(HashMap::new()),
            any_learnt: AtomicBool::new(false),
        }
    }

    /// The region requests for `bucket` are signed for.
    pub fn of(&self, bucket: &str) -> Arc<str> {
        if self.any_learnt.load(Ordering::Acquire) {
            if let Some(region) = self.learnt.read().unwrap().get(bucket) {
                return region.clone();
            }
        }
        self.default.clone()
    }

    /// The server said `bucket` is in `region`.
    pub fn learn(&self, bucket: &str, region: &str) {
        let mut learnt = self.learnt.write().unwrap();
        learnt.insert(bucket.to_string(), Arc::from(region));
        self.any_learnt.store(true, Ordering::Release);
    }
}

/// A region name as a server sends it, when it is one: lowercase letters,
/// digits and dashes (a garbled header must not be signed into requests).
pub fn valid_region(name: &str) -> Option<&str> {
    let name = name.trim();
    let ok = !name.is_empty()
        && name.len() <= 64
        && name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-');
    ok.then_some(name)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_keep_the_default_until_a_server_names_their_region() {
        let regions = BucketRegions::new("us-east-1");
        assert_eq!(&*regions.of("a"), "us-east-1");
        regions.learn("a", "eu-west-1");
        assert_eq!(&*regions.of("a"), "eu-west-1");
        assert_eq!(
            &*regions.of("b"),
            "us-east-1",
            "one bucket's region is not another's"
        );
    }

    #[test]
    fn only_plausible_region_names_are_taken() {
        assert_eq!(valid_region(" ap-southeast-2 "), Some("ap-southeast-2"));
        for bad in ["", "EU", "eu west", "eu-west-1\r\nx: y", &"a".repeat(65)] {
            assert_eq!(valid_region(bad), None, "{bad:?}");
        }
    }
}
