//! Reading a listing page after page, and the one place that decides where a
//! listing ends. A ListObjectsV2 page may be empty and still not the last (a
//! server may stop early; the client-side `StartAfter` filter empties pages,
//! see `codec::wire_start_after`), may hold only keys the caller skips, or
//! fewer keys than asked for: only a page without a continuation token ends a
//! listing. Every loop over pages goes through [`Pages`].
//!
//! May import: `client` and the bottom of `s3` (types, error).

use super::client::S3;
use super::error::S3Error;
use super::types::{ListPage, ListRequest};
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

/// One listing, read a page at a time by following continuation tokens.
pub struct Pages<'a, L> {
    lister: &'a L,
    req: ListRequest,
    ended: bool,
}

impl<'a, L: Lister> Pages<'a, L> {
    /// The listing `req` asks for, from its first page.
    pub fn new(lister: &'a L, req: ListRequest) -> Self {
        Pages {
            lister,
            req,
            ended: false,
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
        let page = self.lister.list(&self.req).await?;
        match &page.next {
            Some(token) => self.req.continuation = Some(token.clone()),
            None => self.ended = true,
        }
        Ok(Some(page))
    }
}
