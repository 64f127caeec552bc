//! Writes the reservations of addresses moved to another management cluster (`crate::index::moved_away`) into their
//! global pools' `ipam.cluster.x-k8s.io/moved-away` annotation, so that they outlive this process.

use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use futures::channel::mpsc;
use kube::api::{Api, DynamicObject, Patch};
use kube::{Resource, ResourceExt};
use serde_json::{Value, json};
use tokio_util::time::DelayQueue;

use super::{Context, Error};
use crate::api::MOVED_AWAY_ANNOTATION;
use crate::index::PoolKey;
use crate::index::moved_away::entries;

/// A failed write is tried again after this long.
const RETRY: Duration = Duration::from_secs(1);

/// Writes the queued changes into the pools' annotations, one pool at a time, retrying until they land.
pub async fn write_pending(ctx: Arc<Context>, mut changed: mpsc::UnboundedReceiver<PoolKey>) {
    let mut retries: DelayQueue<PoolKey> = DelayQueue::new();
    loop {
        let key = tokio::select! {
            Some(key) = changed.next() => key,
            Some(expired) = retries.next(), if !retries.is_empty() => expired.into_inner(),
            else => return,
        };
        if let Err(e) = write(&ctx, &key).await {
            ctx.report_failure("recording the addresses moved away", &key, &e);
            retries.insert(key, RETRY);
        }
    }
}

async fn write(ctx: &Context, key: &PoolKey) -> Result<(), Error> {
    let changes = ctx.index.moved_away_pending(key);
    if changes.is_empty() {
        return Ok(());
    }
    let api: Api<DynamicObject> = Api::all_with(ctx.client.clone(), &key.kind.api_resource());
    let Some(live) = api.get_opt(&key.name).await.map_err(Error::kube("reading the pool"))? else {
        // The pool is gone, and its reservations with it.
        ctx.index.moved_away_written(key, None);
        return Ok(());
    };
    let mut stored = entries(live.annotations().get(MOVED_AWAY_ANNOTATION).map(String::as_str));
    for (entry, add) in &changes {
        if *add {
            stored.insert(entry.clone());
        } else {
            stored.remove(entry);
        }
    }
    let value = if stored.is_empty() { Value::Null } else { json!(stored.into_iter().collect::<Vec<_>>().join(",")) };
    let patch = json!({"metadata": {
        "resourceVersion": live.meta().resource_version,
        "annotations": { MOVED_AWAY_ANNOTATION: value },
    }});
    ctx.fence
        .guard(api.patch(&key.name, &super::patch_params(), &Patch::Merge(&patch)))
        .await?
        .map_err(Error::kube("recording the addresses moved away"))?;
    ctx.index.moved_away_written(key, Some(&changes));
    Ok(())
}
