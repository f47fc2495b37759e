//! Tasks that must run until the process ends: the election, the two
//! controllers, the watch streams, the certificate reloads. A JoinSet only
//! reports a task's end when joined, and `serve` joins its sets at shutdown,
//! so a panic in one of them would go unnoticed: a watch store frozen while
//! reported fresh, or (the election gone) controllers that go on writing
//! with no Lease. [`Fatal::must_run`] turns such an end into a shutdown with
//! an error exit, so the kubelet restarts the pod and nothing runs half.

use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};

use futures::FutureExt;
use tokio::sync::Notify;

/// The first task that ended though it must not, once set.
#[derive(Clone, Default)]
pub struct Fatal(Arc<Inner>);

#[derive(Default)]
struct Inner {
    why: OnceLock<String>,
    notify: Notify,
    /// Shutting down: tasks end as their inputs go (the signal consumer
    /// once the server drops its senders), which is no failure.
    stopping: AtomicBool,
}

impl Fatal {
    /// `fut`, reporting its end (a return or a panic) as fatal. An abort
    /// (the JoinSet's `abort_all` at shutdown) drops it: no report.
    pub fn must_run<F>(&self, name: &str, fut: F) -> impl Future<Output = ()> + Send + 'static
    where
        F: Future<Output = ()> + Send + 'static,
    {
        let (me, name) = (self.clone(), name.to_string());
        async move {
            let why = match AssertUnwindSafe(fut).catch_unwind().await {
                Ok(()) => format!("{name} ended"),
                Err(p) => {
                    let msg = p
                        .downcast_ref::<&str>()
                        .map(|s| s.to_string())
                        .or_else(|| p.downcast_ref::<String>().cloned())
                        .unwrap_or_else(|| "a panic".into());
                    format!("{name} panicked: {msg}")
                }
            };
            if me.0.stopping.load(Ordering::Acquire) {
                tracing::debug!(task = %name, %why, "task ended while shutting down");
                return;
            }
            tracing::error!(task = %name, %why, "a task that must run ended: shutting down");
            me.set(why);
        }
    }

    /// From now on, tasks that end are not reported (the process stops).
    pub fn stopping(&self) {
        self.0.stopping.store(true, Ordering::Release);
    }

    fn set(&self, why: String) {
        let _ = self.0.why.set(why);
        self.0.notify.notify_waiters();
    }

    /// Why the process must stop, once a task ended.
    pub fn why(&self) -> Option<&str> {
        self.0.why.get().map(String::as_str)
    }

    /// Waits for the first such end and returns why.
    pub async fn wait(&self) -> String {
        loop {
            let notified = self.0.notify.notified();
            if let Some(why) = self.why() {
                return why.to_string();
            }
            notified.await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[tokio::test]
    async fn a_panic_or_an_end_is_reported_an_abort_is_not() {
        let fatal = Fatal::default();
        // Aborted (as at shutdown): nothing reported.
        let pending = tokio::spawn(fatal.must_run("pending", std::future::pending()));
        pending.abort();
        assert!(pending.await.is_err_and(|e| e.is_cancelled()));
        assert_eq!(fatal.why(), None);
        let waiting = tokio::spawn({
            let f = fatal.clone();
            async move { f.wait().await }
        });
        tokio::task::yield_now().await;
        // A panic: the waiter wakes with the task's name and message, and
        // the panic does not reach the JoinHandle (the task ends cleanly).
        let panicked = tokio::spawn(fatal.must_run("the watch of pods", async {
            panic!("strip failed");
        }));
        assert!(panicked.await.is_ok());
        let why = tokio::time::timeout(Duration::from_secs(5), waiting)
            .await
            .expect("the waiter wakes")
            .expect("joins");
        assert_eq!(why, "the watch of pods panicked: strip failed");
        // The first end is the one kept.
        fatal.must_run("the election", async {}).await;
        assert_eq!(
            fatal.why(),
            Some("the watch of pods panicked: strip failed")
        );

        let other = Fatal::default();
        other.must_run("the reconciler", async {}).await;
        assert_eq!(other.wait().await, "the reconciler ended");

        // Ends once shutting down are no failure.
        let stopping = Fatal::default();
        stopping.stopping();
        stopping.must_run("the signal consumer", async {}).await;
        assert_eq!(stopping.why(), None);
    }
}
