//! The one supervisor of the process's long-running tasks: the servers and the leader election of `crate::manager`,
//! and the watches, timers and workers of `crate::controllers`. Every task runs until the process (or the leader
//! term) stops; one that ends before is a failure, and the first failure stops the rest.
//!
//! A task is either spawned (on its own tokio task, in parallel with the others; aborted when the supervisor is
//! dropped) or polled in place (dropped with the supervisor, at once: a leader term's controllers, none of whose
//! writes may still be in flight once the term ends, `crate::leader`).

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use futures::FutureExt;
use futures::future::BoxFuture;
use futures::stream::{FuturesUnordered, StreamExt};
use tokio::task::JoinHandle;
use tracing::warn;

/// A task's name and how it ended.
pub type Ended = (&'static str, anyhow::Result<()>);

#[derive(Default)]
pub struct Supervisor {
    tasks: FuturesUnordered<BoxFuture<'static, Ended>>,
}

impl Supervisor {
    /// Runs `task` on its own tokio task.
    pub fn spawn(&mut self, name: &'static str, task: impl Future<Output = anyhow::Result<()>> + Send + 'static) {
        let handle = Aborting(tokio::spawn(task));
        self.tasks.push(
            async move {
                match handle.await {
                    Ok(result) => (name, result),
                    Err(e) => (name, Err(anyhow::anyhow!("panicked or was aborted: {e}"))),
                }
            }
            .boxed(),
        );
    }

    /// Polls `task` in place, with the others of this supervisor.
    pub fn run(&mut self, name: &'static str, task: impl Future<Output = anyhow::Result<()>> + Send + 'static) {
        self.tasks.push(task.map(move |result| (name, result)).boxed());
    }

    /// Polls `task`, which has no result, in place: it must not end.
    pub fn forever(&mut self, name: &'static str, task: impl Future<Output = ()> + Send + 'static) {
        self.run(name, task.map(Ok));
    }

    /// Runs the tasks until `stop` resolves (then `Ok`) or one of them ends first (its failure).
    pub async fn until(&mut self, stop: impl Future<Output = ()>) -> anyhow::Result<()> {
        tokio::select! {
            () = stop => Ok(()),
            Some((name, result)) = self.tasks.next() => Err(match result {
                Ok(()) => anyhow::anyhow!("{name} stopped unexpectedly"),
                Err(e) => e.context(name),
            }),
        }
    }

    /// Lets the tasks finish (they were told to stop) for at most `within`; says what ended with an error, and
    /// whether all finished.
    pub async fn drain(&mut self, within: Duration) -> bool {
        let drained = tokio::time::timeout(within, async {
            while let Some((name, result)) = self.tasks.next().await {
                if let Err(e) = result {
                    warn!(task = name, error = format!("{e:#}"), "task ended with an error during shutdown");
                }
            }
        })
        .await;
        drained.is_ok()
    }
}

/// A spawned task's handle that aborts the task when dropped.
struct Aborting<T>(JoinHandle<T>);

impl<T> Future for Aborting<T> {
    type Output = Result<T, tokio::task::JoinError>;
    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        Pin::new(&mut self.0).poll(cx)
    }
}

impl<T> Drop for Aborting<T> {
    fn drop(&mut self) {
        self.0.abort();
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, Ordering};

    use super::*;

    #[tokio::test]
    async fn the_first_task_to_end_is_a_failure_and_stop_is_not() {
        let mut tasks = Supervisor::default();
        tasks.forever("pending", std::future::pending());
        tasks.spawn("failing", async { Err(anyhow::anyhow!("boom")) });
        let failure = tasks.until(std::future::pending()).await.expect_err("a task ended");
        assert_eq!(format!("{failure:#}"), "failing: boom");

        let mut tasks = Supervisor::default();
        tasks.run("ends", async { Ok(()) });
        let failure = tasks.until(std::future::pending()).await.expect_err("ended before stop");
        assert_eq!(failure.to_string(), "ends stopped unexpectedly");

        let mut tasks = Supervisor::default();
        tasks.forever("pending", std::future::pending());
        tasks.until(async {}).await.expect("stopped");
        assert!(!tasks.drain(Duration::from_millis(10)).await, "a task that does not stop is not drained");
    }

    #[tokio::test]
    async fn dropping_the_supervisor_drops_and_aborts_its_tasks() {
        struct SetOnDrop(Arc<AtomicBool>);
        impl Drop for SetOnDrop {
            fn drop(&mut self) {
                self.0.store(true, Ordering::SeqCst);
            }
        }
        let (in_place, spawned) = (Arc::new(AtomicBool::new(false)), Arc::new(AtomicBool::new(false)));
        let mut tasks = Supervisor::default();
        let guard = SetOnDrop(in_place.clone());
        tasks.forever("in place", async move {
            let _guard = guard;
            std::future::pending::<()>().await;
        });
        let guard = SetOnDrop(spawned.clone());
        tasks.spawn("spawned", async move {
            let _guard = guard;
            std::future::pending::<anyhow::Result<()>>().await
        });
        tasks.until(tokio::time::sleep(Duration::from_millis(10))).await.expect("stopped");
        drop(tasks);
        assert!(in_place.load(Ordering::SeqCst), "dropped at once");
        for _ in 0..100 {
            if spawned.load(Ordering::SeqCst) {
                return;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        panic!("the spawned task was not aborted");
    }
}
