//! Item 3: the link between one replica and the apiserver paused, then cut
//! (a TCP proxy in between; the apiserver still reaches the webhook
//! directly). The webhook keeps answering within its timeout and fails
//! open; the leader steps down before its Lease can expire; the other
//! replica takes over; when the link comes back, no write is lost or
//! doubled (a write held in the proxy reaches the apiserver late).

use std::net::SocketAddr;
use std::process::Command;
use std::time::{Duration, Instant};

use k8s_openapi::jiff::Timestamp;

use crate::fleet::*;
use crate::proxy::{Mode, TcpProxy};
use crate::support::*;

/// The webhooks' timeoutSeconds in manifests/webhooks.yaml.
const WEBHOOK_TIMEOUT: Duration = Duration::from_secs(10);

/// Sends a dry-run eviction review for `pod` to the replica on `port`;
/// returns (allowed, HTTP-level code of the answer, seconds taken).
fn review(ca: &std::path::Path, port: u16, ns: &str, pod: &str) -> (bool, i64, f64) {
    let body = serde_json::json!({
        "apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
        "request": {
            "uid": format!("slow-{pod}"),
            "kind": {"group": "policy", "version": "v1", "kind": "Eviction"},
            "resource": {"group": "", "version": "v1", "resource": "pods"},
            "subResource": "eviction", "name": pod, "namespace": ns,
            "operation": "CREATE", "userInfo": {"username": "chaos"},
            "object": {"apiVersion": "policy/v1", "kind": "Eviction",
                       "metadata": {"name": pod, "namespace": ns}},
            "dryRun": true
        }
    });
    let t0 = Instant::now();
    let out = Command::new("curl")
        .args([
            "-sS",
            "--max-time",
            "10",
            "-H",
            "content-type: application/json",
            "--cacert",
        ])
        .arg(ca)
        .args(["--data-binary", &body.to_string()])
        .arg(format!("https://127.0.0.1:{port}/validate/evictions"))
        .output()
        .expect("curl");
    let took = t0.elapsed().as_secs_f64();
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "no AdmissionReview in {took:.1}s ({e}): {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
    });
    let r = &v["response"];
    (
        r["allowed"] == true,
        r["status"]["code"].as_i64().unwrap_or(200),
        took,
    )
}

/// The local control plane's apiserver (tests/cluster/up.sh's env file).
pub fn apiserver_addr() -> SocketAddr {
    std::fs::read_to_string(cluster_dir().join("env"))
        .expect("env")
        .lines()
        .find_map(|l| l.strip_prefix("export EA_APISERVER_URL=https://"))
        .expect("EA_APISERVER_URL")
        .trim()
        .parse()
        .expect("apiserver address")
}

/// A copy of the replica kubeconfig whose server is the proxy.
pub fn proxied_kubeconfig(spec: &ReplicaSpec, proxy_port: u16) -> std::path::PathBuf {
    let text = std::fs::read_to_string(&spec.kubeconfig).expect("kubeconfig");
    let server = text
        .lines()
        .find_map(|l| l.trim().strip_prefix("server: "))
        .expect("server line")
        .to_string();
    let path = spec.log_dir.join("proxied.kubeconfig");
    std::fs::write(
        &path,
        text.replace(&server, &format!("https://127.0.0.1:{proxy_port}")),
    )
    .expect("write kubeconfig");
    path
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_paused_apiserver_link_fails_open_steps_down_and_loses_no_write() {
    let _g = nodes_lock().await;
    let wh = WebhookInfo::get();
    stop_server();
    let client = client().await;
    let link = TcpProxy::start(vec![apiserver_addr()]);
    let spec = ReplicaSpec::from_deployed(wh);
    let mut slow_spec = spec.clone();
    slow_spec.kubeconfig = proxied_kubeconfig(&spec, link.port);
    // The proxied replica starts first and leads; the other one waits.
    let slow = start_leading(&client, &slow_spec, "slow-r").await;
    let direct = Replica::start(&spec, "direct-r");
    direct.wait_ready(Duration::from_secs(30));
    register_webhooks(wh, slow.port);

    let ns = TestNs::new("chaos-slow").await;
    let on_node = blocked_on_node(&ns, "sld", "kwok-node-0").await;
    let pod = on_node[0].metadata.name.clone().expect("pod name");
    // With the link up the budget blocks: a 429.
    let (allowed, code, _) = review(&spec.ca, slow.port, &ns.name, &pod);
    assert_eq!(
        (allowed, code),
        (false, 429),
        "the budget blocks with the link up"
    );

    // Pause the link right after the cordon, so the leader's surge write
    // may be held in the proxy mid-flight.
    let watcher = AvailabilityWatcher::start(&ns, "sld");
    kubectl_ok(&["cordon", "kwok-node-0"]);
    tokio::time::sleep(Duration::from_millis(300)).await;
    let (holder, renewed_before) = lease(&client).await;
    assert_eq!(
        holder, slow.name,
        "the proxied replica leads when the link is held"
    );
    let held_at = Instant::now();
    let held_wall = Timestamp::now();
    link.set_mode(Mode::Hold);

    // The webhook answers in time and fails open while held; the leader
    // steps down at its renew deadline (10 s after its last renewal that
    // reached the apiserver), before the Lease (15 s) lets the other take over.
    let mut held_answers = Vec::new();
    let mut last_review: Option<Instant> = None;
    let mut last_slow_renewal = renewed_before;
    let mut stepped_down = None;
    let mut taken_over = None;
    while held_at.elapsed() < Duration::from_secs(22) {
        let (h, renewed) = lease(&client).await;
        if h == slow.name && renewed.is_some() {
            last_slow_renewal = renewed;
        }
        if taken_over.is_none() && h == direct.name {
            taken_over = Some(held_at.elapsed());
        }
        if stepped_down.is_none() && slow.metric("eviction_autoscaler_leader") == Some(0.0) {
            stepped_down = Some(held_at.elapsed());
        }
        if last_review.is_none_or(|t| t.elapsed() > Duration::from_millis(500)) {
            last_review = Some(Instant::now());
            let (ca, port, ns, pod) = (spec.ca.clone(), slow.port, ns.name.clone(), pod.clone());
            held_answers.push(
                tokio::task::spawn_blocking(move || review(&ca, port, &ns, &pod))
                    .await
                    .expect("review"),
            );
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // Seen by a poll every ~0.2 s: an upper bound.
    // The times of record are the replicas' own log lines: this loop looks
    // only between its webhook calls (up to 1.5 s apart on one loaded core).
    let stepped_wall = leadership_logged(&slow.log(), false, held_wall);
    let taken_wall = leadership_logged(&direct.log(), true, held_wall);
    let renew_age_at_stepdown = last_slow_renewal
        .zip(stepped_wall)
        .map(|(r, s)| s.duration_since(r).as_secs_f64());
    link.set_mode(Mode::Forward);
    let resumed = Instant::now();

    // The surge is applied once, by whichever replica led when it was due,
    // and stays exactly as the markers say after the late bytes arrive.
    wait_deployment(
        &ns,
        "sld",
        3 + on_node.len() as i32,
        true,
        Duration::from_secs(30),
    )
    .await;
    tokio::time::sleep(Duration::from_secs(5)).await;
    let after_resume = deployment_state(&ns, "sld").await;

    // Cut: open connections closed, new ones refused; answers still in time.
    link.set_mode(Mode::Drop);
    let cut_at = Instant::now();
    let mut cut_answers = Vec::new();
    while cut_at.elapsed() < Duration::from_secs(8) {
        cut_answers.push(review(&spec.ca, slow.port, &ns.name, &pod));
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    link.set_mode(Mode::Forward);

    let drain = drain_node("kwok-node-0", "app=sld", &["--timeout=120s"]).await;
    uncordon("kwok-node-0");
    assert_settled_at(&ns, "sld", 3, Duration::from_secs(90)).await;
    let min_ready = watcher.finish().await;
    let started = event_total(&ns.name, "SurgeStarted");
    let surged_by = kubectl_ok(&[
        "get",
        "events.events.k8s.io",
        "-n",
        &ns.name,
        "-o",
        "jsonpath={range .items[?(@.reason==\"SurgeStarted\")]}{.reportingInstance}{\" \"}{end}",
    ]);
    let reverted = event_total(&ns.name, "SurgeReverted");
    let worst = |a: &[(bool, i64, f64)]| a.iter().map(|x| x.2).fold(0.0, f64::max);
    let all_allowed = |a: &[(bool, i64, f64)]| a.iter().all(|x| x.0);
    record_figure(format!(
        "apiserver link held {:.0}s: {} webhook answers, all allowed: {}, slowest {:.2}s (timeout {}s); leader stepped down {:?} after the hold (seen {:?}s after its last renewal in the Lease; renew deadline 10s, Lease 15s), other replica leading {:?} after; resumed: surge at {:?} in {:.1}s; link cut 8s: {} answers, all allowed: {}, slowest {:.2}s; drain ok {}, min Ready {min_ready}/3, SurgeStarted {started} (by {surged_by}), SurgeReverted {reverted}",
        (resumed - held_at).as_secs_f64(),
        held_answers.len(),
        all_allowed(&held_answers),
        worst(&held_answers),
        WEBHOOK_TIMEOUT.as_secs(),
        stepped_down,
        renew_age_at_stepdown.map(|s| format!("{s:.1}")),
        taken_over,
        after_resume,
        resumed.elapsed().as_secs_f64(),
        cut_answers.len(),
        all_allowed(&cut_answers),
        worst(&cut_answers),
        drain.ok,
    ));
    let slow_log = tail(&slow.log(), 20);
    drop(slow);
    drop(direct);
    drop(link);
    let _ = restart_server(&[]);
    assert!(
        all_allowed(&held_answers) && all_allowed(&cut_answers),
        "fail open"
    );
    assert!(
        worst(&held_answers) < WEBHOOK_TIMEOUT.as_secs_f64()
            && worst(&cut_answers) < WEBHOOK_TIMEOUT.as_secs_f64(),
        "answers within the webhook timeout"
    );
    let (down, up) = (
        stepped_wall.expect("the held leader logged its step-down"),
        taken_wall.expect("the other replica logged its takeover"),
    );
    assert!(
        down < up,
        "stepped down ({down:?}) before the takeover ({up:?}):\n{slow_log}"
    );
    let age = renew_age_at_stepdown.expect("renewal and step-down seen");
    assert!(
        age < 11.0,
        "stepped down {age:.1}s after its last renewal: past the 10 s renew deadline:\n{slow_log}"
    );
    assert_eq!(
        after_resume,
        (3 + on_node.len() as i32, Some(true)),
        "one surge, as the markers say"
    );
    assert!(drain.ok, "{}", drain.output);
    assert!(min_ready >= 3, "availability: {min_ready} Ready < 3");
    assert_eq!((started, reverted), (1, 1), "{}", event_log(&ns.name));
}
