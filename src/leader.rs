//! Leader election on a coordination.k8s.io Lease: every replica serves the
//! webhooks; only the holder of the Lease runs the controllers. A leader that
//! cannot renew steps down before its lease can expire, so two replicas never
//! write at once.

use std::time::{Duration, Instant};

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use k8s_openapi::jiff::{SignedDuration, Timestamp};
use kube::api::PostParams;
use kube::Api;
use tokio::sync::watch;

use crate::metrics::Metrics;

#[derive(Clone)]
pub struct Election {
    pub api: Api<Lease>,
    pub name: String,
    pub identity: String,
    pub lease_duration: Duration,
    pub renew_every: Duration,
}

/// The pure part: may `me` take or keep this lease at `now`?
pub fn can_hold(spec: &LeaseSpec, me: &str, now: Timestamp) -> bool {
    match spec.holder_identity.as_deref() {
        None | Some("") => true,
        Some(h) if h == me => true,
        Some(_) => {
            let duration = i64::from(spec.lease_duration_seconds.unwrap_or(15));
            match spec.renew_time.as_ref().or(spec.acquire_time.as_ref()) {
                // A lease never renewed is free.
                None => true,
                Some(MicroTime(t)) => *t + SignedDuration::from_secs(duration) < now,
            }
        }
    }
}

impl Election {
    fn spec(&self, previous: Option<&LeaseSpec>, now: Timestamp) -> LeaseSpec {
        let same_holder = previous
            .and_then(|p| p.holder_identity.as_deref())
            .is_some_and(|h| h == self.identity);
        let transitions = previous.and_then(|p| p.lease_transitions).unwrap_or(0);
        LeaseSpec {
            holder_identity: Some(self.identity.clone()),
            lease_duration_seconds: Some(self.lease_duration.as_secs() as i32),
            acquire_time: if same_holder {
                previous.and_then(|p| p.acquire_time.clone())
            } else {
                Some(MicroTime(now))
            },
            renew_time: Some(MicroTime(now)),
            lease_transitions: Some(if same_holder {
                transitions
            } else {
                transitions + 1
            }),
            ..Default::default()
        }
    }

    /// One round: Ok(true) while we hold the lease.
    pub async fn try_hold(&self) -> Result<bool, kube::Error> {
        let now = Timestamp::now();
        match self.api.get_opt(&self.name).await? {
            None => {
                let lease = Lease {
                    metadata: ObjectMeta {
                        name: Some(self.name.clone()),
                        ..Default::default()
                    },
                    spec: Some(self.spec(None, now)),
                };
                match self.api.create(&PostParams::default(), &lease).await {
                    Ok(_) => Ok(true),
                    Err(kube::Error::Api(s)) if s.code == 409 => Ok(false),
                    Err(e) => Err(e),
                }
            }
            Some(mut lease) => {
                let spec = lease.spec.clone().unwrap_or_default();
                if !can_hold(&spec, &self.identity, now) {
                    return Ok(false);
                }
                lease.spec = Some(self.spec(Some(&spec), now));
                // replace carries the resourceVersion: a concurrent taker wins, we lose.
                match self
                    .api
                    .replace(&self.name, &PostParams::default(), &lease)
                    .await
                {
                    Ok(_) => Ok(true),
                    Err(kube::Error::Api(s)) if s.code == 409 => Ok(false),
                    Err(e) => Err(e),
                }
            }
        }
    }

    /// On shutdown: give the lease up so another replica takes over at once
    /// instead of after its expiry.
    pub async fn release(&self) {
        let Ok(Some(mut lease)) = self.api.get_opt(&self.name).await else {
            return;
        };
        let mine = lease
            .spec
            .as_ref()
            .and_then(|s| s.holder_identity.as_deref())
            .is_some_and(|h| h == self.identity);
        if !mine {
            return;
        }
        if let Some(spec) = lease.spec.as_mut() {
            spec.holder_identity = None;
            spec.renew_time = None;
            spec.acquire_time = None;
        }
        match self
            .api
            .replace(&self.name, &PostParams::default(), &lease)
            .await
        {
            Ok(_) => tracing::info!(identity = %self.identity, "lease released"),
            Err(e) => tracing::warn!(error = %e, "lease not released"),
        }
    }

    pub async fn run(self, tx: watch::Sender<bool>, metrics: std::sync::Arc<Metrics>) {
        let mut last_renewed: Option<Instant> = None;
        loop {
            let holding = match self.try_hold().await {
                Ok(true) => {
                    last_renewed = Some(Instant::now());
                    true
                }
                Ok(false) => false,
                Err(e) => {
                    tracing::warn!(error = %e, "lease not renewed");
                    // Keep leading only while our last renewal is surely still valid.
                    last_renewed.is_some_and(|t| t.elapsed() < self.lease_duration / 2)
                }
            };
            if holding != *tx.borrow() {
                tracing::info!(identity = %self.identity, leading = holding, "leadership changed");
                metrics.leader.set(i64::from(holding));
                let _ = tx.send(holding);
            }
            if !holding {
                last_renewed = None;
            }
            tokio::time::sleep(if holding {
                self.renew_every
            } else {
                self.renew_every.min(Duration::from_secs(2))
            })
            .await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(holder: Option<&str>, renewed_secs_ago: Option<i64>) -> LeaseSpec {
        let now = Timestamp::now();
        LeaseSpec {
            holder_identity: holder.map(str::to_string),
            lease_duration_seconds: Some(15),
            renew_time: renewed_secs_ago.map(|s| MicroTime(now - SignedDuration::from_secs(s))),
            ..Default::default()
        }
    }

    #[test]
    fn who_may_hold() {
        let now = Timestamp::now();
        assert!(can_hold(&spec(None, None), "a", now));
        assert!(can_hold(&spec(Some("a"), Some(1)), "a", now));
        assert!(
            !can_hold(&spec(Some("b"), Some(1)), "a", now),
            "b's lease is fresh"
        );
        assert!(
            can_hold(&spec(Some("b"), Some(30)), "a", now),
            "b's lease expired"
        );
        assert!(can_hold(&spec(Some("b"), None), "a", now));
    }
}
