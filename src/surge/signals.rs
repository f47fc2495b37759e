//! Blocked-eviction signals. Every replica's webhook hands them here: they are
//! kept in memory (the leader's fast path) and written, coalesced, to the
//! EvictionAutoScaler's `spec.lastEviction` so that whichever replica leads
//! sees them (the durable path).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::api::{Patch, PatchParams};
use kube::{Api, Client};
use serde_json::json;
use tokio::sync::{mpsc, Notify};

use crate::crd::EvictionAutoScaler;
use crate::webhook::Signal;

/// How far back a signal counts for any decision: twice the cooldown (a
/// surge's cooldown runs from its last signal; candidates are looked for
/// over twice that). The planner, the worker's idle check and the ageing of
/// `lastEviction` (src/surge/clock.rs) must agree on it.
pub fn window(cooldown: Duration) -> Duration {
    cooldown.max(Duration::from_secs(1)) * 2
}

/// How often one EvictionAutoScaler's lastEviction is written at most.
const DURABLE_EVERY: Duration = Duration::from_secs(5);
/// How often the signal memory is pruned.
const PRUNE_EVERY: Duration = Duration::from_secs(30);
/// Durable writes in flight at once, and the bound on each with its
/// retries: a hung apiserver must not pile up a task per drained
/// Deployment every `DURABLE_EVERY` (the client's read timeout bounds a
/// silent answer, not one that trickles).
const DURABLE_IN_FLIGHT: usize = 16;
const DURABLE_WRITE_BOUND: Duration = Duration::from_secs(20);

#[derive(Default)]
struct Entry {
    last: Option<Instant>,
    denied: HashMap<String, Instant>,
    last_written: Option<Instant>,
}

/// In-memory signals per (namespace, Deployment).
#[derive(Clone, Default)]
pub struct SignalBook {
    inner: Arc<Mutex<HashMap<(String, String), Entry>>>,
    pub wake: Arc<Notify>,
}

impl SignalBook {
    pub fn record(&self, s: &Signal, now: Instant) {
        if let Ok(mut m) = self.inner.lock() {
            let e = m
                .entry((s.namespace.clone(), s.deployment.clone()))
                .or_default();
            e.last = Some(now);
            e.denied.insert(s.pod.clone(), now);
        }
        self.wake.notify_one();
    }

    /// Time since the last signal, and the pods denied within `window`.
    pub fn get(
        &self,
        ns: &str,
        dep: &str,
        window: Duration,
        now: Instant,
    ) -> (Option<Duration>, Vec<String>) {
        let Ok(m) = self.inner.lock() else {
            return (None, vec![]);
        };
        match m.get(&(ns.to_string(), dep.to_string())) {
            None => (None, vec![]),
            Some(e) => (
                e.last.map(|t| now.saturating_duration_since(t)),
                e.denied
                    .iter()
                    .filter(|(_, t)| now.saturating_duration_since(**t) <= window)
                    .map(|(p, _)| p.clone())
                    .collect(),
            ),
        }
    }

    /// Deployments with a signal within `window`.
    pub fn recent(&self, window: Duration, now: Instant) -> Vec<(String, String)> {
        self.inner
            .lock()
            .map(|m| {
                m.iter()
                    .filter(|(_, e)| {
                        e.last
                            .is_some_and(|t| now.saturating_duration_since(t) <= window)
                    })
                    .map(|(k, _)| k.clone())
                    .collect()
            })
            .unwrap_or_default()
    }

    /// Displaced pods were seen on a draining node: a signal without a pod
    /// denied (the cooldown counts from the last one).
    pub fn touch(&self, ns: &str, dep: &str, now: Instant) {
        if let Ok(mut m) = self.inner.lock() {
            m.entry((ns.to_string(), dep.to_string())).or_default().last = Some(now);
        }
    }

    /// Drop what no decision reads any more: signals older than `keep`.
    /// Every replica records (followers too), so every replica prunes.
    pub fn prune(&self, keep: Duration, now: Instant) {
        if let Ok(mut m) = self.inner.lock() {
            m.retain(|_, e| {
                e.denied
                    .retain(|_, t| now.saturating_duration_since(*t) <= keep);
                e.last
                    .is_some_and(|t| now.saturating_duration_since(t) <= keep)
            });
        }
    }

    pub fn len(&self) -> usize {
        self.inner.lock().map_or(0, |m| m.len())
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Forget a Deployment's signals up to `at` (when the pass that
    /// reverted its surge read them): a block recorded while the revert was
    /// being written belongs to the next episode (a new drain starting) and
    /// stays, so the next pass surges at once instead of on kubectl's retry.
    pub fn forget_until(&self, ns: &str, dep: &str, at: Instant) {
        if let Ok(mut m) = self.inner.lock() {
            let k = (ns.to_string(), dep.to_string());
            if let Some(e) = m.get_mut(&k) {
                e.denied.retain(|_, t| *t > at);
                if e.last.is_some_and(|t| t <= at) {
                    e.last = e.denied.values().max().copied();
                }
                if e.last.is_none() && e.denied.is_empty() {
                    m.remove(&k);
                }
            }
        }
    }

    /// Lets the next signal retry a durable write that failed.
    fn written_failed(&self, s: &Signal) {
        if let Ok(mut m) = self.inner.lock() {
            if let Some(e) = m.get_mut(&(s.namespace.clone(), s.deployment.clone())) {
                e.last_written = None;
            }
        }
    }

    fn due_for_write(&self, s: &Signal, now: Instant) -> bool {
        let Ok(mut m) = self.inner.lock() else {
            return false;
        };
        let e = m
            .entry((s.namespace.clone(), s.deployment.clone()))
            .or_default();
        let due = e
            .last_written
            .is_none_or(|t| now.saturating_duration_since(t) >= DURABLE_EVERY);
        if due {
            e.last_written = Some(now);
        }
        due
    }
}

/// Consumes the webhook's signals (runs in every replica, leader or not).
/// `keep` bounds the memory: signals older than it are pruned.
pub async fn consume(
    mut rx: mpsc::Receiver<Signal>,
    book: SignalBook,
    client: Client,
    keep: Duration,
) {
    let mut pruned = Instant::now();
    let in_flight = Arc::new(tokio::sync::Semaphore::new(DURABLE_IN_FLIGHT));
    while let Some(s) = rx.recv().await {
        let now = Instant::now();
        if now.saturating_duration_since(pruned) >= PRUNE_EVERY {
            book.prune(keep, now);
            pruned = now;
        }
        book.record(&s, now);
        if !book.due_for_write(&s, now) {
            continue;
        }
        // Off the admission path; a failure only loses the durable copy of a
        // signal that kubectl will repeat on its next retry anyway.
        let api: Api<EvictionAutoScaler> = Api::namespaced(client.clone(), &s.namespace);
        let patch = json!({"spec": {"lastEviction": {
            "podName": s.pod,
            "evictionTime": Time(k8s_openapi::jiff::Timestamp::now()),
        }}});
        // Every slot taken (the apiserver hung): the next signal retries.
        let Ok(slot) = in_flight.clone().try_acquire_owned() else {
            book.written_failed(&s);
            continue;
        };
        let book = book.clone();
        tokio::spawn(async move {
            let _slot = slot;
            // A Deployment drained right after its creation may not have its
            // EvictionAutoScaler yet: the reconciler makes it within a second.
            let write = async {
                for attempt in 0..5 {
                    match api
                        .patch(&s.pdb, &PatchParams::default(), &Patch::Merge(&patch))
                        .await
                    {
                        Ok(_) => return Ok(()),
                        Err(kube::Error::Api(st)) if st.code == 404 && attempt < 4 => {
                            tokio::time::sleep(Duration::from_secs(1)).await;
                        }
                        Err(e) => return Err(e.to_string()),
                    }
                }
                Ok(())
            };
            let failed = match tokio::time::timeout(DURABLE_WRITE_BOUND, write).await {
                Ok(Ok(())) => return,
                Ok(Err(e)) => e,
                Err(_) => format!("no answer within {DURABLE_WRITE_BOUND:?}"),
            };
            tracing::warn!(namespace = %s.namespace, eas = %s.pdb, error = %failed,
                "lastEviction not written; the next signal retries");
            book.written_failed(&s);
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn signal(pod: &str) -> Signal {
        Signal {
            namespace: "ns".into(),
            deployment: "web".into(),
            pdb: "web".into(),
            pod: pod.into(),
        }
    }

    /// A revert planned at `t0 + 10 s` forgets what it was planned from; a
    /// block recorded while it was written (a new drain) stays.
    #[test]
    fn a_revert_forgets_only_the_signals_it_was_planned_from() {
        let book = SignalBook::default();
        let t0 = Instant::now();
        let window = Duration::from_secs(120);
        book.record(&signal("a"), t0);
        let planned = t0 + Duration::from_secs(10);
        book.record(&signal("b"), planned + Duration::from_millis(300));
        book.forget_until("ns", "web", planned);
        let later = planned + Duration::from_secs(1);
        let (since, denied) = book.get("ns", "web", window, later);
        assert_eq!(since, Some(Duration::from_millis(700)));
        assert_eq!(denied, vec!["b".to_string()]);
        // Nothing after the plan: the Deployment is forgotten altogether.
        book.forget_until("ns", "web", later);
        assert!(book.is_empty());
        // A node's signal (no pod) after the plan stays too.
        book.touch("ns", "web", later + Duration::from_secs(1));
        book.forget_until("ns", "web", later);
        assert_eq!(
            book.get("ns", "web", window, later + Duration::from_secs(2))
                .0,
            Some(Duration::from_secs(1))
        );
    }
}
