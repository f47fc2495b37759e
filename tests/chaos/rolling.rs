//! Item 5: a rolling restart of both replicas (SIGTERM) and 10 certificate
//! rotations while a steady admission load runs: zero failed requests.

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use crate::fleet::*;
use crate::load::Load;
use crate::support::*;

/// A CA and a serving certificate for 127.0.0.1 with this serial, written
/// with rename so the server never reads half a file.
fn issue(dir: &Path, serial: u32) {
    let run = |args: &[&str]| {
        let out = Command::new("openssl")
            .args(args)
            .current_dir(dir)
            .output()
            .expect("openssl");
        assert!(
            out.status.success(),
            "openssl {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    };
    if !dir.join("ca.key").exists() {
        run(&[
            "req",
            "-x509",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:prime256v1",
            "-nodes",
            "-keyout",
            "ca.key",
            "-out",
            "ca.crt",
            "-days",
            "2",
            "-subj",
            "/CN=chaos-ca",
        ]);
        std::fs::write(
            dir.join("leaf.ext"),
            "basicConstraints=critical,CA:FALSE\nkeyUsage=critical,digitalSignature\nextendedKeyUsage=serverAuth\nsubjectAltName=IP:127.0.0.1\n",
        )
        .expect("ext");
    }
    let (key, crt) = (format!("new-{serial}.key"), format!("new-{serial}.crt"));
    run(&[
        "req",
        "-newkey",
        "ec",
        "-pkeyopt",
        "ec_paramgen_curve:prime256v1",
        "-nodes",
        "-keyout",
        &key,
        "-out",
        "leaf.csr",
        "-subj",
        "/CN=chaos-webhook",
    ]);
    run(&[
        "x509",
        "-req",
        "-in",
        "leaf.csr",
        "-CA",
        "ca.crt",
        "-CAkey",
        "ca.key",
        "-set_serial",
        &serial.to_string(),
        "-days",
        "2",
        "-extfile",
        "leaf.ext",
        "-out",
        &crt,
    ]);
    // Key first, then certificate: in between the pair does not match and
    // the server keeps the old one (tls.rs).
    std::fs::rename(dir.join(&key), dir.join("tls.key")).expect("rename key");
    std::fs::rename(dir.join(&crt), dir.join("tls.crt")).expect("rename cert");
}

/// The serial of the certificate a replica serves (openssl s_client).
fn served_serial(port: u16) -> String {
    let out = Command::new("sh")
        .arg("-c")
        .arg(format!(
            "timeout 10 openssl s_client -connect 127.0.0.1:{port} </dev/null 2>/dev/null | openssl x509 -noout -serial"
        ))
        .output()
        .expect("s_client");
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn rolling_restart_and_cert_rotations_under_load_fail_no_request() {
    let _g = nodes_lock().await;
    let wh = WebhookInfo::get();
    // The replicas of this test lead among themselves.
    stop_server();
    let certs = cluster_dir().join("chaos-certs");
    let _ = std::fs::remove_dir_all(&certs);
    std::fs::create_dir_all(&certs).expect("certs dir");
    issue(&certs, 1);
    let mut spec = ReplicaSpec::from_deployed(wh);
    spec.cert = certs.join("tls.crt");
    spec.key = certs.join("tls.key");
    spec.ca = certs.join("ca.crt");
    let mut a = Replica::start(&spec, "roll-a");
    let mut b = Replica::start(&spec, "roll-b");
    a.wait_ready(Duration::from_secs(30));
    b.wait_ready(Duration::from_secs(30));
    let client = client().await;
    let leader = wait_leader(
        &client,
        &[a.name.clone(), b.name.clone()],
        Duration::from_secs(30),
    )
    .await;

    let ca = std::fs::read(certs.join("ca.crt")).expect("ca");
    let load = Load::start(&[a.port, b.port], &ca, 40, 4);
    tokio::time::sleep(Duration::from_secs(3)).await;

    // Rolling restart, the leader first: SIGTERM, wait for the exit, start
    // again, wait until ready, then the other one.
    let mut shutdowns = Vec::new();
    let mut handovers = Vec::new();
    let mut draining_seen = Vec::new();
    for (i, r) in [&mut a, &mut b].into_iter().enumerate() {
        let was_leader = r.name == lease(&client).await.0;
        let t0 = Instant::now();
        r.signal("-TERM");
        if was_leader {
            let old = r.name.clone();
            let took = wait_for("the Lease handed over", Duration::from_secs(14), || {
                let client = client.clone();
                let old = old.clone();
                async move {
                    let (h, _) = lease(&client).await;
                    (!h.is_empty() && h != old).then(|| t0.elapsed())
                }
            })
            .await;
            handovers.push(took);
        }
        let status = r.wait_exit(Duration::from_secs(30));
        assert!(
            status.is_some_and(|s| s.success()),
            "{} did not exit cleanly within 30 s of SIGTERM ({status:?}):\n{}",
            r.name,
            tail(&r.log(), 20)
        );
        shutdowns.push(t0.elapsed());
        draining_seen.push(
            load.targets[i]
                .saw_draining
                .load(std::sync::atomic::Ordering::Relaxed),
        );
        r.restart_as(&format!("{}-2", r.slot));
        r.wait_ready(Duration::from_secs(30));
        tokio::time::sleep(Duration::from_secs(2)).await;
    }
    let after_restarts = load.sent();

    // 10 rotations, one every 1.5 s (the replicas re-read every 1 s).
    for serial in 2..=11 {
        issue(&certs, serial);
        tokio::time::sleep(Duration::from_millis(1500)).await;
    }
    tokio::time::sleep(Duration::from_secs(2)).await;
    let serials = (served_serial(a.port), served_serial(b.port));
    let stats = load.finish().await;
    let rotation_requests = stats.sent - after_restarts;
    record_figure(format!(
        "rolling restart + 10 cert rotations under load (40 req/s): {} requests ({} during the rotations), {} ok, {} failed, per replica {:?}; SIGTERM to exit {:?}; Lease handed over {:?} after SIGTERM of the leader ({leader})",
        stats.sent,
        rotation_requests,
        stats.ok,
        stats.failures.len(),
        stats.per_target,
        shutdowns.iter().map(|d| format!("{:.1}s", d.as_secs_f64())).collect::<Vec<_>>(),
        handovers.iter().map(|d| format!("{:.1}s", d.as_secs_f64())).collect::<Vec<_>>(),
    ));
    let _ = restart_server(&[]);
    assert_eq!(
        serials,
        ("serial=0B".to_string(), "serial=0B".to_string()),
        "both replicas serve the last certificate (serial 11)"
    );
    // The first leader hands over to the other replica, which leads when
    // its own turn comes: both handovers before the Lease (15 s) could
    // expire (an expiry takes 15 s and more; a release, a retry of 2 s and
    // a poll, which take longer under this load on 2 cores).
    assert!(
        !handovers.is_empty() && handovers.iter().all(|d| *d < Duration::from_secs(10)),
        "Lease released on SIGTERM: {handovers:?}"
    );
    assert!(
        stats.failures.is_empty(),
        "{} of {} requests failed:\n{}",
        stats.failures.len(),
        stats.sent,
        stats.failures.join("\n")
    );
    assert!(stats.sent > 500, "a real load: {} requests", stats.sent);
    assert!(
        stats.per_target.iter().all(|&n| n > 100),
        "both replicas served: {:?}",
        stats.per_target
    );
    assert_eq!(stats.no_ready_replica, 0, "one replica was always ready");
    assert_eq!(
        draining_seen,
        [true, true],
        "/readyz answered 503 'shutting down' between SIGTERM and the exit"
    );
}
