//! Deletion (the finalizer): the scan's Redis keys and its parts in S3 go;
//! the merged result stays. An unreachable store does not block deletion.

use super::context::{key_of, lease, scan_labels, Context, Error, MANAGER};
use super::planning::spec_of;
use super::source::s3_for;
use crate::crd::BucketScan;
use crate::desired;
use bucketscan_core::fleet::queue::Queue;
use bucketscan_core::s3::delete::delete_prefix;
use kube::runtime::controller::Action;
use kube::ResourceExt;

/// Delete: the scan's Redis keys and its parts in S3 go; the merged result
/// (if any) stays.
pub(super) async fn cleanup(scan: &BucketScan, ctx: &Context) -> Result<Action, Error> {
    let queue = Queue::on(&ctx.connection, &desired::scan_id(scan), MANAGER, lease(ctx));
    match s3_for(scan, ctx).await {
        Ok(s3) => {
            let spec = spec_of(scan);
            if let Err(e) = delete_prefix(&s3, &spec.output_bucket, &spec.parts_prefix()).await {
                // A missing bucket or lost access must not block deletion forever.
                tracing::warn!(scan = %scan.name_any(), error = %e, "could not delete the parts");
            }
        }
        Err(e) => {
            tracing::warn!(scan = %scan.name_any(), error = %e, "could not reach S3 to delete the parts")
        }
    }
    queue.delete_scan().await?;
    ctx.last_status.lock().expect("lock").remove(&key_of(scan));
    ctx.metrics.forget_scan(&scan_labels(scan));
    Ok(Action::await_change())
}
