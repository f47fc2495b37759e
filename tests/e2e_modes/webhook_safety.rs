//! Safety invariants of the eviction webhook against the local control plane:
//! broken watches fail open (and /readyz says so), the server runs as
//! manifests/deployment.yaml runs it with client certificates, and a missing
//! CRD is reported once. These restart the apiserver or the server, so they
//! live here (serial) rather than in tests/e2e.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use k8s_openapi::api::admissionregistration::v1::ValidatingWebhookConfiguration;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{Container, Pod};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::api::{DeleteParams, EvictParams, PostParams};
use kube::Api;

use super::support::*;

/// tests/cluster/restart-apiserver.sh with `extra` flags; returns its seconds away.
fn restart_apiserver(extra: &[&str]) -> f64 {
    let out = Command::new(repo().join("tests/cluster/restart-apiserver.sh"))
        .args(extra)
        .env("CLUSTER_DIR", cluster_dir())
        .output()
        .expect("run restart-apiserver.sh");
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    assert!(
        out.status.success(),
        "restart-apiserver.sh failed:\n{text}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    text.lines()
        .find_map(|l| l.strip_prefix("restart-apiserver.sh: ready again after "))
        .and_then(|s| s.trim().trim_end_matches('s').parse().ok())
        .unwrap_or(0.0)
}

/// GET over HTTPS as the kubelet probes: no client certificate, server
/// certificate not verified. Returns (code, body); 0 means no HTTP answer.
pub(crate) fn probe(port: u16, path: &str) -> (u16, String) {
    let out = Command::new("curl")
        .args(["-sk", "-m", "5", "-w", "\n%{http_code}"])
        .arg(format!("https://127.0.0.1:{port}{path}"))
        .output()
        .expect("curl");
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    let (body, code) = text.rsplit_once('\n').unwrap_or(("", "0"));
    (code.trim().parse().unwrap_or(0), body.to_string())
}

/// A Deployment the product never makes a PDB for (opt-out annotation), so
/// the only PDB over its pods is the user's.
fn opted_out_deployment(name: &str, replicas: i32, node: Option<&str>) -> Deployment {
    let mut d = deployment(name, replicas, node);
    d.metadata.annotations = Some(
        [(
            "eviction-autoscaler.azure.com/pdb-create".to_string(),
            "false".to_string(),
        )]
        .into(),
    );
    d
}

/// The admin client without kube-client's default retry of 429/503/504
/// (up to 15 attempts over minutes): a 429 is what these tests look at.
async fn no_retry_client() -> kube::Client {
    let path = cluster_dir().join("kubeconfig");
    let kc = kube::config::Kubeconfig::read_from(&path).expect("kubeconfig");
    let mut cfg =
        kube::Config::from_custom_kubeconfig(kc, &kube::config::KubeConfigOptions::default())
            .await
            .expect("kubeconfig");
    cfg.default_retry = false;
    cfg.read_timeout = Some(Duration::from_secs(60));
    kube::Client::try_from(cfg).expect("client")
}

/// A dry-run eviction, answered at once; Err carries the apiserver's answer.
async fn dry_run_evict(ns: &TestNs, pod: &str) -> Result<(), kube::core::Status> {
    let pods: Api<Pod> = Api::namespaced(no_retry_client().await, &ns.name);
    let params = EvictParams {
        delete_options: Some(DeleteParams {
            dry_run: true,
            ..Default::default()
        }),
        post_options: PostParams {
            dry_run: true,
            ..Default::default()
        },
    };
    match pods.evict(pod, &params).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(s)) => Err(*s),
        Err(e) => panic!("eviction request failed: {e}"),
    }
}

/// A blocking user PDB, the product's watches broken (its ClusterRoleBinding
/// deleted, the apiserver restarted so every watch must be re-established),
/// the PDB deleted meanwhile: the product must not keep answering 429 from
/// its frozen caches. /readyz goes 503 naming the stale stores, the drain
/// completes, and readiness returns once RBAC is back.
#[tokio::test]
async fn broken_watches_fail_open_and_the_drain_completes() {
    let t0 = Instant::now();
    let step = |what: &str| eprintln!("[{:6.1}s] {what}", t0.elapsed().as_secs_f64());
    let _g = nodes_lock().await;
    step("nodes lock");
    let wh = restart_server(&[("WATCH_STALE_AFTER", "5s")]);
    let ns = TestNs::new("e2e-stale").await;
    step("namespace");
    let deps: Api<Deployment> = ns.api();
    deps.create(
        &PostParams::default(),
        &opted_out_deployment("blk", 2, Some("kwok-node-2")),
    )
    .await
    .unwrap();
    let pdbs: Api<PodDisruptionBudget> = ns.api();
    pdbs.create(
        &PostParams::default(),
        &user_pdb("blk-user", "blk", Some(IntOrString::Int(2)), None),
    )
    .await
    .unwrap();
    let pods = wait_ready(&ns, "blk", 2).await;
    step("pods ready");
    wait_pdb(&ns, "blk-user", "user PDB blocks", |p| {
        p.status
            .as_ref()
            .is_some_and(|s| s.current_healthy == 2 && s.disruptions_allowed == 0)
    })
    .await;
    // While the watches work, the product answers the 429 itself.
    let victim = pods[0].metadata.name.clone().unwrap();
    let msg = wait_for(
        "the product's 429 on the blocked pod",
        Duration::from_secs(30),
        || async {
            match dry_run_evict(&ns, &victim).await {
                Err(s) if s.code == 429 && s.message.contains("eviction-autoscaler") => {
                    Some(s.message)
                }
                _ => None,
            }
        },
    )
    .await;
    assert!(msg.contains("blk-user"), "{msg}");
    step("product answers 429");

    let _restore = ApplyOnDrop::manifest("manifests/rbac.yaml");
    kubectl_ok(&["delete", "clusterrolebinding", "eviction-autoscaler"]);
    let away = restart_apiserver(&[]);
    let back = Instant::now();
    step("apiserver restarted");
    // Deleted while the product cannot see it. (Relaxing minAvailable would
    // wait on kube-controller-manager's disruption controller, whose own
    // watches take a while to come back after the restart: seen 60 s+.)
    pdbs.delete("blk-user", &DeleteParams::default())
        .await
        .unwrap();
    wait_gone(&pdbs, "blk-user", "user PDB gone", Duration::from_secs(30)).await;
    // Each store crosses the stale bound on its own clock: the first 503
    // may name another store (seen in CI: horizontalpodautoscalers alone).
    let body = wait_for(
        "/readyz 503 naming the PDB store stale",
        Duration::from_secs(60),
        || async {
            let (code, body) = probe(wh.port, "/readyz");
            (code == 503 && body.contains("poddisruptionbudgets")).then_some(body)
        },
    )
    .await;
    let to_503 = back.elapsed();
    step("readyz 503");
    assert!(
        body.contains("stale") && body.contains("poddisruptionbudgets"),
        "{body}"
    );

    let node = pods[0].spec.as_ref().unwrap().node_name.clone().unwrap();
    let started = Instant::now();
    let out = kubectl(&[
        "drain",
        &node,
        "--pod-selector=app=blk",
        "--ignore-daemonsets",
        "--delete-emptydir-data",
        "--timeout=60s",
    ]);
    let drain = started.elapsed();
    step("drained");
    assert!(
        out.status.success(),
        "drain did not complete in 60s:\n{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        wh.metric_sum(
            "eviction_autoscaler_admission_requests_total",
            &["decision=\"cache_stale\""]
        ) >= 1.0,
        "the webhook allowed because its caches were stale"
    );

    drop(_restore);
    let restored = Instant::now();
    wait_for("/readyz 200 again", Duration::from_secs(150), || async {
        (probe(wh.port, "/readyz").0 == 200).then_some(())
    })
    .await;
    let to_ready = restored.elapsed();
    step("ready again");
    record_figure(format!(
        "broken watches (WATCH_STALE_AFTER=5s): apiserver away {away:.1}s; /readyz 503 {:.1}s after it was back; \
         drain after the PDB was deleted {:.1}s; /readyz 200 {:.1}s after RBAC was restored",
        to_503.as_secs_f64(),
        drain.as_secs_f64(),
        to_ready.as_secs_f64()
    ));
    let _ = restart_server(&[]);
}

/// The container of manifests/deployment.yaml.
fn manifest_container() -> Container {
    let text = std::fs::read_to_string(repo().join("manifests/deployment.yaml")).unwrap();
    let doc = text.split("\n---\n").next().unwrap();
    let d: Deployment = serde_norway::from_str(doc).expect("manifests/deployment.yaml");
    let spec = d.spec.unwrap().template.spec.unwrap();
    spec.containers.into_iter().next().expect("one container")
}

/// The first webhook of manifests/webhooks.yaml (the evictions one).
fn manifest_validating_webhooks() -> ValidatingWebhookConfiguration {
    let text = std::fs::read_to_string(repo().join("manifests/webhooks.yaml")).unwrap();
    let doc = text
        .split("\n---\n")
        .find(|d| d.contains("kind: ValidatingWebhookConfiguration"))
        .unwrap();
    serde_norway::from_str(doc).expect("manifests/webhooks.yaml")
}

/// The port number a probe names (by container port name or number).
fn probe_port(c: &Container, port: &IntOrString) -> i32 {
    match port {
        IntOrString::Int(n) => *n,
        IntOrString::String(name) => c
            .ports
            .iter()
            .flatten()
            .find(|p| p.name.as_deref() == Some(name))
            .map(|p| p.container_port)
            .expect("named port"),
    }
}

fn openssl(dir: &Path, script: &str) {
    let ok = Command::new("sh")
        .arg("-c")
        .arg(script)
        .current_dir(dir)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .expect("openssl");
    assert!(ok.success(), "{script}");
}

/// SIGTERM (the server releases its Lease), SIGKILL after 5 s.
fn stop_gracefully(mut c: std::process::Child) {
    let _ = Command::new("kill").arg(c.id().to_string()).status();
    for _ in 0..50 {
        if matches!(c.try_wait(), Ok(Some(_))) {
            return;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let _ = c.kill();
    let _ = c.wait();
}

/// `restart_server(&[])` for destructors: never panics.
fn restart_server_quietly() {
    let _ = Command::new(repo().join("tests/e2e/deploy-local.sh"))
        .arg("start")
        .env("CLUSTER_DIR", cluster_dir())
        .env("EA_BIN", env!("CARGO_BIN_EXE_eviction-autoscaler"))
        .output();
}

/// Steps that undo a test's changes to the cluster, last first, however it ends.
struct Cleanup(Vec<Box<dyn FnOnce()>>);

impl Drop for Cleanup {
    fn drop(&mut self) {
        for f in self.0.drain(..).rev() {
            f();
        }
    }
}

/// The server run with manifests/deployment.yaml's args and env plus
/// CLIENT_CA_FILE: the kubelet's probes (HTTPS, no client certificate) are
/// answered; an eviction reaches the webhook only once the apiserver
/// presents a client certificate (AdmissionConfiguration kubeconfig).
#[tokio::test]
async fn runs_as_the_manifest_says_with_client_certificates() {
    let _g = nodes_lock().await;
    let wh = restart_server(&[]);
    // Only the server under test answers evictions.
    stop_server();
    let mut cleanup = Cleanup(vec![Box::new(restart_server_quietly)]);
    let dir: PathBuf = cluster_dir().join("manifest-run");
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let bin = env!("CARGO_BIN_EXE_eviction-autoscaler");
    let ok = Command::new(bin)
        .args(["certs", "--out"])
        .arg(&dir)
        .args(["--ip", "127.0.0.1"])
        .stdout(Stdio::null())
        .status()
        .unwrap();
    assert!(ok.success());
    openssl(&dir, "openssl req -x509 -newkey rsa:2048 -nodes -keyout client-ca.key -out client-ca.crt -days 1 -subj /CN=webhook-client-ca");
    openssl(&dir, "openssl req -newkey rsa:2048 -nodes -keyout client.key -out client.csr -subj /CN=kube-apiserver");
    openssl(&dir, "printf 'extendedKeyUsage=clientAuth\\n' > ext.cnf && openssl x509 -req -in client.csr -CA client-ca.crt -CAkey client-ca.key -CAcreateserial -out client.crt -days 1 -extfile ext.cnf");

    // The manifest's container, run out of cluster: its args and env, with the
    // secret mount's paths pointing at `dir`, a free port instead of 8443 (other
    // servers on this machine), the ServiceAccount's kubeconfig, and CLIENT_CA_FILE.
    let c = manifest_container();
    let mount = c
        .volume_mounts
        .iter()
        .flatten()
        .next()
        .unwrap()
        .mount_path
        .clone();
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let mut cmd = Command::new(bin);
    cmd.args(c.args.iter().flatten()).env_clear();
    cmd.env("PATH", std::env::var("PATH").unwrap_or_default());
    for e in c.env.iter().flatten() {
        let value = match (&e.value, &e.value_from) {
            (Some(v), _) if e.name == "LISTEN" => {
                let (_, manifest_port) = v.rsplit_once(':').unwrap();
                assert_eq!(manifest_port, "8443", "the probes below assume it");
                format!("127.0.0.1:{port}")
            }
            (Some(v), _) => match v.strip_prefix(&format!("{mount}/")) {
                Some(file) => path_str(&dir.join(file)),
                None => v.clone(),
            },
            (None, Some(from)) => match from.field_ref.as_ref().map(|f| f.field_path.as_str()) {
                Some("metadata.name") => format!("manifest-run-{}", std::process::id()),
                Some("metadata.namespace") => "eviction-autoscaler".into(),
                other => panic!("unexpected fieldRef {other:?}"),
            },
            (None, None) => String::new(),
        };
        cmd.env(&e.name, value);
    }
    cmd.env("CLIENT_CA_FILE", dir.join("client-ca.crt"))
        .env("KUBECONFIG", wh.state.join("kubeconfig"))
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(dir.join("server.log")).unwrap());
    let child = cmd.spawn().unwrap();
    let pid = child.id();
    let child = std::sync::Mutex::new(Some(child));
    cleanup.0.push(Box::new(move || {
        if let Some(c) = child.lock().ok().and_then(|mut g| g.take()) {
            stop_gracefully(c);
        }
    }));

    // The probes as the kubelet sends them.
    let live = c
        .liveness_probe
        .as_ref()
        .unwrap()
        .http_get
        .as_ref()
        .unwrap();
    let ready = c
        .readiness_probe
        .as_ref()
        .unwrap()
        .http_get
        .as_ref()
        .unwrap();
    assert_eq!(live.scheme.as_deref(), Some("HTTPS"));
    assert_eq!(ready.scheme.as_deref(), Some("HTTPS"));
    assert_eq!(probe_port(&c, &live.port), 8443);
    let live_path = live.path.clone().unwrap();
    let ready_path = ready.path.clone().unwrap();
    let started = Instant::now();
    wait_for("liveness probe 200", Duration::from_secs(20), || async {
        (probe(port, &live_path).0 == 200).then_some(())
    })
    .await;
    let to_live = started.elapsed();
    wait_for("readiness probe 200", Duration::from_secs(60), || async {
        (probe(port, &ready_path).0 == 200).then_some(())
    })
    .await;
    let to_ready = started.elapsed();
    // Without a client certificate the webhook path refuses.
    let (code, body) = Command::new("curl")
        .args([
            "-sk",
            "-m",
            "5",
            "-w",
            "\n%{http_code}",
            "--data-binary",
            "{}",
        ])
        .arg(format!("https://127.0.0.1:{port}/validate/evictions"))
        .output()
        .map(|o| {
            let t = String::from_utf8_lossy(&o.stdout).to_string();
            let (b, c) = t
                .rsplit_once('\n')
                .map(|(b, c)| (b.to_string(), c.to_string()))
                .unwrap_or_default();
            (c, b)
        })
        .unwrap();
    assert_eq!(code, "401", "{body}");

    // A namespace, a Deployment and a user PDB that blocks its pods.
    let ns = TestNs::new("e2e-mtls").await;
    let deps: Api<Deployment> = ns.api();
    deps.create(&PostParams::default(), &opted_out_deployment("m", 2, None))
        .await
        .unwrap();
    let pdbs: Api<PodDisruptionBudget> = ns.api();
    pdbs.create(
        &PostParams::default(),
        &user_pdb("m-user", "m", Some(IntOrString::Int(2)), None),
    )
    .await
    .unwrap();
    let pods = wait_ready(&ns, "m", 2).await;
    wait_pdb(&ns, "m-user", "user PDB blocks", |p| {
        p.status
            .as_ref()
            .is_some_and(|s| s.current_healthy == 2 && s.disruptions_allowed == 0)
    })
    .await;
    let victim = pods[0].metadata.name.clone().unwrap();

    // The webhook configuration as shipped, pointed at this server, for this namespace.
    let mut vwc = manifest_validating_webhooks();
    vwc.metadata.name = Some("eviction-autoscaler-manifest-run".into());
    vwc.metadata.annotations = None;
    let ca_bundle = std::fs::read(dir.join("ca.crt")).unwrap();
    for w in vwc.webhooks.iter_mut().flatten() {
        let path = w
            .client_config
            .service
            .as_ref()
            .and_then(|s| s.path.clone());
        w.client_config.service = None;
        w.client_config.url = Some(format!(
            "https://127.0.0.1:{port}{}",
            path.unwrap_or_default()
        ));
        w.client_config.ca_bundle = Some(k8s_openapi::ByteString(ca_bundle.clone()));
        w.namespace_selector = Some(LabelSelector {
            match_labels: Some(
                [("kubernetes.io/metadata.name".to_string(), ns.name.clone())].into(),
            ),
            ..Default::default()
        });
    }
    let vwcs: Api<ValidatingWebhookConfiguration> = Api::all(ns.client.clone());
    let _ = vwcs
        .delete("eviction-autoscaler-manifest-run", &DeleteParams::default())
        .await;
    vwcs.create(&PostParams::default(), &vwc).await.unwrap();
    cleanup.0.push(Box::new(|| {
        let _ = kubectl(&[
            "delete",
            "validatingwebhookconfiguration",
            "eviction-autoscaler-manifest-run",
            "--ignore-not-found",
        ]);
    }));
    // Sum of the samples of one metric whose labels contain all of `want`.
    let metric = |name: &str, want: &[&str]| {
        let out = Command::new("curl")
            .args(["-sk", "-m", "5"])
            .arg(format!("https://127.0.0.1:{port}/metrics"))
            .output()
            .unwrap();
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .filter(|l| l.starts_with(name) && want.iter().all(|w| l.contains(w)))
            .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .sum::<f64>()
    };
    let refused = || {
        metric(
            "eviction_autoscaler_webhook_requests_without_client_cert",
            &[],
        )
    };
    let blocked = || {
        metric(
            "eviction_autoscaler_admission_requests_total",
            &["webhook=\"evictions\"", "decision=\"blocked\""],
        )
    };

    // The apiserver presents no client certificate yet: the webhook answers
    // 401 (counted), the apiserver fails open, and the 429 is its own.
    // One already: the curl above.
    let before = refused();
    wait_for(
        "the apiserver calls the webhook and is refused",
        Duration::from_secs(30),
        || async {
            let s = dry_run_evict(&ns, &victim).await.expect_err("blocked");
            assert_eq!(s.code, 429);
            assert!(!s.message.contains("eviction-autoscaler"), "{}", s.message);
            (refused() > before).then_some(())
        },
    )
    .await;
    assert_eq!(blocked(), 0.0);

    // The apiserver with an AdmissionConfiguration whose kubeconfig gives every
    // webhook ("*") the client certificate.
    let kubeconfig = dir.join("webhook-client.kubeconfig");
    std::fs::write(
        &kubeconfig,
        format!(
            "apiVersion: v1\nkind: Config\nusers:\n- name: \"*\"\n  user:\n    client-certificate: {}\n    client-key: {}\n",
            dir.join("client.crt").display(),
            dir.join("client.key").display()
        ),
    )
    .unwrap();
    let admission = dir.join("admission.yaml");
    std::fs::write(
        &admission,
        format!(
            "apiVersion: apiserver.config.k8s.io/v1\nkind: AdmissionConfiguration\nplugins:\n\
             - name: ValidatingAdmissionWebhook\n  configuration:\n    apiVersion: apiserver.config.k8s.io/v1\n    kind: WebhookAdmissionConfiguration\n    kubeConfigFile: {k}\n\
             - name: MutatingAdmissionWebhook\n  configuration:\n    apiVersion: apiserver.config.k8s.io/v1\n    kind: WebhookAdmissionConfiguration\n    kubeConfigFile: {k}\n",
            k = kubeconfig.display()
        ),
    )
    .unwrap();
    // The kind is WebhookAdmissionConfiguration (k8s.io/apiserver's
    // webhookadmission/v1 register.go), not the WebhookAdmission of the docs.
    // The apiserver keeps this configuration after the test (the next
    // restart-apiserver.sh without flags drops it): it presents the client
    // certificate only to webhooks that ask for one, and a restart costs up to
    // two minutes before the control plane acts again.
    restart_apiserver(&[&format!(
        "--admission-control-config-file={}",
        admission.display()
    )]);
    let s = wait_for(
        "the product's 429 through mTLS",
        Duration::from_secs(60),
        || async {
            match dry_run_evict(&ns, &victim).await {
                Err(s) if s.code == 429 && s.message.contains("eviction-autoscaler") => Some(s),
                _ => None,
            }
        },
    )
    .await;
    assert!(s.message.contains("m-user"), "{}", s.message);
    assert!(blocked() >= 1.0);
    assert_eq!(probe(port, &live_path).0, 200);
    assert_eq!(probe(port, &ready_path).0, 200);
    record_figure(format!(
        "server run as manifests/deployment.yaml (pid {pid}, CLIENT_CA_FILE set): liveness 200 after {:.1}s, \
         readiness 200 after {:.1}s",
        to_live.as_secs_f64(),
        to_ready.as_secs_f64()
    ));
    drop(cleanup);
}

/// Without the CRD the server says so once, at error level, with the command
/// that installs it; /readyz names the store; installing the CRD makes it ready.
#[tokio::test]
async fn a_missing_crd_is_reported_once_and_readiness_follows_it() {
    let _g = nodes_lock().await;
    let wh = restart_server(&[]);
    let crd = repo().join("manifests/crd.yaml");
    let mut cleanup = Cleanup(vec![Box::new(restart_server_quietly)]);
    let crd_path = path_str(&crd);
    cleanup.0.push(Box::new(move || {
        let _ = kubectl(&["apply", "-f", &crd_path]);
    }));
    kubectl_ok(&[
        "delete",
        "crd",
        "evictionautoscalers.eviction-autoscaler.azure.com",
        "--wait=true",
    ]);
    // The logs go to <state>/no-crd-ready.log.
    let (child, port, log) = wh.spawn_extra(
        "no-crd-ready",
        &[("LEADER_ELECTION", "false"), ("RUST_LOG", "info")],
    );
    let child = std::sync::Mutex::new(Some(child));
    cleanup.0.push(Box::new(move || {
        if let Some(mut c) = child.lock().ok().and_then(|mut g| g.take()) {
            let _ = c.kill();
            let _ = c.wait();
        }
    }));
    wait_for("/healthz", Duration::from_secs(20), || async {
        (probe(port, "/healthz").0 == 200).then_some(())
    })
    .await;
    // Long enough for several retries of the watcher's backoff.
    tokio::time::sleep(Duration::from_secs(10)).await;
    let (code, body) = probe(port, "/readyz");
    assert_eq!(code, 503, "{body}");
    assert!(
        body.contains("evictionautoscalers: not listed yet"),
        "{body}"
    );
    let text = std::fs::read_to_string(&log).unwrap();
    let said: Vec<&str> = text
        .lines()
        .filter(|l| l.contains("EvictionAutoScaler CRD"))
        .collect();
    assert_eq!(said.len(), 1, "said once:\n{text}");
    assert!(
        said[0].contains("ERROR") && said[0].contains("kubectl apply -f manifests/crd.yaml"),
        "{}",
        said[0]
    );
    let noisy = text
        .lines()
        .filter(|l| l.contains("WARN") && l.contains("404"))
        .count();
    assert_eq!(noisy, 0, "no repeated warnings:\n{text}");

    let installed = Instant::now();
    kubectl_ok(&["apply", "-f", &path_str(&crd)]);
    wait_for(
        "/readyz 200 once the CRD is installed",
        Duration::from_secs(90),
        || async { (probe(port, "/readyz").0 == 200).then_some(()) },
    )
    .await;
    record_figure(format!(
        "missing CRD: /readyz 200 {:.1}s after `kubectl apply -f manifests/crd.yaml`",
        installed.elapsed().as_secs_f64()
    ));
    drop(cleanup);
}
