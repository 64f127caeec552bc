//! The one watch driver: a kube watcher stream, with our reconnect backoff, fed into the index through
//! [`Relist`](crate::index::relist::Relist).

use std::time::Duration;

use futures::{Stream, StreamExt};
use kube::runtime::watcher;
use tokio::sync::watch;

use crate::apiserver::client::is_transport;
use crate::index::relist::{Feed, Relist};

/// Watches end on the server's side after 45 s and resume from their last resourceVersion: the client's 60 s read
/// timeout (`crate::manager`) must not cut a quiet watch, which would log an error and reconnect. Lists are quorum
/// reads (kube's default, stated because the index relies on it): a relist is never older than what we wrote before it
/// began, so what it does not hold is gone.
pub fn config() -> watcher::Config {
    watcher::Config::default().timeout(WATCH_TIMEOUT_SECONDS).list_semantic(watcher::ListSemantic::MostRecent)
}

/// Below the client's read timeout.
const WATCH_TIMEOUT_SECONDS: u32 = 45;

/// The watches' reconnect delay: 0.5 s doubling to 4 s, back to the start after any event. Short, so that the
/// controllers see the API server again within seconds of its return (kube's default grows to 30 s and resets only
/// after 2 quiet minutes); a failing watch costs one request per stream every few seconds.
#[derive(Clone, Debug)]
pub struct Backoff {
    next: Duration,
}

impl Backoff {
    const FIRST: Duration = Duration::from_millis(500);
    const MAX: Duration = Duration::from_secs(4);
}

impl Default for Backoff {
    fn default() -> Self {
        Self { next: Self::FIRST }
    }
}

impl Iterator for Backoff {
    type Item = Duration;

    fn next(&mut self) -> Option<Duration> {
        let delay = self.next;
        self.next = (self.next * 2).min(Self::MAX);
        Some(delay)
    }
}

impl kube::runtime::utils::Backoff for Backoff {
    fn reset(&mut self) {
        self.next = Self::FIRST;
    }
}

/// Whether a watch failed because the API server did not answer (rather than refused).
pub fn unreachable(e: &watcher::Error) -> bool {
    match e {
        watcher::Error::InitialListFailed(e) | watcher::Error::WatchStartFailed(e) | watcher::Error::WatchFailed(e) => {
            is_transport(e)
        }
        _ => false,
    }
}

/// What a watch reports besides its objects.
pub trait Health {
    /// An event arrived: the API server answers.
    fn answered(&self);
    fn failed(&self, what: &'static str, error: &watcher::Error);
}

/// Feeds a watch into `feed` until the stream ends; `listed` turns true after the first complete list.
pub async fn drive<K, F: Feed<K>>(
    what: &'static str,
    stream: impl Stream<Item = Result<watcher::Event<K>, watcher::Error>>,
    feed: &F,
    health: &(dyn Health + Sync),
    listed: watch::Sender<bool>,
) {
    let mut stream = std::pin::pin!(stream);
    let mut relist = Relist::default();
    while let Some(event) = stream.next().await {
        match event {
            Ok(event) => {
                health.answered();
                if relist.on_event(feed, event) {
                    listed.send_replace(true);
                }
            }
            Err(e) => health.failed(what, &e),
        }
    }
}
