//! Item 1: two replicas serve (the webhooks reach them through a
//! Service-like round robin) while nodes are drained one by one with
//! several Deployments; the leader is killed with SIGKILL at a random
//! moment, restarted under a new name (a new pod), and the next leader is
//! killed, CHAOS_KILLS times (default 3 in `make test`, 20 in `make chaos`).
//!
//! Figures: kills, drains completed, Deployments left surged (target 0),
//! baselines lost (0), availability violations (0), the longest time
//! without a leader (from a kill to the first renewal by a live replica),
//! and the longest gap between two renewals of the Lease seen by a poller.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use k8s_openapi::api::apps::v1::Deployment;
use kube::api::PostParams;
use kube::Api;

use crate::fleet::*;
use crate::proxy::TcpProxy;
use crate::support::*;

const DEPLOYMENTS: [&str; 3] = ["lc-a", "lc-b", "lc-c"];
const BASELINE: i32 = 3;
const RUN_LABEL: &str = "chaos-run";

fn kills_wanted() -> usize {
    std::env::var("CHAOS_KILLS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(3)
}

/// A pseudo-random duration in [lo, hi) from the clock (no rand crate).
fn random_between(lo: Duration, hi: Duration) -> Duration {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or(0);
    let span = (hi - lo).as_millis() as u64;
    lo + Duration::from_millis(u64::from(nanos.wrapping_mul(2_654_435_761)) % span.max(1))
}

struct KillLog {
    kills: usize,
    leaderless: Vec<Duration>,
}

/// Kills the leader `n` times: waits for a leader among the live replicas,
/// waits a random 1-6 s, SIGKILLs it, starts it again under a new name, and
/// measures the time until a live replica renews the Lease.
async fn killer(
    client: kube::Client,
    replicas: Arc<Mutex<Vec<Replica>>>,
    n: usize,
    stop: Arc<AtomicBool>,
) -> KillLog {
    let mut log = KillLog {
        kills: 0,
        leaderless: Vec::new(),
    };
    let names = |r: &Arc<Mutex<Vec<Replica>>>| -> Vec<String> {
        r.lock()
            .expect("replicas")
            .iter()
            .map(|x| x.name.clone())
            .collect()
    };
    while log.kills < n && !stop.load(Ordering::Relaxed) {
        let leader = wait_leader(&client, &names(&replicas), Duration::from_secs(60)).await;
        tokio::time::sleep(random_between(
            Duration::from_secs(1),
            Duration::from_secs(6),
        ))
        .await;
        let (holder, _) = lease(&client).await;
        if holder != leader {
            continue; // it changed hands meanwhile; pick the new one next round
        }
        let killed_at_wall = k8s_openapi::jiff::Timestamp::now();
        let killed_at = Instant::now();
        {
            let mut rs = replicas.lock().expect("replicas");
            let Some(r) = rs.iter_mut().find(|r| r.name == holder) else {
                continue;
            };
            r.kill9();
            log.kills += 1;
            let next = format!("{}-{}", r.slot, log.kills);
            r.restart_as(&next);
        }
        // A leader again: a live replica holds the Lease and renewed it after the kill.
        let gap = wait_for(
            "a new leader after the kill",
            Duration::from_secs(60),
            || {
                let (client, replicas) = (client.clone(), replicas.clone());
                let holder = holder.clone();
                async move {
                    let live = names(&replicas);
                    let (h, renewed) = lease(&client).await;
                    (h != holder
                        && live.contains(&h)
                        && renewed.is_some_and(|t| t > killed_at_wall))
                    .then(|| killed_at.elapsed())
                }
            },
        )
        .await;
        log.leaderless.push(gap);
    }
    log
}

/// Polls the Lease every 200 ms; returns the longest gap between two
/// successive renewTimes (an upper bound of a time without a leader).
async fn renewal_gaps(client: kube::Client, stop: Arc<AtomicBool>) -> Duration {
    let mut last = None;
    let mut longest = Duration::ZERO;
    while !stop.load(Ordering::Relaxed) {
        if let (_, Some(t)) = lease(&client).await {
            if let Some(prev) = last {
                if t > prev {
                    let d = t.duration_since(prev).unsigned_abs();
                    longest = longest.max(d);
                }
            }
            last = Some(t);
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    longest
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn leader_killed_repeatedly_during_node_drains() {
    let _g = nodes_lock().await;
    let n_kills = kills_wanted();
    let wh = WebhookInfo::get();
    let ns = TestNs::new("chaos-leader").await;
    let deps: Api<Deployment> = ns.api();
    for name in DEPLOYMENTS {
        let mut d = spread_one_per_node(deployment(name, BASELINE, None));
        if let Some(l) = d
            .spec
            .as_mut()
            .and_then(|s| s.template.metadata.as_mut())
            .and_then(|m| m.labels.as_mut())
        {
            l.insert(RUN_LABEL.into(), "leader".into());
        }
        deps.create(&PostParams::default(), &d)
            .await
            .expect("create");
    }
    for name in DEPLOYMENTS {
        wait_ready(&ns, name, BASELINE as usize).await;
        wait_pdb_blocking(&ns, name, BASELINE).await;
    }

    // Two replicas of our own behind a round robin; the deploy-local server
    // goes (stop_server removes the webhook configurations; re-registered
    // at the proxy).
    stop_server();
    let spec = ReplicaSpec::from_deployed(wh);
    let a = Replica::start(&spec, "lc-r0");
    let b = Replica::start(&spec, "lc-r1");
    a.wait_ready(Duration::from_secs(30));
    b.wait_ready(Duration::from_secs(30));
    let backends: Vec<SocketAddr> = [a.port, b.port]
        .iter()
        .map(|p| SocketAddr::from(([127, 0, 0, 1], *p)))
        .collect();
    let lb = TcpProxy::start(backends);
    register_webhooks(wh, lb.port);
    let replicas = Arc::new(Mutex::new(vec![a, b]));
    let client = client().await;

    let watchers: BTreeMap<&str, AvailabilityWatcher> = DEPLOYMENTS
        .iter()
        .map(|n| (*n, AvailabilityWatcher::start(&ns, n)))
        .collect();
    let stop = Arc::new(AtomicBool::new(false));
    let poller = tokio::spawn(renewal_gaps(client.clone(), stop.clone()));
    let kill_task = tokio::spawn(killer(
        client.clone(),
        replicas.clone(),
        n_kills,
        stop.clone(),
    ));

    // Drains, node after node, until every kill happened (and at least one
    // round over the 3 nodes). Bounded: each kill costs at most a Lease
    // expiry and a restart, each drain at most its own timeout.
    let started = Instant::now();
    let budget = Duration::from_secs(90 + 40 * n_kills as u64);
    let selector = format!("{RUN_LABEL}=leader");
    let mut drains = Vec::new();
    let mut failed_drains = Vec::new();
    while drains.len() + failed_drains.len() < NODE_NAMES.len() || !kill_task.is_finished() {
        assert!(
            started.elapsed() < budget,
            "chaos loop over its {budget:?} bound: {} drains, kill task finished: {}",
            drains.len(),
            kill_task.is_finished()
        );
        let node = NODE_NAMES[(drains.len() + failed_drains.len()) % NODE_NAMES.len()];
        let run = drain_node(node, &selector, &["--timeout=120s"]).await;
        if run.ok {
            drains.push(run.took);
        } else {
            failed_drains.push(format!("{node}: {}", run.output));
        }
        tokio::time::sleep(Duration::from_secs(2)).await;
        uncordon(node);
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    let kills = kill_task.await.expect("killer");
    let loop_took = started.elapsed();

    // Settle: every Deployment back at its baseline without markers.
    let mut left_surged = Vec::new();
    let mut baseline_lost = Vec::new();
    for name in DEPLOYMENTS {
        let deadline = Instant::now() + Duration::from_secs(90);
        let mut state = deployment_state(&ns, name).await;
        while state != (BASELINE, Some(false)) && Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(500)).await;
            state = deployment_state(&ns, name).await;
        }
        match state {
            (BASELINE, Some(false)) => {}
            (_, Some(false)) => baseline_lost.push(format!("{name}: {state:?}")),
            _ => left_surged.push(format!("{name}: {state:?}")),
        }
    }
    let mut violations = Vec::new();
    let mut mins = Vec::new();
    for (name, w) in watchers {
        let min = w.finish().await;
        mins.push(min);
        if min < BASELINE as usize {
            violations.push(format!("{name}: {min} Ready"));
        }
    }
    stop.store(true, Ordering::Relaxed);
    let longest_gap = poller.await.expect("poller");
    let longest_leaderless = kills.leaderless.iter().max().copied().unwrap_or_default();
    let longest_drain = drains.iter().max().copied().unwrap_or_default();
    let surges = event_total(&ns.name, "SurgeStarted");
    let reverts = event_total(&ns.name, "SurgeReverted");
    record_figure(format!(
        "leader chaos: {} SIGKILLs of the leader (wanted {n_kills}) in {:.0}s, {} drains completed ({} failed, longest {:.1}s; {surges} SurgeStarted, {reverts} SurgeReverted Events), Deployments left surged {}, baselines lost {}, availability violations {} (min Ready {mins:?} of {BASELINE}), longest time without a leader {:.1}s (kill to first renewal by a live replica; all: {:?}), longest gap between Lease renewals {:.1}s",
        kills.kills,
        loop_took.as_secs_f64(),
        drains.len(),
        failed_drains.len(),
        longest_drain.as_secs_f64(),
        left_surged.len(),
        baseline_lost.len(),
        violations.len(),
        longest_leaderless.as_secs_f64(),
        kills.leaderless.iter().map(|d| format!("{:.1}", d.as_secs_f64())).collect::<Vec<_>>(),
        longest_gap.as_secs_f64(),
    ));
    let logs: String = replicas
        .lock()
        .expect("replicas")
        .iter()
        .map(|r| format!("--- {}\n{}", r.slot, tail(&r.log(), 15)))
        .collect();
    drop(replicas);
    drop(lb);
    let _ = restart_server(&[]);
    assert_eq!(kills.kills, n_kills, "every kill happened");
    assert!(
        failed_drains.is_empty(),
        "failed drains:\n{failed_drains:#?}\n{logs}"
    );
    assert!(
        left_surged.is_empty(),
        "left surged: {left_surged:?}\n{logs}"
    );
    assert!(
        baseline_lost.is_empty(),
        "baselines lost: {baseline_lost:?}"
    );
    assert!(
        violations.is_empty(),
        "availability violations: {violations:?}"
    );
    assert!(surges >= 1, "the drains needed surges");
    // SIGKILL releases nothing: the next leader waits for the Lease to
    // expire (15 s) and retries every 2 s; a restart must not stretch that.
    assert!(
        longest_leaderless < Duration::from_secs(25),
        "longest time without a leader {longest_leaderless:?}"
    );
}
