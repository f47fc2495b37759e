//! Kubernetes Events, sent off the control loops. The reconciler and the
//! surge worker hand an Event over and go on; a task sends them a few at a
//! time, each within a timeout. An Events API that is slow (a webhook on
//! Events timing out, a priority level queueing them) therefore costs the
//! controllers nothing: before, each Event was awaited in turn, and a pass
//! that surged 100 Deployments waited up to 100 timeouts before the worker
//! planned again.
//!
//! Events are best effort, as in client-go, whose broadcaster keeps 1,000
//! and drops the newest when full: here the same bound, and the drops are
//! counted (`eviction_autoscaler_events_dropped`) and logged.

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::ObjectReference;
use kube::runtime::events::{Event, EventType, Recorder};
use prometheus_client::metrics::counter::Counter;
use tokio::sync::mpsc;

/// Events waiting to be sent (client-go's broadcaster keeps as many).
pub const QUEUE: usize = 1000;
/// Events sent at once.
pub const CONCURRENCY: usize = 4;
/// The most one Event may take.
pub const TIMEOUT: Duration = Duration::from_secs(5);

type Sender =
    Arc<dyn Fn(ObjectReference, Event) -> Pin<Box<dyn Future<Output = ()> + Send>> + Send + Sync>;

/// Where the controllers put their Events. Cheap to clone.
#[derive(Clone)]
pub struct Events {
    tx: mpsc::Sender<(ObjectReference, Event)>,
    dropped: Counter,
    /// Handed over and not yet sent (or given up): what [`Events::flush`] waits for.
    pending: Arc<AtomicUsize>,
}

impl Events {
    /// Events published through `recorder`, by a task spawned here.
    pub fn spawn(recorder: Recorder, dropped: Counter) -> Self {
        let send: Sender = Arc::new(move |obj, ev| {
            let recorder = recorder.clone();
            Box::pin(async move {
                match tokio::time::timeout(TIMEOUT, recorder.publish(&ev, &obj)).await {
                    Ok(Ok(())) => {}
                    Ok(Err(e)) => {
                        tracing::debug!(error = %e, reason = %ev.reason, "event not recorded")
                    }
                    Err(_) => {
                        tracing::debug!(reason = %ev.reason, "event not recorded within {TIMEOUT:?}")
                    }
                }
            })
        });
        Self::with_sender(QUEUE, CONCURRENCY, send, dropped)
    }

    /// The queue and its sending task around any sender (tests).
    fn with_sender(queue: usize, concurrency: usize, send: Sender, dropped: Counter) -> Self {
        let (tx, mut rx) = mpsc::channel(queue);
        let pending = Arc::new(AtomicUsize::new(0));
        let done = pending.clone();
        tokio::spawn(
            futures::stream::poll_fn(move |cx| rx.poll_recv(cx)).for_each_concurrent(
                concurrency,
                move |(obj, ev)| {
                    let (sending, done) = (send(obj, ev), done.clone());
                    async move {
                        sending.await;
                        done.fetch_sub(1, Ordering::SeqCst);
                    }
                },
            ),
        );
        Events {
            tx,
            dropped,
            pending,
        }
    }

    /// Waits until every Event handed over so far is sent or given up (each
    /// within [`TIMEOUT`]): on shutdown, so that the last pass's Events are
    /// not lost with the process. The caller bounds the wait.
    pub async fn flush(&self) {
        while self.pending.load(Ordering::SeqCst) > 0 {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// An Event of the controllers about `obj`, handed over without waiting.
    pub fn emit(&self, obj: &ObjectReference, type_: EventType, reason: &str, note: String) {
        self.publish(
            obj,
            Event {
                type_,
                reason: reason.into(),
                note: Some(note),
                action: "Reconcile".into(),
                secondary: None,
            },
        );
    }

    /// Hands the Event over without waiting; a full queue drops it.
    fn publish(&self, obj: &ObjectReference, ev: Event) {
        // Counted before the hand-over: the task may finish the send first.
        self.pending.fetch_add(1, Ordering::SeqCst);
        match self.tx.try_send((obj.clone(), ev)) {
            Ok(()) => {}
            Err(mpsc::error::TrySendError::Full((_, ev))) => {
                self.pending.fetch_sub(1, Ordering::SeqCst);
                self.dropped.inc();
                tracing::debug!(reason = %ev.reason, "event dropped: {QUEUE} waiting to be sent");
            }
            // The sending task is gone only when the runtime shuts down.
            Err(mpsc::error::TrySendError::Closed(_)) => {
                self.pending.fetch_sub(1, Ordering::SeqCst);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};

    fn event(reason: &str) -> Event {
        Event {
            type_: EventType::Normal,
            reason: reason.into(),
            note: None,
            action: "Test".into(),
            secondary: None,
        }
    }

    /// A sender that never finishes (an Events API that does not answer)
    /// and counts the sends it started.
    fn hanging(started: Arc<AtomicUsize>) -> Sender {
        Arc::new(move |_, _| {
            started.fetch_add(1, Ordering::SeqCst);
            Box::pin(std::future::pending())
        })
    }

    #[tokio::test]
    async fn publishing_never_waits_for_a_hanging_api_and_drops_past_the_bound() {
        let started = Arc::new(AtomicUsize::new(0));
        let dropped = Counter::default();
        let events = Events::with_sender(10, 2, hanging(started.clone()), dropped.clone());
        let obj = ObjectReference::default();
        // Let the task take its first two (which then hang).
        for i in 0..2 {
            events.publish(&obj, event(&format!("e{i}")));
        }
        while started.load(Ordering::SeqCst) < 2 {
            tokio::task::yield_now().await;
        }
        // Every further call returns at once: 10 queued, the rest dropped.
        let t = std::time::Instant::now();
        for i in 2..1000 {
            events.publish(&obj, event(&format!("e{i}")));
        }
        assert!(t.elapsed() < Duration::from_secs(5), "publish waited");
        assert_eq!(dropped.get(), 1000 - 2 - 10);
        // The task, given every chance to run, still sends only two at once.
        for _ in 0..100 {
            tokio::task::yield_now().await;
        }
        assert_eq!(started.load(Ordering::SeqCst), 2, "concurrency bound");
    }

    /// Shutdown waits for the Events handed over before it, not longer.
    #[tokio::test]
    async fn flush_waits_for_every_event_handed_over() {
        let sent = Arc::new(AtomicUsize::new(0));
        let s = sent.clone();
        let send: Sender = Arc::new(move |_, _| {
            let s = s.clone();
            Box::pin(async move {
                tokio::time::sleep(Duration::from_millis(30)).await;
                s.fetch_add(1, Ordering::SeqCst);
            })
        });
        let events = Events::with_sender(100, 2, send, Counter::default());
        let obj = ObjectReference::default();
        for i in 0..6 {
            events.publish(&obj, event(&format!("e{i}")));
        }
        tokio::time::timeout(Duration::from_secs(5), events.flush())
            .await
            .expect("flush ends");
        assert_eq!(
            sent.load(Ordering::SeqCst),
            6,
            "all sent when flush returns"
        );
        // Dropped Events are not waited for.
        let stuck = Events::with_sender(1, 1, hanging(Arc::default()), Counter::default());
        for i in 0..5 {
            stuck.publish(&obj, event(&format!("s{i}")));
        }
        for _ in 0..100 {
            tokio::task::yield_now().await;
        }
        assert_eq!(
            stuck.pending.load(Ordering::SeqCst),
            1,
            "one handed over (the queue holds one), four dropped"
        );
    }

    #[tokio::test]
    async fn every_event_is_sent_when_the_api_answers() {
        let sent = Arc::new(std::sync::Mutex::new(Vec::new()));
        let s = sent.clone();
        let send: Sender = Arc::new(move |_, ev| {
            let s = s.clone();
            Box::pin(async move {
                tokio::task::yield_now().await;
                s.lock().unwrap().push(ev.reason);
            })
        });
        let dropped = Counter::default();
        let events = Events::with_sender(1000, 4, send, dropped.clone());
        let obj = ObjectReference::default();
        for i in 0..500 {
            events.publish(&obj, event(&format!("e{i}")));
        }
        for _ in 0..10_000 {
            if sent.lock().unwrap().len() == 500 {
                break;
            }
            tokio::task::yield_now().await;
        }
        let mut got = sent.lock().unwrap().clone();
        got.sort();
        let mut want: Vec<String> = (0..500).map(|i| format!("e{i}")).collect();
        want.sort();
        assert_eq!(got, want);
        assert_eq!(dropped.get(), 0);
    }
}
