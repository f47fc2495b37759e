//! Two replicas whose wall clocks are 10 minutes apart (one runs under
//! libfaketime, `FAKETIME=+600s`, its monotonic clock left alone): node
//! clocks in a real cluster disagree, and both the leader Lease and the
//! durable signal (`spec.lastEviction.evictionTime`) carry times written by
//! one replica and read by another (src/leader.rs, src/surge/clock.rs).
//!
//! The replicas run with `EVICTION_HOLD=0`: a blocked eviction is answered
//! 429 at once, so the tests see each refusal.
//!
//! 1. The on-time replica leads; the webhooks reach only the replica ahead.
//!    It refuses an eviction and stamps the signal 10 minutes in the future
//!    (for the leader); the caller gives up and the pod stays, so the signal
//!    keeps it displaced for as long as the leader takes the signal to be
//!    fresh. The Deployment surges and is reverted after the cooldown, not
//!    10 minutes later. The follower ahead never takes the Lease, whose
//!    renewTime looks 10 minutes old to it.
//! 2. The on-time replica stops (SIGTERM releases the Lease) and the replica
//!    ahead leads; the on-time one comes back as a follower and gets the
//!    webhooks. Its stamps look 10 minutes old to the leader: the Deployment
//!    still surges, the retried eviction goes through, the surge is
//!    reverted.
//! 3. The leader ahead is killed (SIGKILL: the Lease keeps a renewTime 10
//!    minutes in the on-time replica's future): the on-time replica takes
//!    the Lease as after any other kill, once it has gone unrenewed for the
//!    lease duration.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use k8s_openapi::jiff::Timestamp;
use kube::api::EvictParams;

use crate::fleet::*;
use crate::set_back::Restore;
use crate::support::*;

const SKEW_SECS: i64 = 600;
const NODE: &str = "kwok-node-0";

/// The last timestamp in a replica's log (tracing stamps each line with
/// the process's wall clock; the log file is appended to across runs).
fn last_log_time(log: &str) -> Option<Timestamp> {
    log.lines()
        .rev()
        .find_map(|l| l.split_whitespace().next()?.parse::<Timestamp>().ok())
}

/// Every holder of the Lease seen, in order, polled every 200 ms.
async fn holders(client: kube::Client, stop: Arc<AtomicBool>, seen: Arc<Mutex<Vec<String>>>) {
    while !stop.load(Ordering::Relaxed) {
        let (h, _) = lease(&client).await;
        {
            let mut s = seen.lock().expect("holders");
            if !h.is_empty() && s.last() != Some(&h) {
                s.push(h);
            }
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Evicts a Ready pod of `app` as a descheduler would (no cordon, so only
/// the durable signal can start the surge), retrying each 429 after 1 s.
/// Returns how many were refused before the eviction went through.
async fn evict_until_allowed(ns: &TestNs, app: &str) -> usize {
    let pods = pods_without_retry(ns).await;
    let victim = a_ready_pod(ns, app).await;
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut refused = 0;
    loop {
        match pods.evict(&victim, &EvictParams::default()).await {
            Ok(_) => return refused,
            Err(kube::Error::Api(e)) if e.code == 429 => refused += 1,
            Err(e) => panic!("evict {victim}: {e}"),
        }
        assert!(
            Instant::now() < deadline,
            "the eviction of {victim} still refused after 60 s ({refused} times): no surge"
        );
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}

/// The `lastEviction.evictionTime` of `app`'s EvictionAutoScaler.
async fn signal_time(ns: &TestNs, app: &str) -> Option<Timestamp> {
    let eas = eas_api(ns);
    let e = eas.get_opt(app).await.ok().flatten()?;
    e.data["spec"]["lastEviction"]["evictionTime"]
        .as_str()?
        .parse()
        .ok()
}

/// Waits for `app`'s signal: the replica that refused writes it within
/// a few seconds of its answer, not before.
async fn wait_signal(ns: &TestNs, app: &str) -> Timestamp {
    wait_for(
        &format!("{app}'s lastEviction"),
        Duration::from_secs(15),
        || signal_time(ns, app),
    )
    .await
}

/// Seconds from `a` to `b` (negative when `b` is earlier).
fn secs_between(a: Timestamp, b: Timestamp) -> i64 {
    b.duration_since(a).as_secs()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn replicas_ten_minutes_apart_surge_revert_and_hand_over_the_lease() {
    let _g = nodes_lock().await;
    let lib = built_tool("FAKETIME_LIB", "faketime");
    let wh = WebhookInfo::get();
    let ns = TestNs::new("chaos-clock").await;
    blocked_on_node(&ns, "sk-a", NODE).await;
    blocked_on_node(&ns, "sk-b", NODE).await;
    let client = client().await;
    // The leader must know each EvictionAutoScaler before its signal comes
    // (a value on an object first seen is as old as its time says).
    for app in ["sk-a", "sk-b"] {
        wait_for(
            &format!("{app}'s EvictionAutoScaler"),
            Duration::from_secs(30),
            || async {
                let eas = eas_api(&ns);
                eas.get_opt(app).await.ok().flatten().map(|_| ())
            },
        )
        .await;
    }

    stop_server();
    // The shared server back however the test ends; declared before the
    // replicas, so dropped after them.
    let _shared = Restore(NODE);
    let mut spec = ReplicaSpec::from_deployed(wh);
    spec.env.push(("EVICTION_HOLD".into(), "0".into()));
    let mut ahead_spec = spec.clone();
    ahead_spec.env.extend(
        [
            ("LD_PRELOAD", lib.to_string_lossy().into_owned()),
            ("FAKETIME", format!("+{SKEW_SECS}s")),
            ("FAKETIME_DONT_FAKE_MONOTONIC", "1".into()),
        ]
        .map(|(k, v)| (k.to_string(), v)),
    );
    let mut on_time = Replica::start(&spec, "sk-on-time");
    on_time.wait_ready(Duration::from_secs(30));
    wait_leader(&client, &["sk-on-time".into()], Duration::from_secs(30)).await;
    let mut ahead = Replica::start(&ahead_spec, "sk-ahead");
    ahead.wait_ready(Duration::from_secs(30));
    // The premise: the replica ahead really runs 10 minutes ahead.
    let started = Timestamp::now();
    let its_time = last_log_time(&ahead.log()).expect("a timestamp in the replica's log");
    let skew = secs_between(started, its_time);
    assert!(
        (SKEW_SECS - 60..=SKEW_SECS + 5).contains(&skew),
        "the replica under libfaketime logs {its_time}, {skew} s from {started}"
    );

    let stop = Arc::new(AtomicBool::new(false));
    let seen = Arc::new(Mutex::new(Vec::new()));
    let poller = tokio::spawn(holders(client.clone(), stop.clone(), seen.clone()));
    let logs = |rs: &[&Replica]| -> String {
        rs.iter()
            .map(|r| format!("--- {}\n{}", r.name, tail(&r.log(), 20)))
            .collect()
    };

    // 1. The follower ahead refuses; the on-time leader surges and reverts
    //    while the refused pod stays.
    register_webhooks(wh, ahead.port);
    let watch_a = AvailabilityWatcher::start(&ns, "sk-a");
    let sample_a = ReplicaSampler::start(&ns, "sk-a");
    let stays = a_ready_pod(&ns, "sk-a").await;
    match pods_without_retry(&ns)
        .await
        .evict(&stays, &EvictParams::default())
        .await
    {
        Err(kube::Error::Api(e)) if e.code == 429 => {}
        other => panic!("the budget allows nothing at 3: want a 429, got {other:?}"),
    }
    let refused_a = Instant::now();
    let stamp_a = wait_signal(&ns, "sk-a").await;
    wait_surged_above(&ns, "sk-a", 3, "the signal of the follower ahead").await;
    assert_settled_at(&ns, "sk-a", 3, Duration::from_secs(90)).await;
    let revert_a = refused_a.elapsed();
    assert!(
        ready_pods(&ns, "sk-a")
            .await
            .iter()
            .any(|p| p.metadata.name.as_deref() == Some(stays.as_str())),
        "the refused pod {stays} stayed"
    );
    let held = seen.lock().expect("holders").clone();
    assert_eq!(
        held,
        vec!["sk-on-time".to_string()],
        "the follower ahead took the Lease\n{}",
        logs(&[&on_time, &ahead])
    );

    // 2. The replica ahead leads; the on-time follower denies.
    on_time.signal("-TERM");
    assert!(
        on_time.wait_exit(Duration::from_secs(20)).is_some(),
        "the on-time replica did not stop on SIGTERM"
    );
    let handover = Instant::now();
    wait_leader(&client, &["sk-ahead".into()], Duration::from_secs(30)).await;
    let handover = handover.elapsed();
    on_time.restart_as("sk-on-time-2");
    on_time.wait_ready(Duration::from_secs(30));
    register_webhooks(wh, on_time.port);
    let watch_b = AvailabilityWatcher::start(&ns, "sk-b");
    let sample_b = ReplicaSampler::start(&ns, "sk-b");
    let refused_b = evict_until_allowed(&ns, "sk-b").await;
    let allowed_b = Instant::now();
    let stamp_b = wait_signal(&ns, "sk-b").await;
    assert_settled_at(&ns, "sk-b", 3, Duration::from_secs(90)).await;
    let revert_b = allowed_b.elapsed();

    // 3. The leader ahead killed: the on-time replica takes over.
    ahead.kill9();
    let killed = Instant::now();
    wait_leader(&client, &["sk-on-time-2".into()], Duration::from_secs(60)).await;
    let takeover = killed.elapsed();
    // One more poll sees the new holder.
    tokio::time::sleep(Duration::from_millis(600)).await;
    stop.store(true, Ordering::Relaxed);
    poller.await.expect("poller");
    let held = seen.lock().expect("holders").clone();
    let min_a = watch_a.finish().await;
    let min_b = watch_b.finish().await;
    let most = |s: Vec<(Instant, i32)>| s.into_iter().map(|(_, n)| n).max().unwrap_or(0);
    let (most_a, most_b) = (most(sample_a.finish().await), most(sample_b.finish().await));
    let now = Timestamp::now();
    record_figure(format!(
        "clock skew (one replica {SKEW_SECS} s ahead): stamp of the follower ahead {} s from now, surged to {most_a}, reverted {:.1} s after the refusal with the refused pod still there; stamp of the on-time follower {} s from now, surged to {most_b}, reverted {:.1} s after its eviction ({refused_b} refused first); Lease handed over on SIGTERM in {:.1} s, taken {:.1} s after the leader ahead was killed; holders {held:?}; min Ready {min_a}, {min_b} of 3",
        secs_between(now, stamp_a),
        revert_a.as_secs_f64(),
        secs_between(now, stamp_b),
        revert_b.as_secs_f64(),
        handover.as_secs_f64(),
        takeover.as_secs_f64(),
    ));
    let all_logs = logs(&[&on_time]);

    assert!(
        secs_between(now, stamp_a) > SKEW_SECS - 120,
        "sk-a's signal was stamped by the replica ahead: {stamp_a}"
    );
    assert!(
        secs_between(now, stamp_b).abs() < 120,
        "sk-b's signal was stamped by the on-time replica: {stamp_b}"
    );
    assert!(
        most_a > 3 && most_b > 3,
        "no surge: sk-a at most {most_a}, sk-b at most {most_b}"
    );
    assert!(refused_b >= 1, "sk-b's budget refused before its surge");
    assert_eq!(
        held,
        ["sk-on-time", "sk-ahead", "sk-on-time-2"].map(String::from),
        "the Lease changed hands only at the SIGTERM and the kill\n{all_logs}"
    );
    // SIGKILL releases nothing: 15 s of lease, then a retry every 2 s (the
    // leader chaos test's bound).
    assert!(
        takeover < Duration::from_secs(25),
        "the on-time replica took {takeover:?} to take a Lease renewed 10 minutes in its future"
    );
    assert!(
        min_a >= 3 && min_b >= 3,
        "Ready pods went down to {min_a}, {min_b}"
    );
}
