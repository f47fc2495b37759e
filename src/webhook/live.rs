//! The live check behind every 429 (behaviour.md section 4): the caches may
//! lag the apiserver (a PDB just relaxed or deleted, a pod already
//! terminating), so a Block from the caches is confirmed by reading the pod
//! and the namespace's PDBs from the apiserver. The decision stays pure
//! (`eviction::confirm`); this is the I/O at its edge.

use std::future::Future;
use std::time::Duration;

use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use kube::api::ListParams;
use kube::{Api, Client};

use super::eviction::{self, Decision, EvictionView, LiveFacts};
use crate::cache::{PodWire, SlimPod};

/// Both live reads together. The webhook's `timeoutSeconds` is 10 and the
/// apiserver must still run its own eviction afterwards, so stay well under.
pub const LIVE_CHECK_TIMEOUT: Duration = Duration::from_millis(1500);

#[derive(Debug, thiserror::Error)]
pub enum LiveError {
    #[error("reading pod {namespace}/{pod}: {source}")]
    Pod {
        namespace: String,
        pod: String,
        source: kube::Error,
    },
    #[error("listing the PodDisruptionBudgets of namespace {namespace}: {source}")]
    Pdbs {
        namespace: String,
        source: kube::Error,
    },
    #[error("no answer from the apiserver within {0:?}")]
    Timeout(Duration),
}

/// Reads the facts a 429 rests on.
pub trait LiveReader: Send + Sync {
    fn read(
        &self,
        ns: &str,
        pod: &str,
    ) -> impl Future<Output = Result<LiveFacts, LiveError>> + Send;
}

/// Reads from the apiserver: GET the pod, LIST the namespace's PDBs, at once.
pub struct ApiReader {
    pub client: Client,
}

impl LiveReader for ApiReader {
    async fn read(&self, ns: &str, pod: &str) -> Result<LiveFacts, LiveError> {
        let pods: Api<PodWire> = Api::namespaced(self.client.clone(), ns);
        let pdbs: Api<PodDisruptionBudget> = Api::namespaced(self.client.clone(), ns);
        let get = async {
            pods.get_opt(pod).await.map_err(|source| LiveError::Pod {
                namespace: ns.to_string(),
                pod: pod.to_string(),
                source,
            })
        };
        let list = async {
            pdbs.list(&ListParams::default())
                .await
                .map_err(|source| LiveError::Pdbs {
                    namespace: ns.to_string(),
                    source,
                })
        };
        let (pod, list) = tokio::try_join!(get, list)?;
        Ok(LiveFacts {
            pod: pod.as_ref().map(SlimPod::from),
            pdbs: list.items,
        })
    }
}

/// The decision the webhook answers with: the caches' decision, and for a
/// Block the live confirmation, bounded by `timeout`. Only the caller's
/// Block may record a surge signal or answer 429.
pub async fn decide_confirmed(
    cache: &(impl EvictionView + Sync),
    reader: &impl LiveReader,
    ns: &str,
    pod: &str,
    timeout: Duration,
) -> Decision {
    let cached = eviction::decide(cache, ns, pod);
    if !matches!(cached, Decision::Block(_)) {
        return cached;
    }
    let live = match tokio::time::timeout(timeout, reader.read(ns, pod)).await {
        Ok(r) => r,
        Err(_) => Err(LiveError::Timeout(timeout)),
    };
    if let Err(e) = &live {
        tracing::warn!(namespace = ns, pod, error = %e,
            "live check before a 429 failed; allowing the eviction");
    }
    let decision = eviction::confirm(cache, ns, pod, live.as_ref());
    if let Decision::Allow {
        reason: eviction::AllowReason::LiveDisagreed(live_reason),
        ..
    } = &decision
    {
        tracing::info!(
            namespace = ns,
            pod,
            live_reason,
            "the caches said block but the apiserver's objects allow the eviction"
        );
    }
    decision
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::webhook::eviction::tests::{blocking, pdb};
    use crate::webhook::eviction::AllowReason;
    use std::sync::atomic::{AtomicUsize, Ordering};

    pub enum Fake {
        Facts(Box<LiveFacts>),
        Fails,
        Hangs,
    }

    pub struct FakeReader {
        fake: Fake,
        pub calls: AtomicUsize,
    }

    impl FakeReader {
        pub fn new(fake: Fake) -> Self {
            FakeReader {
                fake,
                calls: AtomicUsize::new(0),
            }
        }
    }

    impl LiveReader for FakeReader {
        async fn read(&self, ns: &str, _pod: &str) -> Result<LiveFacts, LiveError> {
            self.calls.fetch_add(1, Ordering::SeqCst);
            match &self.fake {
                Fake::Facts(f) => Ok(LiveFacts::clone(f)),
                Fake::Fails => Err(LiveError::Pdbs {
                    namespace: ns.to_string(),
                    source: kube::Error::Service("connection refused".into()),
                }),
                Fake::Hangs => {
                    tokio::time::sleep(Duration::from_secs(3600)).await;
                    Err(LiveError::Timeout(Duration::ZERO))
                }
            }
        }
    }

    pub fn reason(d: &Decision) -> Option<AllowReason> {
        match d {
            Decision::Allow { reason, .. } => Some(*reason),
            Decision::Block(_) | Decision::Recount(_) => None,
        }
    }

    #[tokio::test]
    async fn an_allow_from_the_caches_reads_nothing() {
        let mut cache = blocking();
        cache.pdbs[0] = pdb("web", 1, 2, 3);
        let r = FakeReader::new(Fake::Fails);
        let d = decide_confirmed(&cache, &r, "ns", "p", LIVE_CHECK_TIMEOUT).await;
        assert_eq!(reason(&d), Some(AllowReason::BudgetAllows));
        assert_eq!(r.calls.load(Ordering::SeqCst), 0);
    }

    #[tokio::test]
    async fn a_live_read_error_allows() {
        let r = FakeReader::new(Fake::Fails);
        let d = decide_confirmed(&blocking(), &r, "ns", "p", LIVE_CHECK_TIMEOUT).await;
        assert_eq!(reason(&d), Some(AllowReason::LiveCheckFailed));
        assert_eq!(r.calls.load(Ordering::SeqCst), 1);
    }

    #[tokio::test]
    async fn a_live_read_that_hangs_allows_at_the_timeout() {
        let r = FakeReader::new(Fake::Hangs);
        let timeout = Duration::from_millis(200);
        let started = std::time::Instant::now();
        let d = decide_confirmed(&blocking(), &r, "ns", "p", timeout).await;
        assert_eq!(reason(&d), Some(AllowReason::LiveCheckFailed));
        let took = started.elapsed();
        assert!(took >= timeout && took < Duration::from_secs(2), "{took:?}");
    }

    #[tokio::test]
    async fn live_facts_that_agree_block() {
        let cache = blocking();
        let facts = LiveFacts {
            pod: cache.pods.first().cloned(),
            pdbs: cache.pdbs.clone(),
        };
        let r = FakeReader::new(Fake::Facts(Box::new(facts)));
        let d = decide_confirmed(&cache, &r, "ns", "p", LIVE_CHECK_TIMEOUT).await;
        assert!(matches!(d, Decision::Block(_)), "{d:?}");
    }

    #[tokio::test]
    async fn live_facts_that_disagree_allow() {
        let cache = blocking();
        let facts = LiveFacts {
            pod: cache.pods.first().cloned(),
            pdbs: vec![],
        };
        let r = FakeReader::new(Fake::Facts(Box::new(facts)));
        let d = decide_confirmed(&cache, &r, "ns", "p", LIVE_CHECK_TIMEOUT).await;
        assert_eq!(reason(&d), Some(AllowReason::LiveDisagreed("no_pdb")));
    }
}
