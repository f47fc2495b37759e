//! The webhook's verdicts against the real apiserver's (invariant 2): it
//! must let a pod go wherever eviction.go would, and refuse it only where
//! eviction.go would refuse it too.

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, LabelSelectorRequirement};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::api::ListParams;
use kube::api::{EvictParams, Patch, PatchParams, PostParams};
use kube::Api;
use serde_json::json;

use crate::support::*;

/// kwok leaves a pod with this annotation unready (tests/cluster/kwok/stages.yaml).
const STAY_UNREADY: &str = "eviction-autoscaler.test/stay-unready";

/// Marks one Ready pod of `app` not Ready, for good; returns its name.
async fn make_one_unready(ns: &TestNs, app: &str) -> String {
    let pods: Api<Pod> = ns.api();
    let name = a_ready_pod(ns, app).await;
    pods.patch(
        &name,
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"annotations": {STAY_UNREADY: "true"}}})),
    )
    .await
    .unwrap_or_else(|e| panic!("annotate {name}: {e}"));
    let status = json!({"status": {"conditions": [
        {"type": "Ready", "status": "False", "reason": "E2E"},
        {"type": "ContainersReady", "status": "False", "reason": "E2E"}]}});
    pods.patch_status(&name, &PatchParams::default(), &Patch::Strategic(status))
        .await
        .unwrap_or_else(|e| panic!("mark {name} not Ready: {e}"));
    name
}

/// The 429 came from the webhook (the apiserver wraps a webhook's denial
/// in these words), not from the apiserver's own PDB check.
fn from_webhook(e: &kube::Error) -> bool {
    matches!(e, kube::Error::Api(s) if s.code == 429 && s.message.contains("admission webhook"))
}

/// One Deployment per policy, each under a user PDB of minAvailable 3 over
/// its 3 pods, one of them not Ready: 2 healthy of 3, no disruption
/// allowed. AlwaysAllow lets the unready pod go at the first attempt (the
/// webhook must not refuse it, nor surge); IfHealthyBudget keeps it while
/// the budget is short (the webhook holds or refuses it and surges), then
/// lets it go once the surge's pod makes the budget healthy.
#[tokio::test]
async fn unhealthy_pod_policies_agree_with_the_apiserver() {
    // No cordon meanwhile: a surge of ua by another test's cordon would
    // look like one for the unready pod.
    let _nodes = nodes_lock().await;
    let ns = TestNs::new("e2e-unhealthy").await;
    let (pdbs, deps): (Api<PodDisruptionBudget>, Api<Deployment>) = (ns.api(), ns.api());
    for (app, policy) in [("ua", "AlwaysAllow"), ("ui", "IfHealthyBudget")] {
        let mut pdb = user_pdb(app, app, Some(IntOrString::Int(3)), None);
        if let Some(spec) = pdb.spec.as_mut() {
            spec.unhealthy_pod_eviction_policy = Some(policy.into());
        }
        pdbs.create(&PostParams::default(), &pdb)
            .await
            .unwrap_or_else(|e| panic!("create PDB {app}: {e}"));
        deps.create(&PostParams::default(), &deployment(app, 3, None))
            .await
            .unwrap_or_else(|e| panic!("create Deployment {app}: {e}"));
    }
    let mut unready = Vec::new();
    for app in ["ua", "ui"] {
        wait_pdb_blocking(&ns, app, 3).await;
        unready.push(make_one_unready(&ns, app).await);
        wait_pdb(&ns, app, "2 healthy of 3, no disruption allowed", |p| {
            p.status.as_ref().is_some_and(|s| {
                s.current_healthy == 2
                    && s.desired_healthy == 3
                    && s.disruptions_allowed == 0
                    && s.observed_generation == p.metadata.generation
            })
        })
        .await;
    }
    let pods = pods_without_retry(&ns).await;

    pods.evict(&unready[0], &EvictParams::default())
        .await
        .unwrap_or_else(|e| {
            panic!("AlwaysAllow: the apiserver lets an unready pod go, the webhook refused it: {e}")
        });
    assert_eq!(
        deployment_state(&ns, "ua").await,
        (3, Some(false)),
        "AlwaysAllow: let go at once, without a surge"
    );

    // The webhook holds or refuses it (with a surge) until the surge's pod
    // is Ready and the budget healthy; were it to let the pod go before,
    // the apiserver would refuse it and nothing would surge. Sampled, not
    // read after: the last eviction may be held for most of the cooldown,
    // and the surge go back right after it is allowed.
    let sampler = ReplicaSampler::start(&ns, "ui");
    wait_for(
        "the unready pod of ui let go once the budget is healthy",
        Duration::from_secs(60),
        || async {
            match pods.evict(&unready[1], &EvictParams::default()).await {
                Ok(_) => Some(()),
                Err(e) => {
                    assert!(
                        from_webhook(&e),
                        "only the webhook refuses it (with its surge), not the apiserver: {e}"
                    );
                    None
                }
            }
        },
    )
    .await;
    // Surged when it was let go: seen by the sampler before the allow (a
    // surge written just before it may fall between two samples), or read
    // right after it (a long hold may have the surge go back soon after).
    let allowed_at = std::time::Instant::now();
    let (replicas, markers) = deployment_state(&ns, "ui").await;
    let samples = sampler.finish().await;
    let before: Vec<i32> = samples
        .iter()
        .filter(|(t, _)| *t <= allowed_at)
        .map(|(_, r)| *r)
        .collect();
    assert!(
        before.contains(&4) || (replicas == 4 && markers == Some(true)),
        "IfHealthyBudget: let go only with the surge in place (ui before the allow: {before:?}; \
         after it: {replicas}, markers {markers:?})"
    );
}

/// The pod a case evicts.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Victim {
    Ready,
    /// Running, not Ready.
    Unready,
    /// Never scheduled (a node selector no node has).
    Pending,
    /// Deleted, held Terminating by a finalizer (a replacement comes up).
    Terminating,
    /// Ready, and no controller: the pods are made bare, not by a Deployment.
    Bare,
}

/// The users' PDBs' selector.
#[derive(Clone, Debug)]
enum Sel {
    /// `app=<app>`.
    App,
    /// `{}`: every pod of the namespace (policy/v1).
    Everything,
    /// `app In [<app>]` and these requirements (key, operator, values).
    Exprs(Vec<(&'static str, &'static str, Vec<&'static str>)>),
}

struct Case {
    app: &'static str,
    replicas: i32,
    /// Unready pods among them (the victim first when it is `Unready`).
    unready: usize,
    victim: Victim,
    /// Users' PDBs over the app: (minAvailable, maxUnavailable, policy).
    pdbs: Vec<(
        Option<IntOrString>,
        Option<IntOrString>,
        Option<&'static str>,
    )>,
    selector: Sel,
}

/// `app`'s PDB `name` over its pods as `sel` says.
fn case_pdb(
    name: &str,
    app: &str,
    sel: &Sel,
    min: Option<IntOrString>,
    max: Option<IntOrString>,
) -> PodDisruptionBudget {
    match sel {
        Sel::App => user_pdb(name, app, min, max),
        Sel::Everything => user_pdb_over(name, &[], min, max),
        Sel::Exprs(reqs) => {
            let mut pdb = user_pdb_over(name, &[], min, max);
            let mut exprs = vec![LabelSelectorRequirement {
                key: "app".into(),
                operator: "In".into(),
                values: Some(vec![app.into()]),
            }];
            exprs.extend(reqs.iter().map(|(k, op, vs)| LabelSelectorRequirement {
                key: k.to_string(),
                operator: op.to_string(),
                values: (!vs.is_empty()).then(|| vs.iter().map(|v| v.to_string()).collect()),
            }));
            if let Some(spec) = pdb.spec.as_mut() {
                spec.selector = Some(LabelSelector {
                    match_expressions: Some(exprs),
                    ..Default::default()
                });
            }
            pdb
        }
    }
}

fn cases() -> Vec<Case> {
    let int = |n| Some(IntOrString::Int(n));
    let pct = |p: &str| Some(IntOrString::String(p.into()));
    vec![
        // Blocks: 3 of 3 needed.
        Case {
            app: "full",
            replicas: 3,
            unready: 0,
            victim: Victim::Ready,
            pdbs: vec![(int(3), None, None)],
            selector: Sel::App,
        },
        // maxUnavailable 0.
        Case {
            app: "maxzero",
            replicas: 3,
            unready: 0,
            victim: Victim::Ready,
            pdbs: vec![(None, int(0), None)],
            selector: Sel::App,
        },
        // 50% of 3 rounds up to 2: one disruption allowed.
        Case {
            app: "half",
            replicas: 3,
            unready: 0,
            victim: Victim::Ready,
            pdbs: vec![(pct("50%"), None, None)],
            selector: Sel::App,
        },
        // 67% of 3 rounds up to 3: none.
        Case {
            app: "twothirds",
            replicas: 3,
            unready: 0,
            victim: Victim::Ready,
            pdbs: vec![(pct("67%"), None, None)],
            selector: Sel::App,
        },
        // maxUnavailable 34% of 3 rounds up to 2 unavailable.
        Case {
            app: "maxpct",
            replicas: 3,
            unready: 0,
            victim: Victim::Ready,
            pdbs: vec![(None, pct("34%"), None)],
            selector: Sel::App,
        },
        // minAvailable 0.
        Case {
            app: "zero",
            replicas: 2,
            unready: 0,
            victim: Victim::Ready,
            pdbs: vec![(int(0), None, None)],
            selector: Sel::App,
        },
        // Pending pods are let go whatever the budget.
        Case {
            app: "pending",
            replicas: 2,
            unready: 0,
            victim: Victim::Pending,
            pdbs: vec![(int(2), None, None)],
            selector: Sel::App,
        },
        // Unready, the default policy, budget met (2 healthy of 2 needed).
        Case {
            app: "unready-met",
            replicas: 3,
            unready: 1,
            victim: Victim::Unready,
            pdbs: vec![(int(2), None, None)],
            selector: Sel::App,
        },
        // Unready, the default policy, budget short.
        Case {
            app: "unready-short",
            replicas: 3,
            unready: 1,
            victim: Victim::Unready,
            pdbs: vec![(int(3), None, None)],
            selector: Sel::App,
        },
        // Unready, AlwaysAllow, budget short.
        Case {
            app: "unready-always",
            replicas: 3,
            unready: 1,
            victim: Victim::Unready,
            pdbs: vec![(int(3), None, Some("AlwaysAllow"))],
            selector: Sel::App,
        },
        // A Ready pod beside an unready one, AlwaysAllow: the policy is for unready pods only.
        Case {
            app: "ready-always",
            replicas: 3,
            unready: 1,
            victim: Victim::Ready,
            pdbs: vec![(int(2), None, Some("AlwaysAllow"))],
            selector: Sel::App,
        },
        // Two PDBs over one pod: the apiserver's own 500.
        Case {
            app: "two",
            replicas: 2,
            unready: 0,
            victim: Victim::Ready,
            pdbs: vec![(int(1), None, None), (int(0), None, None)],
            selector: Sel::App,
        },
        // A Terminating pod is let go whatever the budget (3 of 3 needed).
        Case {
            app: "terminating",
            replicas: 3,
            unready: 0,
            victim: Victim::Terminating,
            pdbs: vec![(int(3), None, None)],
            selector: Sel::App,
        },
        // Bare pods (no Deployment) under a blocking PDB: the apiserver's own 429.
        Case {
            app: "bare",
            replicas: 3,
            unready: 0,
            victim: Victim::Bare,
            pdbs: vec![(int(3), None, None)],
            selector: Sel::App,
        },
        // matchExpressions: NotIn selects pods without the label; room for one.
        Case {
            app: "notin",
            replicas: 3,
            unready: 0,
            victim: Victim::Ready,
            pdbs: vec![(int(2), None, None)],
            selector: Sel::Exprs(vec![("tier", "NotIn", vec!["canary"])]),
        },
        // matchExpressions: DoesNotExist selects them too; 3 of 3 needed.
        Case {
            app: "noexist",
            replicas: 3,
            unready: 0,
            victim: Victim::Ready,
            pdbs: vec![(int(3), None, None)],
            selector: Sel::Exprs(vec![("tier", "DoesNotExist", vec![])]),
        },
    ]
}

/// Sets a case up in `ns`; returns the pod it evicts.
async fn set_up(ns: &TestNs, c: &Case) -> String {
    let (pdbs, deps): (Api<PodDisruptionBudget>, Api<Deployment>) = (ns.api(), ns.api());
    for (i, (min, max, policy)) in c.pdbs.iter().enumerate() {
        let name = format!("{}-{i}", c.app);
        let mut pdb = case_pdb(&name, c.app, &c.selector, min.clone(), max.clone());
        if let Some(spec) = pdb.spec.as_mut() {
            spec.unhealthy_pod_eviction_policy = policy.map(str::to_string);
        }
        pdbs.create(&PostParams::default(), &pdb)
            .await
            .unwrap_or_else(|e| panic!("create a PDB of {}: {e}", c.app));
    }
    let mut d = deployment(c.app, c.replicas, None);
    if c.victim == Victim::Pending {
        if let Some(spec) = d.spec.as_mut().and_then(|s| s.template.spec.as_mut()) {
            spec.node_selector = Some(BTreeMap::from([("no-such-node".into(), "x".into())]));
        }
    }
    if c.victim == Victim::Terminating {
        if let Some(meta) = d.spec.as_mut().map(|s| &mut s.template.metadata) {
            meta.get_or_insert_with(Default::default).finalizers =
                Some(vec![HOLD_FINALIZER.into()]);
        }
    }
    if c.victim == Victim::Bare {
        // The Deployment's pods, made by hand: no owner.
        let pods: Api<Pod> = ns.api();
        let template = d.spec.map(|s| s.template).unwrap_or_default();
        for i in 0..c.replicas {
            let mut metadata = template.metadata.clone().unwrap_or_default();
            metadata.name = Some(format!("{}-{i}", c.app));
            let pod = Pod {
                metadata,
                spec: template.spec.clone(),
                status: None,
            };
            pods.create(&PostParams::default(), &pod)
                .await
                .unwrap_or_else(|e| panic!("create a bare pod of {}: {e}", c.app));
        }
    } else {
        deps.create(&PostParams::default(), &d)
            .await
            .unwrap_or_else(|e| panic!("create Deployment {}: {e}", c.app));
    }
    if c.victim == Victim::Pending {
        let pods: Api<Pod> = ns.api();
        return wait_for(
            &format!("{} Pending pods of {}", c.replicas, c.app),
            Duration::from_secs(60),
            || async {
                let list = pods
                    .list(&ListParams::default().labels(&format!("app={}", c.app)))
                    .await
                    .ok()?;
                (list.items.len() == c.replicas as usize)
                    .then(|| list.items[0].metadata.name.clone())
                    .flatten()
            },
        )
        .await;
    }
    wait_ready(ns, c.app, c.replicas as usize).await;
    let mut unready = Vec::new();
    for _ in 0..c.unready {
        unready.push(make_one_unready(ns, c.app).await);
        // The next one must be another pod.
        wait_for(
            "the pod seen not Ready",
            Duration::from_secs(30),
            || async {
                (ready_pods(ns, c.app).await.len() == c.replicas as usize - unready.len())
                    .then_some(())
            },
        )
        .await;
    }
    match c.victim {
        Victim::Unready => unready[0].clone(),
        Victim::Terminating => {
            let victim = a_ready_pod(ns, c.app).await;
            let pods: Api<Pod> = ns.api();
            pods.delete(&victim, &Default::default())
                .await
                .unwrap_or_else(|e| panic!("delete {victim}: {e}"));
            // Held by the finalizer; its replacement Ready beside it.
            wait_ready(ns, c.app, c.replicas as usize).await;
            victim
        }
        _ => a_ready_pod(ns, c.app).await,
    }
}

/// Every PDB of the case has counted its pods as they are now. (Not two
/// over one pod: the disruption controller counts neither; the apiserver
/// answers 500 before it reads a status.)
async fn counted(ns: &TestNs, c: &Case) {
    if c.pdbs.len() > 1 {
        return;
    }
    let healthy = match c.victim {
        Victim::Pending => 0,
        _ => c.replicas - c.unready as i32,
    };
    // A Terminating pod is still one of the PDB's pods (its replacement beside it).
    let expected = c.replicas + i32::from(c.victim == Victim::Terminating);
    for i in 0..c.pdbs.len() {
        wait_pdb(
            ns,
            &format!("{}-{i}", c.app),
            &format!("{healthy} healthy counted"),
            |p| {
                p.status.as_ref().is_some_and(|s| {
                    s.current_healthy == healthy
                        && s.expected_pods == expected
                        && s.observed_generation == p.metadata.generation
                })
            },
        )
        .await;
    }
}

/// The status code of one eviction attempt (201 when it went).
async fn attempt(pods: &Api<Pod>, name: &str) -> (u16, bool) {
    match pods.evict(name, &EvictParams::default()).await {
        Ok(_) => (201, false),
        Err(kube::Error::Api(s)) => {
            let webhook = s.message.contains("admission webhook");
            (s.code, webhook)
        }
        Err(e) => panic!("evict {name}: {e}"),
    }
}

/// The cases in a namespace out of scope (the webhook lets everything
/// through there: the apiserver alone decides) and in one in scope: where
/// the apiserver alone lets a pod go, so does the pair at the first
/// attempt; where it refuses, the pair refuses too or lets it go later
/// (after a hold, with a surge); its other answers (500 for two PDBs) are
/// its own in both.
async fn compare(prefix: &str, cases: Vec<Case>, answers: &[&str]) {
    // No cordon of another test meanwhile: it would surge the pods of the
    // namespace in scope on that node, and the two sides would differ.
    let _nodes = nodes_lock().await;
    let alone = TestNs::with_annotations(
        &format!("{prefix}-off"),
        &[("eviction-autoscaler.azure.com/enable", "false")],
    )
    .await;
    let with = TestNs::new(&format!("{prefix}-on")).await;
    let _release = (
        ReleasePods(alone.name.clone()),
        ReleasePods(with.name.clone()),
    );
    let mut victims = Vec::new();
    for c in &cases {
        victims.push((set_up(&alone, c).await, set_up(&with, c).await));
    }
    for c in &cases {
        counted(&alone, c).await;
        counted(&with, c).await;
    }
    let (pa, pw) = (
        pods_without_retry(&alone).await,
        pods_without_retry(&with).await,
    );
    let mut table = Vec::new();
    for (c, (va, vw)) in cases.iter().zip(&victims) {
        let (code_alone, by_webhook_alone) = attempt(&pa, va).await;
        let (code_with, by_webhook) = attempt(&pw, vw).await;
        assert!(
            !by_webhook_alone,
            "{}: the webhook refused out of scope",
            c.app
        );
        // Pods no Deployment owns pass through untouched (behaviour.md section 2).
        assert!(
            !(c.victim == Victim::Bare && by_webhook),
            "{}: the webhook refused a pod no Deployment owns",
            c.app
        );
        let agrees = match code_alone {
            201 => code_with == 201,
            429 => code_with == 429 || code_with == 201,
            other => code_with == other && !by_webhook,
        };
        table.push(format!(
            "{:15} apiserver alone {code_alone}, with the webhook {code_with}{}",
            c.app,
            if by_webhook { " (the webhook's)" } else { "" }
        ));
        assert!(
            agrees,
            "{}: the apiserver alone answered {code_alone}, with the webhook {code_with}:\n{}",
            c.app,
            table.join("\n")
        );
    }
    eprintln!("{}", table.join("\n"));
    // The cases cover the answers asked for.
    for want in answers {
        assert!(
            table.iter().any(|l| l.contains(want)),
            "no case answered {want}:\n{}",
            table.join("\n")
        );
    }
}

/// The cases of [`cases`]: let go, refused, the apiserver's own 500.
#[tokio::test]
async fn the_webhook_refuses_only_what_the_apiserver_refuses() {
    compare(
        "e2e-agree",
        cases(),
        &["alone 201", "alone 429", "alone 500"],
    )
    .await;
}

/// A PDB whose selector is `{}` protects every pod of its namespace in
/// policy/v1 (it protected none in v1beta1): blocking, then with room.
#[tokio::test]
async fn an_empty_selector_protects_every_pod_for_both() {
    let c = |app, min| Case {
        app,
        replicas: 3,
        unready: 0,
        victim: Victim::Ready,
        pdbs: vec![(Some(IntOrString::Int(min)), None, None)],
        selector: Sel::Everything,
    };
    compare("e2e-agree-all", vec![c("all", 3)], &["alone 429"]).await;
    compare("e2e-agree-room", vec![c("room", 2)], &["alone 201"]).await;
}
