//! Prometheus metrics (behaviour.md section 7), served on `/metrics`.
//! Gauges go up and down with the state they describe; counters only count events.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::registry::Registry;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct AdmissionLabels {
    pub webhook: &'static str,
    pub decision: &'static str,
    pub code: u16,
}

/// One request of the product's own to the apiserver (src/client.rs).
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ApiRequestLabels {
    pub verb: &'static str,
    /// Plural, with the subresource if any: `pods/eviction`.
    pub resource: String,
    /// HTTP status of the answer, or `error` / `timeout` when there was none.
    pub code: String,
}

/// One watch cache: the resource it holds (`pods`, `scaledobjects`, ...).
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct StoreLabel {
    pub resource: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct WebhookLabel {
    pub webhook: &'static str,
}

/// A held eviction (EVICTION_HOLD): what it waited for (`room` in a blocking
/// budget during a surge, or a `recount` of a PDB status that lags a
/// scale-down) and how it ended: `allowed`, `blocked` (a recount that
/// found the budget blocking), `expired` (the deadline: a 429 for room, an
/// allow for a recount) or `busy` (no permit left: answered at once).
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct HoldLabel {
    pub wait: &'static str,
    pub outcome: &'static str,
}

/// Buckets of `eviction_hold_seconds`: fine below a second (room that came
/// at once), then every second up to the longest answer (the largest
/// EVICTION_HOLD, 8 s, plus the live read after it).
pub const HOLD_BUCKETS: [f64; 13] = [
    0.1, 0.25, 0.5, 1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0, 9.0, 10.0,
];

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ControllerLabel {
    pub controller: &'static str,
}

/// A reconcile pass over every namespace ("full") or only the marked ones ("marked").
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct PassLabel {
    pub pass: &'static str,
}

/// The eviction webhook's label, and its decision for a budget that allows.
pub const EVICTIONS: &str = "evictions";
pub const BUDGET_ALLOWS: &str = "budget_allows";

pub struct Metrics {
    registry: Registry,
    pub admission_requests: Family<AdmissionLabels, Counter>,
    pub admission_duration: Family<WebhookLabel, Histogram>,
    /// The eviction webhook's series for its common answer (a budget that
    /// allows), resolved once: a family lookup hashes the labels and takes
    /// a lock on every request, about 0.4 us of the eviction path under
    /// load (`make bench`, session 19).
    pub evictions_allowed: Counter,
    pub evictions_duration: Histogram,
    pub blocked_evictions: Counter,
    pub active_surges: Gauge,
    pub surge_replicas: Gauge,
    pub surge_duration: Histogram,
    pub managed_pdbs: Gauge,
    pub reconcile_errors: Family<ControllerLabel, Counter>,
    pub reconcile_passes: Family<PassLabel, Counter>,
    pub reconcile_namespaces: Family<PassLabel, Counter>,
    pub leader: Gauge,
    pub client_cert_missing: Counter,
    pub api_requests: Family<ApiRequestLabels, Counter>,
    /// Changes (added, modified, deleted objects) the watch caches received:
    /// what may wake the reconciler, so a busy one can be told from a busy cluster.
    pub watch_events: Family<StoreLabel, Counter>,
    pub eviction_holds: Family<HoldLabel, Counter>,
    /// How long each hold lasted, from the request's arrival (which
    /// EVICTION_HOLD bounds) to its end: what tells an operator whether the
    /// hold is long enough for the cluster's replacement pods.
    pub eviction_hold_seconds: Family<HoldLabel, Histogram>,
    pub evictions_held: Gauge,
    pub events_dropped: Counter,
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl Metrics {
    pub fn new() -> Self {
        let mut registry = Registry::with_prefix("eviction_autoscaler");
        let admission_requests = Family::<AdmissionLabels, Counter>::default();
        registry.register(
            "admission_requests",
            "Admission requests by webhook, decision and HTTP code of the answer",
            admission_requests.clone(),
        );
        let admission_duration = Family::<WebhookLabel, Histogram>::new_with_constructor(|| {
            Histogram::new(exponential_buckets(0.0001, 2.5, 12))
        });
        registry.register(
            "admission_duration_seconds",
            "Time spent answering one admission request",
            admission_duration.clone(),
        );
        let evictions_allowed = admission_requests
            .get_or_create(&AdmissionLabels {
                webhook: EVICTIONS,
                decision: BUDGET_ALLOWS,
                code: 200,
            })
            .clone();
        let evictions_duration = admission_duration
            .get_or_create(&WebhookLabel { webhook: EVICTIONS })
            .clone();
        let blocked_evictions = Counter::default();
        registry.register(
            "blocked_evictions",
            "Evictions answered 429 because a budget blocked them",
            blocked_evictions.clone(),
        );
        let active_surges = Gauge::default();
        registry.register(
            "active_surges",
            "Deployments currently surged",
            active_surges.clone(),
        );
        let surge_replicas = Gauge::default();
        registry.register(
            "surge_replicas",
            "Replicas added above the baselines, summed over active surges",
            surge_replicas.clone(),
        );
        let surge_duration = Histogram::new(exponential_buckets(5.0, 2.0, 10));
        registry.register(
            "surge_duration_seconds",
            "Time from surge start to scale back",
            surge_duration.clone(),
        );
        let managed_pdbs = Gauge::default();
        registry.register(
            "managed_pdbs",
            "PDBs owned by eviction-autoscaler",
            managed_pdbs.clone(),
        );
        let reconcile_errors = Family::<ControllerLabel, Counter>::default();
        registry.register(
            "reconcile_errors",
            "Failed reconciles by controller",
            reconcile_errors.clone(),
        );
        let reconcile_passes = Family::<PassLabel, Counter>::default();
        registry.register(
            "reconcile_passes",
            "Reconciler passes: resync sweeps over every namespace (full), or starts of jobs for namespaces that changed (marked)",
            reconcile_passes.clone(),
        );
        let reconcile_namespaces = Family::<PassLabel, Counter>::default();
        registry.register(
            "reconcile_namespaces",
            "Namespaces planned by the reconciler, by kind of pass",
            reconcile_namespaces.clone(),
        );
        let leader = Gauge::default();
        registry.register(
            "leader",
            "1 while this replica runs the controllers",
            leader.clone(),
        );
        let client_cert_missing = Counter::default();
        registry.register(
            "webhook_requests_without_client_cert",
            "Webhook requests refused (401) because CLIENT_CA_FILE is set and no client certificate was presented",
            client_cert_missing.clone(),
        );
        let api_requests = Family::<ApiRequestLabels, Counter>::default();
        registry.register(
            "api_requests",
            "Requests of this process to the Kubernetes API by verb, resource and code \
             (watches count when they start; a call retried by the client counts once)",
            api_requests.clone(),
        );
        let watch_events = Family::<StoreLabel, Counter>::default();
        registry.register(
            "watch_events",
            "Changes received by the watch caches by resource: objects added, modified or \
             deleted (not the objects of a relist)",
            watch_events.clone(),
        );
        let eviction_holds = Family::<HoldLabel, Counter>::default();
        registry.register(
            "eviction_holds",
            "Evictions held (EVICTION_HOLD), by what they waited for and outcome",
            eviction_holds.clone(),
        );
        let eviction_hold_seconds = Family::<HoldLabel, Histogram>::new_with_constructor(|| {
            Histogram::new(HOLD_BUCKETS.iter().copied())
        });
        registry.register(
            "eviction_hold_seconds",
            "Time from a held eviction's arrival to the end of its hold, by what it waited \
             for and outcome",
            eviction_hold_seconds.clone(),
        );
        let evictions_held = Gauge::default();
        registry.register(
            "evictions_held",
            "Blocked evictions being held right now",
            evictions_held.clone(),
        );
        let events_dropped = Counter::default();
        registry.register(
            "events_dropped",
            "Kubernetes Events dropped because 1,000 were already waiting to be sent",
            events_dropped.clone(),
        );
        Metrics {
            registry,
            admission_requests,
            admission_duration,
            evictions_allowed,
            evictions_duration,
            blocked_evictions,
            active_surges,
            surge_replicas,
            surge_duration,
            managed_pdbs,
            reconcile_errors,
            reconcile_passes,
            reconcile_namespaces,
            leader,
            client_cert_missing,
            api_requests,
            watch_events,
            eviction_holds,
            eviction_hold_seconds,
            evictions_held,
            events_dropped,
        }
    }

    /// Zeroes the gauges only the leader keeps current (managed PDBs, active
    /// surges, surge replicas): a replica that stopped leading no longer
    /// knows them, and must not report the last values it saw.
    pub fn reset_leader_gauges(&self) {
        self.managed_pdbs.set(0);
        self.active_surges.set(0);
        self.surge_replicas.set(0);
    }

    pub fn encode(&self) -> String {
        let mut out = String::new();
        // Writing into a String cannot fail.
        let _ = prometheus_client::encoding::text::encode(&mut out, &self.registry);
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn encodes_prefixed_families() {
        let m = Metrics::new();
        m.admission_requests
            .get_or_create(&AdmissionLabels {
                webhook: "evictions",
                decision: "allow",
                code: 200,
            })
            .inc();
        let text = m.encode();
        assert!(text.contains(
            "eviction_autoscaler_admission_requests_total{webhook=\"evictions\",decision=\"allow\",code=\"200\"} 1"
        ), "{text}");
        assert!(text.contains("eviction_autoscaler_leader 0"));
        assert!(text.ends_with("# EOF\n"));
    }

    #[test]
    fn the_eviction_handles_are_the_families_series() {
        let m = Metrics::new();
        m.evictions_allowed.inc();
        m.evictions_duration.observe(0.001);
        let text = m.encode();
        assert!(text.contains(
            "eviction_autoscaler_admission_requests_total{webhook=\"evictions\",decision=\"budget_allows\",code=\"200\"} 1"
        ), "{text}");
        assert!(
            text.contains(
                "eviction_autoscaler_admission_duration_seconds_count{webhook=\"evictions\"} 1"
            ),
            "{text}"
        );
    }
}
