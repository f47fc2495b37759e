//! The Helm chart (charts/eviction-autoscaler): what it renders must be what
//! manifests/ ships (RBAC rules, the container's args and env, the webhooks,
//! the CRD), so the two install paths cannot drift; the real apiserver accepts
//! it (server-side dry run) with each source of certificates; and the
//! certificate the chart makes is one the server serves and the caBundle trusts.
//!
//! helm is built from its Go module by tests/tools/build.sh (`make tools`);
//! without it these tests fail and say how to build it. The local cluster has
//! no cert-manager, so its Certificate and Issuer are checked here field by
//! field against the objects that use them, not by the apiserver.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use crate::support::*;

const NS: &str = "eviction-autoscaler";
const SVC_DNS: &str = "eviction-autoscaler.eviction-autoscaler.svc";

/// The helm binary: $HELM, else the one tests/tools/build.sh puts in the cache.
fn helm() -> PathBuf {
    if let Some(h) = std::env::var_os("HELM") {
        return PathBuf::from(h);
    }
    built_tool("HELM_BIN", "helm")
}

fn run_helm(args: &[&str]) -> String {
    let out = Command::new(helm())
        .args(args)
        .current_dir(repo())
        .output()
        .expect("run helm");
    assert!(
        out.status.success(),
        "helm {args:?} failed:\n{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).to_string()
}

/// YAML documents (as JSON values), empty ones left out.
fn docs(text: &str) -> Vec<Value> {
    text.split("\n---")
        .filter_map(|d| {
            let v: Value = serde_norway::from_str(d).expect("YAML document");
            (!v.is_null()).then_some(v)
        })
        .collect()
}

/// `helm template` of the chart in the product's namespace, CRDs included.
fn render(set: &[&str]) -> Vec<Value> {
    let mut args = vec![
        "template",
        "eviction-autoscaler",
        "charts/eviction-autoscaler",
        "--namespace",
        NS,
        "--include-crds",
    ];
    for s in set {
        args.extend(["--set", s]);
    }
    docs(&run_helm(&args))
}

fn manifest(file: &str) -> Vec<Value> {
    let path = repo().join("manifests").join(file);
    docs(&std::fs::read_to_string(&path).expect("manifest file"))
}

fn find<'a>(docs: &'a [Value], kind: &str) -> &'a Value {
    let found: Vec<&Value> = docs.iter().filter(|d| d["kind"] == kind).collect();
    assert_eq!(found.len(), 1, "exactly one {kind}");
    found[0]
}

fn container(deployment: &Value) -> &Value {
    &deployment["spec"]["template"]["spec"]["containers"][0]
}

/// The container's env as name -> value (or valueFrom).
fn env_map(deployment: &Value) -> BTreeMap<String, Value> {
    container(deployment)["env"]
        .as_array()
        .expect("env")
        .iter()
        .map(|e| {
            let v = e.get("value").or(e.get("valueFrom")).cloned();
            (
                e["name"].as_str().expect("name").to_string(),
                v.expect("value"),
            )
        })
        .collect()
}

/// RBAC rules in a canonical order (order means nothing to the authorizer):
/// each rule's lists sorted, then the rules.
fn rules(role: &Value) -> Vec<String> {
    let mut out: Vec<String> = role["rules"]
        .as_array()
        .expect("rules")
        .iter()
        .map(|r| {
            let mut r = r.clone();
            for list in r.as_object_mut().expect("rule").values_mut() {
                if let Some(items) = list.as_array_mut() {
                    items.sort_by_key(Value::to_string);
                }
            }
            r.to_string()
        })
        .collect();
    out.sort();
    out
}

/// A webhook configuration without what legitimately differs: labels, and
/// the caBundle that only the chart can fill.
fn webhook_config(v: &Value) -> Value {
    let mut v = v.clone();
    if let Some(m) = v["metadata"].as_object_mut() {
        m.remove("labels");
    }
    for w in v["webhooks"].as_array_mut().expect("webhooks") {
        if let Some(c) = w["clientConfig"].as_object_mut() {
            c.remove("caBundle");
        }
    }
    v
}

#[test]
fn chart_lints_clean_with_each_certificate_source() {
    for set in [
        "tls.source=chart",
        "tls.source=cert-manager",
        "tls.source=secret,tls.secret.name=mine,tls.secret.caBundle=Y2E=",
    ] {
        let out = run_helm(&[
            "lint",
            "--strict",
            "charts/eviction-autoscaler",
            "--set",
            set,
        ]);
        assert!(out.contains("0 chart(s) failed"), "{set}: {out}");
    }
    // A bad value is refused with its name (values.schema.json).
    for (set, name) in [
        ("tls.source=vault", "/tls/source"),
        (
            "controllerConfig.pdb.create=yes",
            "/controllerConfig/pdb/create",
        ),
        (
            "controllerConfig.zeroSurgeOverride=lots",
            "/controllerConfig/zeroSurgeOverride",
        ),
        ("webhook.timeoutSeconds=60", "/webhook/timeoutSeconds"),
        // A hold that does not leave room for the live read and the
        // apiserver's own eviction (ea.validate in _helpers.tpl).
        (
            "webhook.timeoutSeconds=5",
            "controllerConfig.evictionHold 6s (at least 1.5s when on) plus 2s",
        ),
        // A short hold still pays a live read before and after it.
        (
            "webhook.timeoutSeconds=3,controllerConfig.evictionHold=500ms",
            "must fit in webhook.timeoutSeconds (3)",
        ),
        // No hold: one live read and the apiserver's own eviction.
        (
            "webhook.timeoutSeconds=1,controllerConfig.evictionHold=0s",
            "must fit in webhook.timeoutSeconds (1)",
        ),
        (
            "webhook.timeoutSeconds=4,controllerConfig.evictionHold=2500ms",
            "must fit in webhook.timeoutSeconds (4)",
        ),
        (
            "controllerConfig.evictionHold=7s 500ms",
            "must be whole seconds or milliseconds",
        ),
        // The server refuses a hold over 8 s.
        (
            "webhook.timeoutSeconds=20,controllerConfig.evictionHold=9s",
            "over the server's 8s ceiling",
        ),
        // Two replicas without leader election would both surge.
        (
            "controllerConfig.leaderElection=false",
            "leaderElection false with replicaCount 2",
        ),
        // The kubelet would kill the server while it drains its requests.
        (
            "server.shutdownDelay=25s",
            "must fit in server.terminationGracePeriodSeconds (30)",
        ),
        // A short delay still waits for the Lease release and the last
        // Events (up to 5 s, run.rs) before the requests' drain.
        (
            "server.shutdownDelay=1s,server.requestTimeout=25s",
            "must fit in server.terminationGracePeriodSeconds (30)",
        ),
    ] {
        let out = Command::new(helm())
            .args(["template", "charts/eviction-autoscaler", "--set", set])
            .current_dir(repo())
            .output()
            .expect("run helm");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success() && err.contains(name), "{set}: {err}");
    }
}

#[test]
fn chart_rbac_is_the_manifest_rbac() {
    let chart = render(&[]);
    let rbac = manifest("rbac.yaml");
    for kind in ["ClusterRole", "Role"] {
        assert_eq!(
            rules(find(&chart, kind)),
            rules(find(&rbac, kind)),
            "{kind} rules differ between the chart and manifests/rbac.yaml"
        );
    }
    for kind in ["ClusterRoleBinding", "RoleBinding"] {
        assert_eq!(
            find(&chart, kind)["subjects"],
            find(&rbac, kind)["subjects"],
            "{kind}"
        );
    }
    assert_eq!(find(&chart, "ServiceAccount")["metadata"]["name"], NS);
}

#[test]
fn chart_deployment_runs_as_the_manifest_says() {
    let chart = render(&[]);
    let shipped = manifest("deployment.yaml");
    let (c, m) = (find(&chart, "Deployment"), find(&shipped, "Deployment"));
    assert_eq!(c["spec"]["replicas"], m["spec"]["replicas"]);
    // Order does not matter in env (no $(VAR) references); names must be unique.
    assert_eq!(
        env_map(c),
        env_map(m),
        "container env differs between the chart and manifests/deployment.yaml"
    );
    for d in [c, m] {
        assert_eq!(
            env_map(d).len(),
            container(d)["env"].as_array().map_or(0, Vec::len),
            "duplicate env names"
        );
    }
    for field in [
        "image",
        "args",
        "ports",
        "livenessProbe",
        "readinessProbe",
        "resources",
        "securityContext",
        "volumeMounts",
    ] {
        assert_eq!(
            container(c)[field],
            container(m)[field],
            "container {field} differs between the chart and manifests/deployment.yaml"
        );
    }
    let (cp, mp) = (
        &c["spec"]["template"]["spec"],
        &m["spec"]["template"]["spec"],
    );
    for field in ["securityContext", "volumes", "serviceAccountName"] {
        assert_eq!(cp[field], mp[field], "pod {field}");
    }
    assert_eq!(
        find(&chart, "Service")["spec"]["ports"],
        find(&shipped, "Service")["spec"]["ports"]
    );
    for field in ["maxUnavailable", "unhealthyPodEvictionPolicy"] {
        assert_eq!(
            find(&chart, "PodDisruptionBudget")["spec"][field],
            find(&shipped, "PodDisruptionBudget")["spec"][field],
            "PDB {field}"
        );
    }
    // Replicas that are not Ready (stale caches) never hold a drain of
    // their node: the budget lets them go.
    assert_eq!(
        find(&chart, "PodDisruptionBudget")["spec"]["unhealthyPodEvictionPolicy"],
        "AlwaysAllow"
    );
}

#[test]
fn chart_webhooks_and_crd_are_the_manifests() {
    // With cert-manager the webhooks are the manifests' exactly (annotation included).
    let chart = render(&["tls.source=cert-manager"]);
    let shipped = manifest("webhooks.yaml");
    for kind in [
        "ValidatingWebhookConfiguration",
        "MutatingWebhookConfiguration",
    ] {
        assert_eq!(
            webhook_config(find(&chart, kind)),
            webhook_config(find(&shipped, kind)),
            "{kind} differs between the chart and manifests/webhooks.yaml"
        );
    }
    let chart_crd = std::fs::read_to_string(
        repo().join("charts/eviction-autoscaler/crds/evictionautoscalers.yaml"),
    )
    .expect("chart CRD");
    let crd = std::fs::read_to_string(repo().join("manifests/crd.yaml")).expect("manifest CRD");
    assert!(
        chart_crd == crd,
        "charts/eviction-autoscaler/crds/evictionautoscalers.yaml is stale: run `make crd`"
    );
}

#[test]
fn chart_values_reach_the_server_settings() {
    let chart = render(&[
        "controllerConfig.pdb.create=true",
        "controllerConfig.namespaces.enabledByDefault=true",
        "controllerConfig.namespaces.actionedNamespaces={team-a,team-b}",
        "controllerConfig.zeroSurgeOverride=25%",
        "controllerConfig.cooldown=2m",
        "controllerConfig.evictionHold=3s",
        "controllerConfig.leaderElection=false",
        "replicaCount=1",
        "controllerConfig.orphanPdbGrace=90s",
        "controllerConfig.watchStaleAfter=20s",
        "server.requestTimeout=5s",
        "server.shutdownDelay=7s",
        "server.clientCA.secretName=apiserver-client-ca",
        "server.logFormat=text",
        "webhook.timeoutSeconds=7",
    ]);
    let env = env_map(find(&chart, "Deployment"));
    for (name, want) in [
        ("PDB_CREATE", "true"),
        ("ENABLED_BY_DEFAULT", "true"),
        ("ACTIONED_NAMESPACES", "team-a,team-b"),
        ("ZERO_SURGE_OVERRIDE", "25%"),
        ("COOLDOWN", "2m"),
        ("EVICTION_HOLD", "3s"),
        ("LEADER_ELECTION", "false"),
        ("ORPHAN_PDB_GRACE", "90s"),
        ("WATCH_STALE_AFTER", "20s"),
        ("REQUEST_TIMEOUT", "5s"),
        ("SHUTDOWN_DELAY", "7s"),
        ("CLIENT_CA_FILE", "/client-ca/ca.crt"),
        ("LOG_FORMAT", "text"),
    ] {
        assert_eq!(env.get(name), Some(&json!(want)), "{name}");
    }
    let spec = &find(&chart, "Deployment")["spec"]["template"]["spec"];
    assert_eq!(spec["terminationGracePeriodSeconds"], 30);
    assert!(
        spec["volumes"]
            .as_array()
            .expect("volumes")
            .iter()
            .any(|v| v["secret"]["secretName"] == "apiserver-client-ca"),
        "the client CA Secret is mounted"
    );
    for kind in [
        "ValidatingWebhookConfiguration",
        "MutatingWebhookConfiguration",
    ] {
        assert_eq!(find(&chart, kind)["webhooks"][0]["timeoutSeconds"], 7);
    }
    // Defaults leave unset settings to the server (no empty values).
    let chart = render(&[]);
    let env = env_map(find(&chart, "Deployment"));
    for name in [
        "ZERO_SURGE_OVERRIDE",
        "SHUTDOWN_DELAY",
        "LEADER_ELECTION",
        "CLIENT_CA_FILE",
    ] {
        assert!(!env.contains_key(name), "{name} is set by default");
    }
    // The hold is on by default, as in manifests/deployment.yaml.
    assert_eq!(env.get("EVICTION_HOLD"), Some(&json!("6s")));
    // A number from a values file (a float64 to Helm) is written whole,
    // not as 4.194304e+06, which the server refuses.
    let values = std::env::temp_dir().join(format!("ea-chart-values-{}.yaml", std::process::id()));
    std::fs::write(&values, "server:\n  maxBodyBytes: 4194304\n").expect("values file");
    let chart = docs(&run_helm(&[
        "template",
        "eviction-autoscaler",
        "charts/eviction-autoscaler",
        "--namespace",
        NS,
        "-f",
        &values.to_string_lossy(),
    ]));
    let _ = std::fs::remove_file(&values);
    let env = env_map(find(&chart, "Deployment"));
    assert_eq!(env.get("MAX_BODY_BYTES"), Some(&json!("4194304")));
}

/// Every source of certificates renders objects the apiserver accepts.
#[test]
fn chart_passes_server_side_dry_run_with_each_certificate_source() {
    let _ = WebhookInfo::get(); // the namespace exists once deploy-local ran
    let dir = tempdir("chart-dry-run");
    for (name, set) in [
        ("chart", &["tls.source=chart"][..]),
        ("cert-manager", &["tls.source=cert-manager"][..]),
        (
            "secret",
            &[
                "tls.source=secret",
                "tls.secret.name=mine",
                "tls.secret.caBundle=Y2E=",
            ][..],
        ),
    ] {
        let objects = render(set);
        let (cert_manager, apiserver): (Vec<Value>, Vec<Value>) =
            objects.into_iter().partition(|o| {
                o["apiVersion"]
                    .as_str()
                    .is_some_and(|a| a.starts_with("cert-manager.io/"))
            });
        if name == "cert-manager" {
            check_cert_manager_objects(&cert_manager, &apiserver);
        } else {
            assert!(cert_manager.is_empty(), "{name}: no cert-manager objects");
        }
        let file = dir.join(format!("{name}.json"));
        let list = json!({"apiVersion": "v1", "kind": "List", "items": apiserver});
        std::fs::write(&file, serde_json::to_vec(&list).expect("json")).expect("write");
        let out = kubectl_ok(&["apply", "--dry-run=server", "-f", &path_str(&file)]);
        for what in [
            "customresourcedefinition.apiextensions.k8s.io/evictionautoscalers",
            "deployment.apps/eviction-autoscaler",
            "validatingwebhookconfiguration.admissionregistration.k8s.io/eviction-autoscaler",
            "mutatingwebhookconfiguration.admissionregistration.k8s.io/eviction-autoscaler",
        ] {
            assert!(out.contains(what), "{name}: {what} missing from:\n{out}");
        }
    }
}

/// What the apiserver cannot check here (no cert-manager): the serving
/// Certificate issues the Secret the Deployment mounts, for the Service's DNS
/// name, from an Issuer of a CA of its own (so a renewal keeps the caBundle),
/// that CA from a self-signed Issuer, and both webhooks ask for the serving
/// Certificate's CA. The same as manifests/cert-manager.yaml.
fn check_cert_manager_objects(cm: &[Value], others: &[Value]) {
    let of = |kind: &str| -> Vec<&Value> { cm.iter().filter(|o| o["kind"] == kind).collect() };
    let (certs, issuers) = (of("Certificate"), of("Issuer"));
    assert_eq!((certs.len(), issuers.len()), (2, 2), "{cm:?}");
    let by_ca = |ca: bool| {
        *certs
            .iter()
            .find(|c| c["spec"]["isCA"].as_bool().unwrap_or(false) == ca)
            .expect("a CA and a serving Certificate")
    };
    let (ca, cert) = (by_ca(true), by_ca(false));
    let issuer_of = |c: &Value| {
        *issuers
            .iter()
            .find(|i| i["metadata"]["name"] == c["spec"]["issuerRef"]["name"])
            .unwrap_or_else(|| panic!("the Issuer of {c}"))
    };
    assert!(issuer_of(ca)["spec"]["selfSigned"].is_object(), "{ca}");
    let issuer = issuer_of(cert);
    assert_eq!(issuer["spec"]["ca"]["secretName"], ca["spec"]["secretName"]);
    for o in cm {
        assert_eq!(o["apiVersion"], "cert-manager.io/v1");
        assert_eq!(o["metadata"]["namespace"], NS);
    }
    assert_eq!(cert["spec"]["issuerRef"]["kind"], "Issuer");
    // The manifests make the same chain.
    let shipped = manifest("cert-manager.yaml");
    let kinds: Vec<(&str, bool)> = shipped
        .iter()
        .map(|o| {
            (
                o["kind"].as_str().unwrap_or_default(),
                o["spec"]["isCA"].as_bool().unwrap_or(false) || o["spec"]["ca"].is_object(),
            )
        })
        .collect();
    assert_eq!(
        kinds,
        [
            ("Issuer", false),
            ("Certificate", true),
            ("Issuer", true),
            ("Certificate", false)
        ]
    );
    let volumes = &find(others, "Deployment")["spec"]["template"]["spec"]["volumes"];
    assert_eq!(
        volumes[0]["secret"]["secretName"],
        cert["spec"]["secretName"]
    );
    let dns: Vec<&str> = cert["spec"]["dnsNames"]
        .as_array()
        .expect("dnsNames")
        .iter()
        .filter_map(Value::as_str)
        .collect();
    assert!(dns.contains(&SVC_DNS), "{dns:?}");
    let inject = format!("{NS}/{}", cert["metadata"]["name"].as_str().expect("name"));
    for kind in [
        "ValidatingWebhookConfiguration",
        "MutatingWebhookConfiguration",
    ] {
        let w = find(others, kind);
        assert_eq!(
            w["metadata"]["annotations"]["cert-manager.io/inject-ca-from"],
            json!(inject)
        );
        assert!(
            w["webhooks"][0]["clientConfig"].get("caBundle").is_none(),
            "{kind}"
        );
    }
    // The manifests' serving certificate says the same.
    let shipped_cert = shipped
        .iter()
        .find(|o| o["kind"] == "Certificate" && o["spec"]["isCA"] != true)
        .expect("the manifests' serving Certificate");
    assert_eq!(
        cert["spec"]["secretName"],
        shipped_cert["spec"]["secretName"]
    );
    assert_eq!(cert["spec"]["dnsNames"], shipped_cert["spec"]["dnsNames"]);
}

/// The chart's own certificate (tls.source=chart): the server serves it,
/// and a client trusting only the webhooks' caBundle reaches it by the
/// Service's DNS name, as the apiserver would.
#[test]
fn chart_certificate_is_served_and_trusted_through_the_ca_bundle() {
    let wh = WebhookInfo::get();
    let chart = render(&["tls.source=chart"]);
    let secret = find(&chart, "Secret");
    let ca_bundle = find(&chart, "ValidatingWebhookConfiguration")["webhooks"][0]["clientConfig"]
        ["caBundle"]
        .clone();
    assert_eq!(secret["data"]["ca.crt"], ca_bundle);
    assert_eq!(
        find(&chart, "MutatingWebhookConfiguration")["webhooks"][0]["clientConfig"]["caBundle"],
        ca_bundle
    );
    let dir = tempdir("chart-cert");
    for (key, file) in [
        ("ca.crt", "ca.crt"),
        ("tls.crt", "tls.crt"),
        ("tls.key", "tls.key"),
    ] {
        let b64 = secret["data"][key].as_str().expect("base64 data");
        let out = Command::new("base64")
            .args(["-d"])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .and_then(|mut c| {
                use std::io::Write;
                c.stdin.take().expect("stdin").write_all(b64.as_bytes())?;
                c.wait_with_output()
            })
            .expect("base64 -d");
        assert!(out.status.success(), "{key} is not base64");
        std::fs::write(dir.join(file), out.stdout).expect("write");
    }
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port();
    let log = std::fs::File::create(dir.join("server.log")).expect("log");
    // Leader election on (the default): this extra replica never leads while
    // the suite's server holds the Lease, so it writes nothing; were it to
    // lead, it would act as that server does (same behaviour settings).
    let environ = std::fs::read(format!("/proc/{}/environ", wh.pid())).expect("server environment");
    let environ = String::from_utf8_lossy(&environ);
    let behaviour = environ
        .split('\0')
        .filter_map(|e| e.split_once('='))
        .filter(|(k, _)| {
            [
                "PDB_CREATE",
                "ENABLED_BY_DEFAULT",
                "ACTIONED_NAMESPACES",
                "ZERO_SURGE_OVERRIDE",
                "COOLDOWN",
            ]
            .contains(k)
        });
    let mut server = Command::new(env!("CARGO_BIN_EXE_eviction-autoscaler"))
        .envs(behaviour)
        .args(["serve", "--listen", &format!("127.0.0.1:{port}")])
        .arg("--tls-cert-file")
        .arg(dir.join("tls.crt"))
        .arg("--tls-key-file")
        .arg(dir.join("tls.key"))
        .env("KUBECONFIG", wh.state.join("kubeconfig"))
        .env("POD_NAMESPACE", NS)
        .env("POD_NAME", "chart-cert-check")
        .stdout(log.try_clone().expect("log"))
        .stderr(log)
        .spawn()
        .expect("spawn the server");
    let started = Instant::now();
    let (ok, last) = loop {
        let out = Command::new("curl")
            .args([
                "-sS",
                "-m",
                "10",
                "-o",
                "/dev/null",
                "-w",
                "%{http_code}",
                "--cacert",
            ])
            .arg(dir.join("ca.crt"))
            .args(["--resolve", &format!("{SVC_DNS}:{port}:127.0.0.1")])
            .arg(format!("https://{SVC_DNS}:{port}/healthz"))
            .output()
            .expect("curl");
        let last = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        if out.status.success() && last == "200" {
            break (true, last);
        }
        if started.elapsed() > Duration::from_secs(20) {
            break (false, last);
        }
        std::thread::sleep(Duration::from_millis(200));
    };
    // SIGTERM first: a server that somehow led releases the Lease.
    let _ = Command::new("kill").arg(server.id().to_string()).status();
    let stop = Instant::now();
    while !matches!(server.try_wait(), Ok(Some(_))) && stop.elapsed() < Duration::from_secs(5) {
        std::thread::sleep(Duration::from_millis(100));
    }
    let _ = server.kill();
    let _ = server.wait();
    assert!(
        ok,
        "https://{SVC_DNS}/healthz with the chart's certificate and only its caBundle trusted: {last}\n{}",
        std::fs::read_to_string(dir.join("server.log")).unwrap_or_default()
    );
}

/// An upgrade keeps the chart's certificate: its template looks the Secret
/// up (here through `helm template --dry-run=server`, which lets lookup reach
/// the cluster) and renders the same pair and caBundle, not a new CA that the
/// running pods would not serve until their Secret volume is refreshed.
#[test]
fn chart_keeps_its_certificate_across_upgrades() {
    let _ = WebhookInfo::get(); // the namespace exists once deploy-local ran
    let name = "chart-upgrade-check";
    let set = format!("fullnameOverride={name}");
    let first = render(&[&set]);
    let secret = find(&first, "Secret").clone();
    assert_eq!(secret["metadata"]["name"], format!("{name}-tls"));
    let dir = tempdir("chart-upgrade");
    let file = dir.join("secret.json");
    std::fs::write(&file, serde_json::to_vec(&secret).expect("json")).expect("write");
    kubectl_ok(&["apply", "-f", &path_str(&file)]);
    let kubeconfig = path_str(&cluster_dir().join("kubeconfig"));
    let text = run_helm(&[
        "template",
        "eviction-autoscaler",
        "charts/eviction-autoscaler",
        "--namespace",
        NS,
        "--dry-run=server",
        "--kubeconfig",
        &kubeconfig,
        "--set",
        &set,
    ]);
    let _ = kubectl(&["-n", NS, "delete", "secret", &format!("{name}-tls")]);
    let second = docs(&text);
    assert_eq!(
        find(&second, "Secret")["data"],
        secret["data"],
        "the pair was kept"
    );
    for kind in [
        "ValidatingWebhookConfiguration",
        "MutatingWebhookConfiguration",
    ] {
        assert_eq!(
            find(&second, kind)["webhooks"][0]["clientConfig"]["caBundle"],
            secret["data"]["ca.crt"],
            "{kind} caBundle is the kept CA"
        );
    }
    // Without the Secret, a new pair (the lookup is what keeps it).
    let third = render(&[&set]);
    assert_ne!(find(&third, "Secret")["data"], secret["data"]);
}

fn tempdir(prefix: &str) -> PathBuf {
    let dir = cluster_dir().join(format!("{prefix}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    dir
}
