//! The engine's listing of a shard's versions (`--versions`): every version
//! and delete marker of every key in the shard's range, in the store's order
//! (keys ascending, a key's versions newest first). A version becomes a HEAD
//! of that version (`versionId`); a delete marker becomes its record at once
//! (a HEAD of one answers 405). The filter judges each version on its own.
//!
//! A pass resumes after the last record sent: after that version of its key
//! (`after_version`, `Record::resume_version`: for a `null` version, that `null`
//! entry and no later one), so a failure between two versions of one key
//! neither loses nor repeats one.
//!
//! May import: what `engine` imports.

use super::{Engine, Entry, Frontier, Task, VersionOf};
use crate::keyspace::shard::Shard;
use crate::s3::error::S3Error;
use crate::s3::versions::versions_of_key;
use crate::s3::{HeadInfo, HeadResult, ListedVersion, VersionMarker, VersionPages, NULL_VERSION};
use crate::scan::record::{ObjectColumns, Record, Status};
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;
use tokio::sync::mpsc;

impl Engine {
    /// LIST the shard's versions into `keys`, from after `after_version` of
    /// its `start_after` key (or after that whole key), stopping at its end.
    pub(super) async fn list_versions(
        self: Arc<Self>,
        shard: Shard,
        after_version: Option<String>,
        frontier: Arc<Frontier>,
        keys: mpsc::Sender<Entry>,
    ) -> Result<(), S3Error> {
        let after = VersionMarker {
            version_id: after_version.filter(|_| shard.start_after.is_some()),
            key: shard.start_after.clone(),
        };
        let mut pages = VersionPages::new(
            &self.s3,
            &self.opts.bucket,
            &shard.prefix,
            after,
            self.opts.page_size,
        );
        while let Some(page) = pages.next().await? {
            self.counters.pages.fetch_add(1, Relaxed);
            let mut ended = false;
            for version in page {
                let key = &version.object.key;
                if shard.is_past_end(key) || frontier.is_past_end(key) {
                    ended = true;
                    break;
                }
                if !self.opts.filter.is_empty() && !self.opts.filter.admits(&version.object) {
                    self.counters.filtered.fetch_add(1, Relaxed);
                    continue;
                }
                self.counters.listed.fetch_add(1, Relaxed);
                if keys
                    .send(Entry::Listed(self.version_task(version), None))
                    .await
                    .is_err()
                {
                    return Ok(()); // the consumer stopped (it has an error to report)
                }
            }
            if ended {
                break;
            }
        }
        Ok(())
    }

    /// A HEAD of the version, or a delete marker's record.
    fn version_task(&self, listed: ListedVersion) -> Task {
        let ListedVersion {
            object,
            version_id,
            is_latest,
            is_delete_marker,
        } = listed;
        if !is_delete_marker {
            return Task::HeadVersion(
                object,
                Box::new(VersionOf {
                    version_id,
                    is_latest,
                }),
            );
        }
        Task::Made(Box::new(Record {
            key: object.key,
            status: Status::Ok,
            size: 0,
            etag: None,
            last_modified: object.last_modified,
            storage_class: None,
            content_type: None,
            metadata: Default::default(),
            binary_metadata: Vec::new(),
            missing_metadata: None,
            columns: ObjectColumns {
                version_id: Some(version_id),
                is_latest: Some(is_latest),
                is_delete_marker: Some(true),
                ..ObjectColumns::default()
            },
            error: None,
            http_status: None,
            change: None,
            previous: None,
            verbatim: Default::default(),
        }))
    }

    /// One HEAD attempt of one version. The current version `null` (a
    /// bucket that never had versioning, or an object written before) is
    /// HEADed without `versionId`, which moto refuses for it (400); an
    /// answer that names another version (the key written since) is asked
    /// again by id. Not found there (a delete marker made since), the
    /// version may still be there, no longer current: asked by id too,
    /// unless the store refuses that (400, moto without versioning), when
    /// the not-found stands (and the listing decides, `version_still_listed`).
    pub(super) async fn head_of_version(&self, key: &str, version: &VersionOf) -> HeadResult {
        let bucket = &self.opts.bucket;
        if version.version_id == NULL_VERSION && version.is_latest {
            let current = self.head.head(bucket, key).await;
            let same = |info: &HeadInfo| {
                info.columns
                    .version_id
                    .as_deref()
                    .is_none_or(|v| v == NULL_VERSION)
            };
            match &current {
                Ok(Some(info)) if !same(info) => {} // written since: by id
                Ok(None) => {
                    return match self.head_by_id(key, NULL_VERSION).await {
                        Err(e) if e.http_status() == Some(400) => current,
                        by_id => by_id,
                    };
                }
                _ => return current,
            }
        }
        self.head_by_id(key, &version.version_id).await
    }

    /// A HEAD of one version by its id. 405 says the id names a delete
    /// marker now: under suspended versioning a DELETE replaces the `null`
    /// version with a `null` marker. The version listed is not found, and
    /// the listing decides whether it was deleted (`version_still_listed`).
    async fn head_by_id(&self, key: &str, version_id: &str) -> HeadResult {
        match self.head.head_version(&self.opts.bucket, key, version_id).await {
            Err(e) if e.http_status() == Some(405) => Ok(None),
            by_id => by_id,
        }
    }

    /// Does the store still list this version of `key`? (A HEAD of it
    /// answered 404: gone from the listing too, it was deleted during the
    /// scan.) A delete marker of the same id is not it: under suspended
    /// versioning a DELETE replaces the `null` version with a `null` marker.
    pub(super) async fn version_still_listed(&self, key: &str, version_id: &str) -> Result<bool, S3Error> {
        let versions = versions_of_key(&self.s3, &self.opts.bucket, key).await?;
        Ok(versions
            .iter()
            .any(|v| v.version_id == version_id && !v.is_delete_marker))
    }
}
