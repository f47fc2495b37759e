//! Names shared with the AKS extension (behaviour.md section 1): a
//! compatibility interface, never to be renamed.

pub const GROUP: &str = "eviction-autoscaler.azure.com";
/// On PDBs and EvictionAutoScalers we create.
pub const OWNED_BY: &str = "ownedBy";
pub const OWNED_BY_VALUE: &str = "EvictionAutoScaler";
pub const TARGET: &str = "target";
/// Namespace opt-in / opt-out.
pub const ENABLE: &str = "eviction-autoscaler.azure.com/enable";
/// Deployment opt-out of PDB creation.
pub const PDB_CREATE: &str = "eviction-autoscaler.azure.com/pdb-create";
/// Added by the mutating webhook to a Deployment whose PDB it created.
pub const PDB_ANNOTATION: &str = "eviction-autoscaler.azure.com/pdb";
/// Surge markers on the object the surge changed.
pub const SURGE_REPLICAS: &str = "evictionSurgeReplicas";
pub const ORIGINAL_MIN_REPLICAS: &str = "eviction-autoscaler.azure.com/original-min-replicas";
/// Field manager for our writes.
pub const MANAGER: &str = "eviction-autoscaler";
/// The apiserver's own words when a budget blocks an eviction.
pub const APISERVER_PDB_MESSAGE: &str =
    "Cannot evict pod as it would violate the pod's disruption budget.";
/// `policyv1.DisruptionBudgetCause`.
pub const DISRUPTION_BUDGET_CAUSE: &str = "DisruptionBudget";
