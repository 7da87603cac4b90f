//! Reading a listing page after page, and the one place that decides where a
//! listing ends. A ListObjectsV2 page may be empty and still not the last (a
//! server may stop early; the client-side `StartAfter` filter empties pages,
//! see `codec::wire_start_after`), may hold only keys the caller skips, or
//! fewer keys than asked for: only a page without a continuation token ends a
//! listing. Every loop over pages goes through [`Pages`].
//!
//! It also holds the listing to S3's order, which everything downstream
//! relies on (checkpoints are "the last key written"): keys strictly
//! increase. A key listed again (a page served twice, a key repeated across
//! pages) is dropped; a key that goes backwards and a run of pages that list
//! nothing new (a continuation token answered with itself, forever) end the
//! listing with [`S3Error::BadListing`], which the scan retries from its last
//! good record.
//!
//! May import: `client` and the bottom of `s3` (types, error).

use super::client::S3;
use super::error::S3Error;
use super::types::{ListPage, ListRequest};
use std::cmp::Ordering;
use std::future::Future;

/// Pages in a row without a new key or prefix after which a listing counts
/// as stuck (a server may send empty pages, but not forever).
pub const MAX_EMPTY_PAGES: u32 = 1_000;

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
    empty_pages: u32,
}

impl<'a, L: Lister> Pages<'a, L> {
    /// The listing `req` asks for, from its first page.
    pub fn new(lister: &'a L, req: ListRequest) -> Self {
        Pages {
            lister,
            last_key: req.start_after.clone(),
            req,
            ended: false,
            empty_pages: 0,
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
        self.keep_in_order(&mut page)?;
        // A token answered with itself is not refused at once (a server
        // may send an empty page and the same token); with keys, they
        // repeat or go backwards (above), without, the pages count as empty.
        match &page.next {
            Some(token) => self.req.continuation = Some(token.clone()),
            None => self.ended = true,
        }
        if page.objects.is_empty() && page.common_prefixes.is_empty() && !self.ended {
            self.empty_pages += 1;
            if self.empty_pages >= MAX_EMPTY_PAGES {
                return Err(S3Error::BadListing(format!(
                    "{MAX_EMPTY_PAGES} pages in a row listed nothing new after {:?}",
                    self.last_key.as_deref().unwrap_or_default()
                )));
            }
        } else {
            self.empty_pages = 0;
        }
        Ok(Some(page))
    }

    /// Drop keys listed again; refuse keys that go backwards. Checked in
    /// place, one key copied per page (a page's vector is not rebuilt).
    fn keep_in_order(&mut self, page: &mut ListPage) -> Result<(), S3Error> {
        let mut repeated = false;
        let mut before = self.last_key.as_deref();
        for o in &page.objects {
            match before.map(|b| o.key.as_str().cmp(b)) {
                Some(Ordering::Less) => {
                    return Err(S3Error::BadListing(format!(
                        "key {:?} was listed after {:?}: S3 lists keys in UTF-8 byte order",
                        o.key,
                        before.unwrap_or_default()
                    )));
                }
                Some(Ordering::Equal) => repeated = true,
                _ => {}
            }
            before = Some(&o.key);
        }
        if repeated {
            let last = self.last_key.take();
            page.objects.dedup_by(|a, b| a.key == b.key);
            if last.is_some() && page.objects.first().map(|o| &o.key) == last.as_ref() {
                page.objects.remove(0);
            }
            self.last_key = last;
        }
        if let Some(o) = page.objects.last() {
            self.last_key = Some(o.key.clone());
        }
        Ok(())
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
    async fn a_key_that_goes_backwards_or_a_token_that_repeats_ends_the_listing() {
        let e = keys(vec![page(&["a", "c"], Some("t1")), page(&["b", "d"], None)], None)
            .await
            .unwrap_err();
        assert!(matches!(e, S3Error::BadListing(_)) && e.is_retryable(), "{e}");
        assert!(e.to_string().contains("key \"b\" was listed after \"c\""), "{e}");
        // A token answered with itself and the same page again: backwards.
        let e = keys(
            vec![page(&["a", "b"], Some("t1")), page(&["a", "b"], Some("t1"))],
            None,
        )
        .await
        .unwrap_err();
        assert!(matches!(e, S3Error::BadListing(_)), "{e}");
        // A page served again under a new token goes backwards too.
        let e = keys(
            vec![page(&["a", "b"], Some("t1")), page(&["a", "b"], Some("t2"))],
            None,
        )
        .await
        .unwrap_err();
        assert!(matches!(e, S3Error::BadListing(_)), "{e}");
        // A token answered with itself and an empty page, for ever: stuck.
        let mut pages: Vec<ListPage> = (0..MAX_EMPTY_PAGES).map(|_| page(&[], Some("t1"))).collect();
        pages.insert(0, page(&["a"], Some("t1")));
        let e = keys(pages, None).await.unwrap_err();
        assert!(e.to_string().contains("listed nothing new"), "{e}");
    }

    #[tokio::test]
    async fn a_listing_stuck_on_empty_pages_ends() {
        let mut pages: Vec<ListPage> = (0..MAX_EMPTY_PAGES)
            .map(|i| page(&[], Some(&format!("t{i}"))))
            .collect();
        pages.insert(0, page(&["a"], Some("first")));
        let e = keys(pages, None).await.unwrap_err();
        assert!(e.to_string().contains("listed nothing new after \"a\""), "{e}");
        // Empty pages that end are fine.
        let got = keys(
            vec![page(&[], Some("t")), page(&["a"], Some("u")), page(&[], None)],
            None,
        )
        .await
        .unwrap();
        assert_eq!(got, ["a"]);
    }
}
