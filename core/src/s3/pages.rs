//! Reading a listing page after page, and the one place that decides where a
//! listing ends. A ListObjectsV2 page may be empty and still not the last (a
//! server may stop early; the client-side `StartAfter` filter empties pages,
//! see `codec::wire_start_after`), may hold only keys the caller skips, or
//! fewer keys than asked for: only a page without a continuation token ends a
//! listing. Every loop over pages goes through [`Pages`].
//!
//! It also holds the listing to S3's order, which everything downstream
//! relies on (checkpoints are "the last key written"): keys strictly
//! increase. A key listed again (a key repeated across pages) is dropped. A
//! key that goes backwards is [`S3Error::ListingOutOfOrder`], final for the
//! listing: the keys after it may have been skipped by a page that jumped
//! ahead, and the ones before it are already written, so no resume from the
//! last record could find them. A continuation token answered with itself
//! [`MAX_SAME_TOKEN`] times in a row (a listing that would never end) is
//! [`S3Error::BadListing`], retried from the last good record. Empty pages
//! under new tokens go on for as long as they come (S3 sends them over long
//! runs of delete markers).
//!
//! May import: `client` and the bottom of `s3` (types, error).

use super::client::S3;
use super::error::S3Error;
use super::types::{ListPage, ListRequest, ListedObject};
use std::cmp::Ordering;
use std::future::Future;

/// Times in a row a continuation token may come back as the next one before
/// the listing counts as stuck.
pub const MAX_SAME_TOKEN: u32 = 100;

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

/// One listing, read a page at a time by following continuation tokens.
pub struct Pages<'a, L> {
    lister: &'a L,
    req: ListRequest,
    ended: bool,
    /// The last key listed, or the request's StartAfter: keys come after it.
    last_key: Option<String>,
    /// The keys of the last page that had any, in order: a key listed
    /// again from it is a repeat, not a key skipped.
    previous: Vec<String>,
    same_token: u32,
}

/// Every object under `prefix`, listed to the end (for prefixes the
/// caller knows are small: a scan's parts, a dataset's files).
pub async fn list_all(s3: &S3, bucket: &str, prefix: &str) -> Result<Vec<ListedObject>, S3Error> {
    let req = ListRequest {
        prefix: prefix.to_string(),
        max_keys: 1000,
        ..ListRequest::default()
    };
    let lister = BucketLister { s3, bucket };
    let mut pages = Pages::new(&lister, req);
    let mut objects = Vec::new();
    while let Some(page) = pages.next().await? {
        objects.extend(page.objects);
    }
    Ok(objects)
}

impl<'a, L: Lister> Pages<'a, L> {
    /// The listing `req` asks for, from its first page.
    pub fn new(lister: &'a L, req: ListRequest) -> Self {
        Pages {
            lister,
            last_key: req.start_after.clone(),
            previous: req.start_after.iter().cloned().collect(),
            req,
            ended: false,
            same_token: 0,
        }
    }

    /// Has the last page been read?
    pub fn ended(&self) -> bool {
        self.ended
    }

    /// The next page (possibly empty), or `None` after the last one.
    pub async fn next(&mut self) -> Result<Option<ListPage>, S3Error> {
        if self.ended {
            return Ok(None);
        }
        let mut page = self.lister.list(&self.req).await?;
        let repeated = self.keep_in_order(&mut page)?;
        match &page.next {
            // A page that gave keys again: its token may not mean what it
            // says (a token that moved on while the body did not would skip
            // keys). Go on after the last key listed instead, which cannot.
            Some(_) if repeated => {
                self.same_token = if page.objects.is_empty() {
                    self.same_token + 1
                } else {
                    0
                };
                if self.same_token >= MAX_SAME_TOKEN {
                    return Err(S3Error::BadListing(format!(
                        "the listing gave only keys it had given already {MAX_SAME_TOKEN} times in a row, after {:?}: it would never end",
                        self.last_key.as_deref().unwrap_or_default()
                    )));
                }
                self.req.continuation = None;
                self.req.start_after = self.last_key.clone();
            }
            Some(token) if self.req.continuation.as_ref() == Some(token) => {
                self.same_token += 1;
                if self.same_token >= MAX_SAME_TOKEN {
                    return Err(S3Error::BadListing(format!(
                        "the continuation token {token:?} came back as the next one {MAX_SAME_TOKEN} times in a row, after {:?}: the listing would never end",
                        self.last_key.as_deref().unwrap_or_default()
                    )));
                }
            }
            Some(token) => {
                self.same_token = 0;
                self.req.continuation = Some(token.clone());
            }
            None => self.ended = true,
        }
        Ok(Some(page))
    }

    /// Drop keys listed again; refuse keys that go backwards. A key at or
    /// before the last one is a repeat when this listing gave it already
    /// (the last page, or earlier in this page: a page served again, under
    /// the same token or a new one); any other key there was skipped, and
    /// keys skipped cannot be told, so the listing fails.
    ///
    /// Returns whether the page repeated any key.
    fn keep_in_order(&mut self, page: &mut ListPage) -> Result<bool, S3Error> {
        let last = self.last_key.as_deref();
        let increasing = page
            .objects
            .first()
            .is_none_or(|o| last.is_none_or(|l| o.key.as_str() > l))
            && page.objects.windows(2).all(|w| w[0].key < w[1].key);
        if !increasing {
            let given = page.objects.len();
            let mut kept: Vec<ListedObject> = Vec::with_capacity(page.objects.len());
            for o in page.objects.drain(..) {
                let before = kept.last().map(|k| k.key.as_str()).or(last);
                match before.map(|b| o.key.as_str().cmp(b)) {
                    Some(Ordering::Greater) | None => kept.push(o),
                    Some(Ordering::Equal) => {}
                    Some(Ordering::Less) => {
                        let known = self.previous.binary_search(&o.key).is_ok()
                            || kept.binary_search_by(|k| k.key.cmp(&o.key)).is_ok();
                        if !known {
                            return Err(S3Error::ListingOutOfOrder(format!(
                                "key {:?} was listed after {:?}; S3 lists keys in UTF-8 byte order, and keys this listing skipped cannot be told",
                                o.key,
                                before.unwrap_or_default()
                            )));
                        }
                    }
                }
            }
            page.objects = kept;
            if page.objects.len() < given {
                self.remember(page);
                return Ok(true);
            }
        }
        self.remember(page);
        Ok(false)
    }

    /// The page's keys, for the next page's repeats.
    fn remember(&mut self, page: &ListPage) {
        if let Some(o) = page.objects.last() {
            self.last_key = Some(o.key.clone());
            self.previous.clear();
            self.previous.extend(page.objects.iter().map(|o| o.key.clone()));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::s3::types::ListedObject;
    use std::sync::Mutex;

    /// Answers the pages it holds in turn, whatever is asked.
    struct Scripted(Mutex<Vec<ListPage>>);

    impl Lister for Scripted {
        fn list(&self, _: &ListRequest) -> impl Future<Output = Result<ListPage, S3Error>> + Send {
            let page = self.0.lock().unwrap().remove(0);
            async move { Ok(page) }
        }
    }

    fn page(keys: &[&str], next: Option<&str>) -> ListPage {
        ListPage {
            objects: keys
                .iter()
                .map(|k| ListedObject {
                    key: k.to_string(),
                    size: 1,
                    etag: None,
                    last_modified: None,
                    storage_class: None,
                    listed_metadata: None,
                    checksum_algorithm: None,
                    checksum_type: None,
                })
                .collect(),
            common_prefixes: vec![],
            next: next.map(str::to_string),
        }
    }

    async fn keys(pages: Vec<ListPage>, start_after: Option<&str>) -> Result<Vec<String>, S3Error> {
        let lister = Scripted(Mutex::new(pages));
        let req = ListRequest {
            start_after: start_after.map(str::to_string),
            ..ListRequest::default()
        };
        let mut pages = Pages::new(&lister, req);
        let mut keys = vec![];
        while let Some(p) = pages.next().await? {
            keys.extend(p.objects.into_iter().map(|o| o.key));
        }
        Ok(keys)
    }

    #[tokio::test]
    async fn keys_listed_again_are_dropped() {
        let got = keys(
            vec![
                page(&["a", "b", "b", "c"], Some("t1")),
                page(&["c", "d"], Some("t2")),
                page(&["d"], Some("t3")),
                page(&[], None),
            ],
            None,
        )
        .await
        .unwrap();
        assert_eq!(got, ["a", "b", "c", "d"]);
        let got = keys(vec![page(&["m", "n"], None)], Some("m")).await.unwrap();
        assert_eq!(got, ["n"], "the start key is not listed again");
    }

    #[tokio::test]
    async fn a_key_that_goes_backwards_ends_the_listing_for_good() {
        // A page that jumped ahead, then the skipped keys: c and d would be
        // lost by a resume after f, so the listing fails and is not retried.
        let e = keys(
            vec![
                page(&["a", "b"], Some("t1")),
                page(&["e", "f"], Some("t2")),
                page(&["c", "d"], None),
            ],
            None,
        )
        .await
        .unwrap_err();
        assert!(
            matches!(e, S3Error::ListingOutOfOrder(_)) && !e.is_retryable(),
            "{e}"
        );
        assert!(e.to_string().contains("key \"c\" was listed after \"f\""), "{e}");
        // A key between two listed ones that was not listed was skipped.
        let e = keys(vec![page(&["a", "c"], Some("t1")), page(&["b", "d"], None)], None)
            .await
            .unwrap_err();
        assert!(matches!(e, S3Error::ListingOutOfOrder(_)), "{e}");
    }

    /// Answers each request from what it asks (token, start key).
    struct Answering(fn(&ListRequest) -> ListPage);

    impl Lister for Answering {
        fn list(&self, req: &ListRequest) -> impl Future<Output = Result<ListPage, S3Error>> + Send {
            let page = (self.0)(req);
            async move { Ok(page) }
        }
    }

    /// A page served again under a token that moved on past keys the page
    /// never gave (c and d): the token is not trusted, the listing goes on
    /// after the last key it listed, and nothing is skipped.
    #[tokio::test]
    async fn the_token_of_a_page_served_again_is_not_trusted() {
        let store = Answering(
            |req| match (req.continuation.as_deref(), req.start_after.as_deref()) {
                (None, None) => page(&["a", "b"], Some("t1")),
                (Some("t1"), _) => page(&["a", "b"], Some("t2")),
                (Some("t2"), _) => page(&["e"], None),
                (None, Some("b")) => page(&["c", "d"], Some("t3")),
                (Some("t3"), _) => page(&["e"], None),
                other => panic!("unexpected request {other:?}"),
            },
        );
        let mut pages = Pages::new(&store, ListRequest::default());
        let mut got = vec![];
        while let Some(p) = pages.next().await.unwrap() {
            got.extend(p.objects.into_iter().map(|o| o.key));
        }
        assert_eq!(got, ["a", "b", "c", "d", "e"]);
    }

    /// A page served again (under a new token, or the token it was asked
    /// with), or partly again, adds only the keys it had not given.
    #[tokio::test]
    async fn a_page_served_again_adds_nothing_twice() {
        let got = keys(
            vec![
                page(&["a", "b"], Some("t1")),
                page(&["a", "b"], Some("t2")),
                page(&["b", "c"], Some("t3")),
                page(&["c", "d", "c", "e"], None),
            ],
            None,
        )
        .await
        .unwrap();
        assert_eq!(got, ["a", "b", "c", "d", "e"]);
    }

    #[tokio::test]
    async fn a_token_that_keeps_coming_back_ends_the_listing_and_empty_pages_do_not() {
        let mut pages: Vec<ListPage> = (0..MAX_SAME_TOKEN).map(|_| page(&[], Some("t1"))).collect();
        pages.insert(0, page(&["a"], Some("t1")));
        let e = keys(pages, None).await.unwrap_err();
        assert!(matches!(e, S3Error::BadListing(_)) && e.is_retryable(), "{e}");
        assert!(e.to_string().contains("came back as the next one"), "{e}");
        // Empty pages under new tokens (a long run of delete markers): on.
        let mut pages: Vec<ListPage> = (0..3 * MAX_SAME_TOKEN)
            .map(|i| page(&[], Some(&format!("t{i}"))))
            .collect();
        pages.push(page(&["z"], None));
        assert_eq!(keys(pages, None).await.unwrap(), ["z"]);
    }
}
