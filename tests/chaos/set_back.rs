//! A Deployment's replicas set back to exactly our surged number while the
//! product was down (someone lowered it, then wrote our number themselves):
//! nothing of ours saw the change, and the value equals the surge. The
//! Deployment's managedFields show that someone other than the product
//! wrote it through the Deployment itself, so it is theirs: kept, not
//! reverted to the baseline (invariant 4, `surge::writer`).
//!
//! The same holds for an HPA's or a ScaledObject's minimum set back to our
//! raised number.
//!
//! It also checks the premise on the real apiserver: created by a
//! server-side apply (a GitOps tool), the Deployment's `spec.replicas`
//! belongs to our field manager once the surge is written, so a surge over
//! a GitOps-owned value is never read as someone's.

use std::time::Duration;

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::autoscaling::v2::HorizontalPodAutoscaler;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::api::{Patch, PatchParams, PostParams};
use kube::core::DynamicObject;
use kube::Api;

use eviction_autoscaler::surge::writer::{replicas_writer, writer, Field, ReplicasWriter};

use crate::fleet::blocked_on_node;
use crate::keda_removed::server_with_keda;
use crate::support::*;

/// The shared server started again and the node uncordoned, however the
/// test ends.
pub struct Restore(pub &'static str);

impl Drop for Restore {
    fn drop(&mut self) {
        uncordon(self.0);
        let _ = restart_server(&[]);
    }
}

/// Deployment `name` (3 replicas, maxSurge 100%, pods preferring `node`)
/// under an HPA of minimum 3, surged by a cordon of `node`: the Deployment
/// and the HPA's minimum at t, with markers. Returns the guard and t.
async fn surged_under_an_hpa(ns: &TestNs, name: &str, node: &'static str) -> (Restore, i32) {
    let deps: Api<Deployment> = ns.api();
    let d = rolling_max_surge(
        deployment(name, 3, Some(node)),
        IntOrString::String("100%".into()),
    );
    deps.create(&PostParams::default(), &d)
        .await
        .expect("create Deployment");
    let hpas: Api<HorizontalPodAutoscaler> = ns.api();
    hpas.create(&PostParams::default(), &hpa(name, name, 3))
        .await
        .expect("create HPA");
    let on_node = ready_on_node(ns, name, 3, node).await.len() as i32;
    wait_pdb_blocking(ns, name, 3).await;

    let restore = Restore(node);
    kubectl_ok(&["cordon", node]);
    let t = 3 + on_node;
    wait_deployment(ns, name, t, true, Duration::from_secs(30)).await;
    wait_hpa_min(&hpas, name, t, Some(true), Duration::from_secs(30)).await;
    (restore, t)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn our_number_set_back_while_the_product_was_down_is_kept() {
    let _g = nodes_lock().await;
    let _ = restart_server(&[]);
    let ns = TestNs::new("chaos-setback").await;
    let deps: Api<Deployment> = ns.api();
    let node = "kwok-node-1";
    let d = rolling_max_surge(
        deployment("back", 3, Some(node)),
        IntOrString::String("100%".into()),
    );
    deps.patch("back", &PatchParams::apply("gitops"), &Patch::Apply(&d))
        .await
        .expect("server-side apply");
    let on_node = ready_on_node(&ns, "back", 3, node).await.len() as i32;
    wait_pdb_blocking(&ns, "back", 3).await;

    let restore = Restore(node);
    kubectl_ok(&["cordon", node]);
    let t = 3 + on_node;
    wait_deployment(&ns, "back", t, true, Duration::from_secs(30)).await;
    let surged = deps.get("back").await.expect("Deployment");
    assert_eq!(
        replicas_writer(&surged.metadata),
        ReplicasWriter::Unknown,
        "the surge took spec.replicas from the server-side apply: {:?}",
        surged.metadata.managed_fields
    );

    // The product down; someone lowers the Deployment and sets it back to
    // exactly our number.
    stop_server();
    assert_eq!(
        patch_replicas(&ns, "back", &[2, t]).await,
        ReplicasWriter::Someone,
        "kubectl patch is read as someone's"
    );

    // Back, and the drain over: their value stays, our markers go.
    let _ = restart_server(&[]);
    uncordon(node);
    assert_settled_at(&ns, "back", t, Duration::from_secs(60)).await;
    drop(restore);
}

/// The same under an HPA surge (its minimum and the Deployment raised):
/// while the product is down, someone changes the Deployment and writes our
/// number back through the Deployment itself. Their value is kept, and the
/// HPA goes back to its own minimum.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn our_number_set_back_under_an_hpa_while_the_product_was_down_is_kept() {
    let _g = nodes_lock().await;
    let _ = restart_server(&[]);
    let ns = TestNs::new("chaos-setback-hpa").await;
    let node = "kwok-node-1";
    let (restore, t) = surged_under_an_hpa(&ns, "hback", node).await;
    let hpas: Api<HorizontalPodAutoscaler> = ns.api();

    // The product down; someone scales up and back to exactly our number
    // (above the HPA's minimum, so the HPA lifts nothing in between).
    stop_server();
    assert_eq!(
        patch_replicas(&ns, "hback", &[t + 1, t]).await,
        ReplicasWriter::Someone,
        "kubectl patch is read as someone's"
    );

    // Back, and the drain over: the HPA's minimum goes back to 3, their
    // value stays (no metrics: the HPA keeps it), our markers go.
    let _ = restart_server(&[]);
    uncordon(node);
    wait_hpa_min(&hpas, "hback", 3, Some(false), Duration::from_secs(60)).await;
    assert_settled_at(&ns, "hback", t, Duration::from_secs(60)).await;
    drop(restore);
}

/// The HPA's own minimum, raised by a surge, set back to exactly our number
/// while the product was down (`kubectl patch` to t + 1, then t): its
/// managedFields show someone wrote `spec.minReplicas`, so t is theirs. The
/// HPA keeps t (our markers go), and the Deployment is not lowered below it.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn our_minimum_set_back_on_the_hpa_while_the_product_was_down_is_kept() {
    let _g = nodes_lock().await;
    let _ = restart_server(&[]);
    let ns = TestNs::new("chaos-setback-min").await;
    let node = "kwok-node-1";
    let (restore, t) = surged_under_an_hpa(&ns, "mback", node).await;
    let deps: Api<Deployment> = ns.api();
    let hpas: Api<HorizontalPodAutoscaler> = ns.api();
    let raised = hpas.get("mback").await.expect("HPA");
    assert_eq!(
        writer(&raised.metadata, Field::MinReplicas),
        ReplicasWriter::Unknown,
        "the surge took spec.minReplicas: {:?}",
        raised.metadata.managed_fields
    );

    // The product down; someone raises the HPA's minimum and sets it back
    // to exactly our number.
    stop_server();
    patch_spec(&ns, "hpa/mback", "minReplicas", &[t + 1, t]);
    let set = hpas.get("mback").await.expect("HPA");
    assert_eq!(
        writer(&set.metadata, Field::MinReplicas),
        ReplicasWriter::Someone,
        "kubectl patch is read as someone's: {:?}",
        set.metadata.managed_fields
    );
    // The HPA controller reads the HPA from its cache every 15 s, so it
    // has likely not lifted the Deployment to t + 1 in between; if it has,
    // it lowers nothing back (no metrics).

    // Back, and the drain over: their minimum stays at t, our markers go
    // from the HPA, and the Deployment keeps at least t.
    let _ = restart_server(&[]);
    uncordon(node);
    wait_hpa_min(&hpas, "mback", t, Some(false), Duration::from_secs(60)).await;
    wait_for(
        "the Deployment without markers",
        Duration::from_secs(60),
        || async {
            let d = deps.get("mback").await.ok()?;
            (markers_present(d.metadata.annotations.as_ref()) == Some(false)).then_some(())
        },
    )
    .await;
    let d = deps.get("mback").await.expect("Deployment");
    let replicas = d.spec.as_ref().and_then(|s| s.replicas);
    assert!(
        replicas >= Some(t),
        "the Deployment went below their minimum {t}: {replicas:?}"
    );
    drop(restore);
}

/// The same for a KEDA ScaledObject's `minReplicaCount` (a custom resource:
/// the apiserver keeps its managedFields as for a built-in kind). No KEDA
/// operator runs here, so nothing lifts the Deployment: the product raises
/// both. While the product is down, someone sets the minimum to t + 1 and
/// back to t through the ScaledObject: theirs. It stays at t without our
/// markers, and the Deployment is lowered to t, not below their minimum.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn our_minimum_set_back_on_a_scaled_object_while_the_product_was_down_is_kept() {
    let _g = nodes_lock().await;
    server_with_keda().await;
    let ns = TestNs::new("chaos-setback-keda").await;
    let sos = create_scaled_object(&ns, "kback", 3).await;
    let node = "kwok-node-1";
    let t = 3 + blocked_on_node(&ns, "kback", node).await.len() as i32;
    let restore = Restore(node);
    kubectl_ok(&["cordon", node]);
    let min_of = |so: &DynamicObject| so.data["spec"]["minReplicaCount"].as_i64();
    let raised = wait_for(
        "the ScaledObject's minReplicaCount raised with markers",
        Duration::from_secs(30),
        || async {
            let so = sos.get("kback").await.ok()?;
            (min_of(&so) == Some(t.into())
                && markers_present(so.metadata.annotations.as_ref()) == Some(true))
            .then_some(so)
        },
    )
    .await;
    wait_deployment(&ns, "kback", t, true, Duration::from_secs(30)).await;
    assert_eq!(
        writer(&raised.metadata, Field::MinReplicaCount),
        ReplicasWriter::Unknown,
        "the surge took spec.minReplicaCount: {:?}",
        raised.metadata.managed_fields
    );

    // The product down; someone raises the minimum and sets it back to
    // exactly our number.
    stop_server();
    patch_spec(
        &ns,
        "scaledobject.keda.sh/kback",
        "minReplicaCount",
        &[t + 1, t],
    );
    let set = sos.get("kback").await.expect("ScaledObject");
    assert_eq!(
        writer(&set.metadata, Field::MinReplicaCount),
        ReplicasWriter::Someone,
        "kubectl patch is read as someone's: {:?}",
        set.metadata.managed_fields
    );

    // Back, and the drain over: their minimum stays at t without our
    // markers, and the Deployment settles at t (not at 3, below it).
    let _ = restart_server(&[]);
    uncordon(node);
    let kept = wait_for(
        "the ScaledObject without markers",
        Duration::from_secs(60),
        || async {
            let so = sos.get("kback").await.ok()?;
            (markers_present(so.metadata.annotations.as_ref()) == Some(false)).then_some(so)
        },
    )
    .await;
    assert_eq!(min_of(&kept), Some(t.into()), "their minimum was not kept");
    assert_settled_at(&ns, "kback", t, Duration::from_secs(60)).await;
    drop(restore);
}
