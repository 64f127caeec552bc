//! Writes the reservations of addresses moved to another management cluster (`crate::index::moved_away`) into their
//! global pools' `ipam.cluster.x-k8s.io/moved-away` annotation, so that they outlive this process.

use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use tokio::sync::mpsc;
use tokio_util::time::DelayQueue;

use super::{Context, Error};
use crate::api::MOVED_AWAY_ANNOTATION;
use crate::compact::ResourceVersion;
use crate::index::PoolKey;
use crate::index::moved_away::entries;

/// A failed write is tried again after this long.
const RETRY: Duration = Duration::from_secs(1);

/// Writes the queued changes into the pools' annotations, one pool at a time, retrying until they land.
pub async fn write_pending(ctx: Arc<Context>, mut changed: mpsc::UnboundedReceiver<PoolKey>) {
    let mut retries: DelayQueue<PoolKey> = DelayQueue::new();
    loop {
        let key = tokio::select! {
            Some(key) = changed.recv() => key,
            Some(expired) = retries.next(), if !retries.is_empty() => expired.into_inner(),
            else => return,
        };
        if let Err(e) = write(&ctx, &key).await {
            ctx.report_failure("recording the addresses moved away", &key, &e);
            retries.insert(key, RETRY);
        }
    }
}

/// Writes the changes pending for one pool (the simulation calls it as the writer does).
pub async fn write(ctx: &Context, key: &PoolKey) -> Result<(), Error> {
    let changes = ctx.index.moved_away_pending(key);
    if changes.is_empty() {
        return Ok(());
    }
    let Some(live) = ctx.api.get_pool(key).await.map_err(Error::api("reading the pool"))? else {
        // The pool is gone, and its reservations with it.
        ctx.index.moved_away_written(key, None);
        return Ok(());
    };
    let mut stored = entries(live.annotation(MOVED_AWAY_ANNOTATION));
    for (entry, add) in &changes {
        if *add {
            stored.insert(entry.clone());
        } else {
            stored.remove(entry);
        }
    }
    let value = (!stored.is_empty()).then(|| stored.into_iter().collect::<Vec<_>>().join(","));
    let resource_version = live.metadata.resource_version.clone().unwrap_or_default();
    let written = ctx
        .api
        .patch_pool_annotation(key, &resource_version, MOVED_AWAY_ANNOTATION, value.as_deref())
        .await
        .map_err(Error::api("recording the addresses moved away"))?;
    let revision = ResourceVersion::of(written.metadata.resource_version.as_deref().unwrap_or_default());
    ctx.index.moved_away_written(key, Some((&changes, revision)));
    Ok(())
}
