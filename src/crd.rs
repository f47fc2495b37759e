//! The `EvictionAutoScaler` custom resource (behaviour.md sections 1 and 7).
//! Field names are the AKS extension's; fields beyond them are additions.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// One per PDB that protects an in-scope Deployment.
#[derive(CustomResource, Serialize, Deserialize, Debug, Clone, PartialEq, JsonSchema, Default)]
#[kube(
    group = "eviction-autoscaler.azure.com",
    version = "v1",
    kind = "EvictionAutoScaler",
    plural = "evictionautoscalers",
    singular = "evictionautoscaler",
    shortname = "eas",
    namespaced,
    status = "EvictionAutoScalerStatus",
    printcolumn = r#"{"name":"Target", "type":"string", "jsonPath":".spec.targetName"}"#,
    printcolumn = r#"{"name":"Baseline", "type":"integer", "jsonPath":".status.baselineReplicas"}"#,
    printcolumn = r#"{"name":"Replicas", "type":"integer", "jsonPath":".status.currentReplicas"}"#,
    printcolumn = r#"{"name":"Surge", "type":"integer", "jsonPath":".status.surgeReplicas"}"#,
    printcolumn = r#"{"name":"Allowed", "type":"integer", "jsonPath":".status.disruptionsAllowed", "description":"disruptionsAllowed of the PDB"}"#,
    printcolumn = r#"{"name":"Ready", "type":"string", "jsonPath":".status.conditions[?(@.type==\"Ready\")].status"}"#,
    printcolumn = r#"{"name":"Degraded", "type":"string", "jsonPath":".status.conditions[?(@.type==\"Degraded\")].status"}"#,
    printcolumn = r#"{"name":"Age", "type":"date", "jsonPath":".metadata.creationTimestamp"}"#
)]
#[serde(rename_all = "camelCase")]
pub struct EvictionAutoScalerSpec {
    /// Name of the Deployment protected by the PDB.
    pub target_name: String,
    /// Kind of the target; `deployment` (compared case-insensitively).
    #[serde(default = "default_kind")]
    pub target_kind: String,
    /// The last blocked eviction: the durable surge signal.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_eviction: Option<LastEviction>,
}

fn default_kind() -> String {
    "deployment".to_string()
}

#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, JsonSchema, Default)]
#[serde(rename_all = "camelCase")]
pub struct LastEviction {
    #[serde(default)]
    pub pod_name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub eviction_time: Option<Time>,
}

#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, JsonSchema, Default)]
#[serde(rename_all = "camelCase")]
pub struct EvictionAutoScalerStatus {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_eviction: Option<LastEviction>,
    /// The replica floor the PDB is kept at (replicas or autoscaler minimum).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min_replicas: Option<i32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deployment_generation: Option<i64>,
    /// Replicas before the surge (or now, when none is active).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub baseline_replicas: Option<i32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub current_replicas: Option<i32>,
    /// Replicas added by an active surge; 0 when none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub surge_replicas: Option<i32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub disruptions_allowed: Option<i32>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
    /// UID of the PDB of this name while it carried `ownedBy: EvictionAutoScaler`:
    /// the durable evidence that we created it, so that only a PDB we once
    /// owned ever has our ownerReference removed when it is handed over.
    #[serde(default, rename = "pdbUID", skip_serializing_if = "Option::is_none")]
    pub pdb_uid: Option<String>,
}

/// The CRD as YAML, for `manifests/` and `eviction-autoscaler crd`.
pub fn crd_yaml() -> Result<String, serde_norway::Error> {
    use kube::CustomResourceExt;
    serde_norway::to_string(&EvictionAutoScaler::crd())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The committed manifest must be what the Rust types generate.
    #[test]
    fn committed_crd_is_current() {
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/manifests/crd.yaml");
        let committed = std::fs::read_to_string(path).unwrap_or_default();
        let generated = crd_yaml().unwrap();
        assert!(
            committed == generated,
            "manifests/crd.yaml is stale: run `cargo run -- crd > manifests/crd.yaml`"
        );
    }

    #[test]
    fn names_are_the_compatibility_names() {
        use kube::CustomResourceExt;
        let crd = EvictionAutoScaler::crd();
        assert_eq!(crd.spec.group, "eviction-autoscaler.azure.com");
        assert_eq!(crd.spec.names.plural, "evictionautoscalers");
        assert_eq!(crd.spec.names.kind, "EvictionAutoScaler");
        assert_eq!(crd.spec.scope, "Namespaced");
        let v = &crd.spec.versions[0];
        assert_eq!(v.name, "v1");
        assert!(v
            .subresources
            .as_ref()
            .and_then(|s| s.status.as_ref())
            .is_some());
        let spec: EvictionAutoScalerSpec =
            serde_json::from_str(r#"{"targetName":"web","lastEviction":{"podName":"p","evictionTime":"2026-01-01T00:00:00Z"}}"#)
                .unwrap();
        assert_eq!(spec.target_kind, "deployment");
        assert_eq!(spec.last_eviction.unwrap().pod_name, "p");
    }
}
