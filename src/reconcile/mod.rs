//! The PDB reconciler: runs `plan::plan` for the namespaces whose
//! Deployments, PDBs, autoscalers, EvictionAutoScalers or annotations changed
//! (marked by the watch caches, `crate::dirty`), for those holding an object
//! whose backoff is over, and for every namespace each resync interval; then
//! performs the writes in one job per namespace, `CONCURRENCY` at a time
//! (`schedule`: a slow job gives up its slot). Pod and node updates cost it
//! nothing. Its writes are conflict-aware patches. A failing write is
//! retried with per-object backoff (`backoff`, 1 s doubling to 5 min, reset
//! on success) while every other object is written as planned; marks are
//! taken no more often than `MIN_PASS_INTERVAL`. Namespaces being deleted are
//! skipped, and the refusals a namespace deletion causes (403
//! NamespaceTerminating, 404, 409) are expected answers, logged at debug, not
//! reconcile errors. Jobs stop writing as soon as this replica stops leading.

pub mod backoff;
pub mod plan;
pub mod schedule;

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::stream::FuturesUnordered;
use futures::{FutureExt, StreamExt};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::ObjectReference;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, ObjectMeta, Time};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::api::{ListParams, Patch, PatchParams, PostParams};
use kube::core::{DynamicObject, Status};
use kube::runtime::events::{EventType, Recorder, Reporter};
use kube::{Api, Client, Resource};
use serde_json::json;
use tokio::sync::watch;

use crate::cache::{owned_by_us, Cache, Reader};
use crate::client::{delete_ours, Deleted};
use crate::crd::{EvictionAutoScaler, EvictionAutoScalerSpec, EvictionAutoScalerStatus};
use crate::dirty::{Dirty, Marks};
use crate::events::Events;
use crate::markers::Markers;
use crate::metrics::{ControllerLabel, Metrics, PassLabel};
use crate::names;
use crate::patch::{guarded_set, json_patch};
use crate::pdb::baseline_replicas;
use crate::scope;
use backoff::Backoff;
use plan::{Action, NamespaceSnapshot};
use schedule::{Limits, Origin, Schedule, Settled};

const MIN_PASS_INTERVAL: Duration = Duration::from_millis(500);
/// A resync this often, whatever was marked: the safety net for anything a
/// watch missed, and the clock for time-based rules (an orphan PDB's
/// grace). It leaves out the namespaces found settled ([`Settled`]) but
/// every `FULL_EVERY`th time.
const RESYNC: Duration = Duration::from_secs(30);
const FULL_EVERY: u32 = 10;
/// Namespaces planned and written at once, those whose job has run for
/// `SLOW_WRITE` aside: a namespace whose writes hang keeps its job but no
/// slot, up to `MAX_JOBS` jobs in all (`schedule`).
const CONCURRENCY: usize = 8;
const MAX_JOBS: usize = 32;
const LIMITS: Limits = Limits {
    fast: CONCURRENCY,
    total: MAX_JOBS,
    slow_after: SLOW_WRITE,
    restart_after: MIN_PASS_INTERVAL,
};

/// A running namespace job: its namespace, and what it found.
type Job<'a> = std::pin::Pin<Box<dyn std::future::Future<Output = (String, Planned)> + Send + 'a>>;

/// What a namespace job found.
struct Planned {
    /// The keys it planned to write (or report).
    keys: BTreeSet<String>,
    /// Nothing to write or report, nothing waiting on the clock, nothing
    /// left for a later job: see [`Settled`].
    settled: bool,
}
/// Bound on one write of a pass. The client's read timeout counts per
/// attempt and per read; a hung admission webhook on PDBs or a throttled
/// apiserver must not hold a pass for longer. (Events are not awaited at
/// all: `crate::events`.)
pub const WRITE_TIMEOUT: Duration = Duration::from_secs(10);

/// `call` within `limit`, else an error that `settle` books like any other
/// failure (backoff, `reconcile_errors`).
async fn bounded<T>(
    limit: Duration,
    call: impl std::future::Future<Output = Result<T, kube::Error>>,
) -> Result<T, kube::Error> {
    match tokio::time::timeout(limit, call).await {
        Ok(r) => r,
        Err(_) => Err(kube::Error::Service(
            format!("no answer within {limit:?}").into(),
        )),
    }
}

/// A write that says the apiserver (or a webhook it calls) is slow, not
/// that this object is wrong: the rest of the namespace waits for a later
/// pass rather than for one timeout after another. A timeout or a broken
/// connection, or any answer that took `SLOW_WRITE` or more: a hung
/// admission webhook of the namespace answers 500 only after its own
/// timeout, and 100 of those in a row would hold every other namespace's
/// pass for minutes.
fn slow(result: &Result<(), kube::Error>, took: Duration) -> bool {
    took >= SLOW_WRITE
        || matches!(
            result,
            Err(kube::Error::Service(_) | kube::Error::HyperError(_))
        )
}

/// See [`slow`]: a write answered in the normal way takes milliseconds.
const SLOW_WRITE: Duration = Duration::from_secs(2);

/// The time one namespace writes in one pass. Writes each a little under
/// `SLOW_WRITE` (a policy webhook under load), hundreds of them on a first
/// install, would otherwise hold the pass for many minutes, and with it
/// every namespace marked meanwhile (a step-aside among them: two budgets
/// over a pod until then). The rest is written in the next pass.
const NAMESPACE_SHARE: Duration = Duration::from_secs(10);

/// Why a Deployment cannot be served, shown as the Degraded condition.
/// Written by the reconciler and the surge worker, read when writing status.
/// A change marks the namespace, so the reconciler rewrites that status.
#[derive(Default, Clone)]
pub struct DegradedReasons {
    reasons: Arc<Mutex<HashMap<DeploymentKey, Reason>>>,
    dirty: Arc<Dirty>,
}

/// (namespace, Deployment name)
type DeploymentKey = (String, String);
/// (reason, human message)
type Reason = (String, String);

impl DegradedReasons {
    /// Reasons whose changes mark `dirty` (the cache's namespace marks).
    pub fn marking(dirty: Arc<Dirty>) -> Self {
        DegradedReasons {
            reasons: Arc::default(),
            dirty,
        }
    }

    pub fn set(&self, ns: &str, dep: &str, reason: &str, message: &str) {
        let value = (reason.to_string(), message.to_string());
        let changed = self.reasons.lock().is_ok_and(|mut m| {
            m.insert((ns.into(), dep.into()), value.clone()).as_ref() != Some(&value)
        });
        if changed {
            self.dirty.mark(ns);
        }
    }
    /// Clears the condition only if it has this reason.
    pub fn clear_reason(&self, ns: &str, dep: &str, reason: &str) {
        let removed = self.reasons.lock().is_ok_and(|mut m| {
            let key = (ns.to_string(), dep.to_string());
            m.get(&key).is_some_and(|(r, _)| r == reason) && m.remove(&key).is_some()
        });
        if removed {
            self.dirty.mark(ns);
        }
    }

    /// Clears every condition of this reason whose Deployment `keep` does
    /// not name (its cause is gone, or the Deployment itself).
    pub fn retain_reason(&self, reason: &str, keep: impl Fn(&str, &str) -> bool) {
        let mut marked = BTreeSet::new();
        if let Ok(mut m) = self.reasons.lock() {
            m.retain(|(ns, dep), (r, _)| {
                let stays = r != reason || keep(ns, dep);
                if !stays {
                    marked.insert(ns.clone());
                }
                stays
            });
        }
        for ns in marked {
            self.dirty.mark(&ns);
        }
    }

    /// Forgets the reasons of Deployments that are gone (no status to
    /// write, so nothing is marked): a Deployment deleted while in conflict
    /// would otherwise stay in the map for good.
    pub fn forget_gone(&self, exists: impl Fn(&str, &str) -> bool) {
        if let Ok(mut m) = self.reasons.lock() {
            m.retain(|(ns, dep), _| exists(ns, dep));
        }
    }

    pub fn get(&self, ns: &str, dep: &str) -> Option<(String, String)> {
        self.reasons
            .lock()
            .ok()
            .and_then(|m| m.get(&(ns.to_string(), dep.to_string())).cloned())
    }
}

pub struct Reconciler {
    pub cache: Cache,
    pub client: Client,
    pub metrics: Arc<Metrics>,
    pub events: Events,
    pub degraded: DegradedReasons,
    pub orphan_grace: Duration,
    /// Conflicts and bad annotations already reported, so Events are not repeated.
    reported: Mutex<BTreeSet<String>>,
    /// Objects whose last write failed ("namespace/kind/name").
    backoff: Mutex<Backoff>,
    /// UIDs of the PDBs this replica created (not at admission): their
    /// creation is announced at the create, and a create's live check knows
    /// them before the watch does. Lost on restart (then at worst one
    /// `PDBCreated` said twice).
    created: Mutex<HashSet<String>>,
}

/// How a failed write is accounted for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    /// What a namespace deletion (or a concurrent writer) makes the apiserver
    /// answer: 403 with the NamespaceTerminating cause, 404 (gone), 409
    /// (conflict, or UID precondition failed). The next pass re-plans from the
    /// watch; no error is counted.
    Expected,
    /// Anything else: counted in `reconcile_errors` and logged.
    Error,
}

/// A PDB's `minAvailable` as written (`3`, `50%`), for Events.
fn min_available_text(p: &PodDisruptionBudget) -> String {
    match p.spec.as_ref().and_then(|s| s.min_available.as_ref()) {
        Some(IntOrString::Int(n)) => n.to_string(),
        Some(IntOrString::String(s)) => s.clone(),
        None => "unset".into(),
    }
}

/// The apiserver's cause when it refuses new content in a namespace being deleted.
fn namespace_terminating(s: &Status) -> bool {
    s.details
        .as_ref()
        .is_some_and(|d| d.causes.iter().any(|c| c.reason == "NamespaceTerminating"))
        || s.message.contains("because it is being terminated")
}

/// Whether every PDB of a live list was planned around: in the plan's read
/// of the cache (`planned_from`), or created by this replica (`created`).
fn all_planned_around(
    live: &[PodDisruptionBudget],
    planned_from: &[Arc<PodDisruptionBudget>],
    created: &HashSet<String>,
) -> bool {
    let seen: HashSet<&str> = planned_from
        .iter()
        .filter_map(|c| c.metadata.uid.as_deref())
        .collect();
    live.iter().all(|l| {
        l.metadata
            .uid
            .as_deref()
            .is_none_or(|u| seen.contains(u) || created.contains(u))
    })
}

/// The apiserver's 404 for a path it does not serve at all (a plain-text
/// "404 page not found" when the whole API group is gone): our CRD is
/// missing. That is an error to see, not a namespace going away.
fn resource_type_missing(s: &Status) -> bool {
    s.message.contains("could not find the requested resource")
        || s.message.contains("404 page not found")
}

pub fn classify(e: &kube::Error) -> Refusal {
    match e {
        kube::Error::Api(s) if s.code == 404 && resource_type_missing(s) => Refusal::Error,
        kube::Error::Api(s) if s.code == 404 => Refusal::Expected,
        // A conflict, or a JSON patch `test` that failed: the object changed
        // since it was read (a user's edit, ownership handed over); the next
        // pass re-plans. A 422 with causes is a value refused, and a policy's
        // denial (any code) a refusal: errors, to be seen.
        kube::Error::Api(s) if crate::client::changed_since_read(s) => Refusal::Expected,
        kube::Error::Api(s) if s.code == 403 && namespace_terminating(s) => Refusal::Expected,
        _ => Refusal::Error,
    }
}

pub fn recorder(client: Client, instance: Option<String>) -> Recorder {
    Recorder::new(
        client,
        Reporter {
            controller: names::MANAGER.into(),
            instance,
        },
    )
}

pub fn object_ref<K: Resource<DynamicType = ()>>(obj: &K) -> ObjectReference {
    obj.object_ref(&())
}

impl Reconciler {
    pub fn new(
        cache: Cache,
        client: Client,
        metrics: Arc<Metrics>,
        events: Events,
        degraded: DegradedReasons,
        orphan_grace: Duration,
    ) -> Self {
        Reconciler {
            cache,
            client,
            metrics,
            events,
            degraded,
            orphan_grace,
            reported: Mutex::new(BTreeSet::new()),
            backoff: Mutex::new(Backoff::default()),
            created: Mutex::new(HashSet::new()),
        }
    }

    /// Has the last write of `key` failed (it is in the backoff book)?
    fn failing(&self, key: &str) -> bool {
        self.backoff.lock().is_ok_and(|b| b.failing(key))
    }

    fn due(&self, key: &str) -> bool {
        self.backoff
            .lock()
            .map(|b| b.due(key, Instant::now()))
            .unwrap_or(true)
    }

    /// Books the outcome of one write on `key`, counting real errors.
    fn settle(&self, key: &str, controller: &'static str, result: Result<(), kube::Error>) {
        let Ok(mut book) = self.backoff.lock() else {
            return;
        };
        let e = match result {
            Ok(()) => {
                book.succeeded(key);
                return;
            }
            Err(e) => e,
        };
        let retry_in = book.failed(key, Instant::now());
        drop(book);
        match classify(&e) {
            Refusal::Expected => {
                tracing::debug!(object = key, error = %e, ?retry_in, "write refused (namespace going away or object changed); re-planned later");
            }
            Refusal::Error => {
                self.metrics
                    .reconcile_errors
                    .get_or_create(&ControllerLabel { controller })
                    .inc();
                tracing::warn!(object = key, error = %e, ?retry_in, "reconcile write failed; retrying with backoff");
            }
        }
    }

    /// When the earliest object in backoff becomes due after `t`.
    fn next_retry_after(&self, t: Instant) -> Option<Instant> {
        self.backoff.lock().ok().and_then(|b| b.next_retry_after(t))
    }

    /// Runs namespace jobs while `leader` is true, until the process ends.
    /// Until the stores it decides on sync it only waits for marks, at most
    /// one look per `MIN_PASS_INTERVAL` (a missing EvictionAutoScaler CRD
    /// does not hold it: see [`Reader::Reconciler`]). Each look queues what
    /// was marked since the last (and the namespaces holding an object whose
    /// backoff is over); every `RESYNC` it queues every namespace. Jobs start
    /// from the queue as [`schedule::Schedule`] leaves room, each as soon as
    /// another ends, not in passes that wait for their slowest namespace.
    pub async fn run(self: Arc<Self>, mut leader: watch::Receiver<bool>) {
        let dirty = self.cache.ns_dirty.clone();
        let mut marked = dirty.subscribe();
        let mut last_full = Instant::now();
        // Leadership gained: plan everything (another replica did the work
        // so far, and this one's marks were taken without writing).
        let mut was_leading = false;
        let mut schedule = Schedule::new(LIMITS);
        let mut settled = Settled::new(FULL_EVERY);
        // Whether the EvictionAutoScalers and KEDA's ScaledObjects were
        // known at the last look: plans made without them wait (no record
        // writes, no floor under KEDA's HPAs) and may have settled, and a
        // watch that resumes after a failure marks nothing.
        let mut known = (false, false);
        let mut jobs: FuturesUnordered<Job<'_>> = FuturesUnordered::new();
        let this: &Reconciler = &self;
        loop {
            // The election gone: stop rather than write on a stale flag
            // (the process then stops, see crate::supervise).
            if leader.has_changed().is_err() {
                tracing::error!("the leader flag's sender is gone: the reconciler stops");
                return;
            }
            let looked = Instant::now();
            let leading = *leader.borrow_and_update();
            let working = leading && self.cache.ready_for(Reader::Reconciler);
            let mut next_look = looked + RESYNC;
            if working {
                marked.borrow_and_update();
                let mut marks = dirty.take();
                let now_known = (self.cache.eas_ready(), self.cache.keda_known());
                if !was_leading || (now_known.0 && !known.0) || (now_known.1 && !known.1) {
                    marks.all = true;
                }
                known = now_known;
                let resync = marks.all || last_full.elapsed() >= RESYNC;
                if resync {
                    last_full = looked;
                }
                was_leading = true;
                self.queue(&mut schedule, &mut settled, marks, resync);
                next_look = last_full + RESYNC;
            } else if !leading {
                was_leading = false;
                // A follower's marks are never planned (the lead's first
                // look plans everything): drop them, or every namespace
                // name seen would pile up here.
                marked.borrow_and_update();
                drop(dirty.take());
            }
            // Until the next look: start jobs as room comes, book each as it
            // ends, and wake for a mark, a backoff that ends, the resync, or
            // the leader flag.
            let mut mark_seen = false;
            let mut lost = false;
            loop {
                let now = Instant::now();
                // Until no room or nothing startable is left: a namespace
                // the cache does not hold takes room and gives it back at once.
                while working && *leader.borrow() && self.cache.ready_for(Reader::Reconciler) {
                    let started = schedule.start(now);
                    if started.is_empty() {
                        break;
                    }
                    for job in self.jobs(started, &mut schedule) {
                        let lead = leader.clone();
                        jobs.push(Box::pin(async move {
                            let name = job.name.clone();
                            let planned = this.namespace_pass(job, &lead).await;
                            (name, planned)
                        }));
                    }
                }
                let mut at = next_look;
                // Objects whose backoff ended by the look were queued then.
                if working {
                    if let Some(r) = self.next_retry_after(looked) {
                        at = at.min(r);
                    }
                }
                if mark_seen || marked.has_changed().unwrap_or(true) {
                    at = at.min(looked);
                }
                let at = at.max(looked + MIN_PASS_INTERVAL);
                if now >= at {
                    break;
                }
                // A full slot turning slow, or a namespace's pause between
                // two jobs ending, lets a job start without another ending.
                let wake = schedule.next_wake(now).map_or(at, |f| f.min(at));
                tokio::select! {
                    // A step-down first: its jobs are dropped before any of
                    // them is polled again (and sends another write).
                    biased;
                    // The flag is sent only when it changes: leading at
                    // the look, any change is a lead lost (maybe back).
                    _ = leader.changed() => {
                        lost = leading;
                        break;
                    }
                    Some(first) = jobs.next() => {
                        // With every other job already done: the next
                        // starts read the stores once for all of them.
                        let mut done = vec![first];
                        while let Some(Some(d)) = jobs.next().now_or_never() {
                            done.push(d);
                        }
                        let now = Instant::now();
                        for (name, planned) in done {
                            schedule.finished(&name, now);
                            settled.finished(&name, planned.settled);
                            if let Ok(mut b) = self.backoff.lock() {
                                b.settle_pass(&planned.keys, &BTreeSet::from([name]));
                            }
                        }
                    }
                    _ = marked.changed(), if !mark_seen => mark_seen = true,
                    _ = tokio::time::sleep_until(wake.into()) => {},
                }
            }
            // Stepping down drops the running jobs at once, even
            // mid-request, and even if the lead is back before the next
            // look: their marks were taken and not all planned, so the next
            // lead plans everything.
            if lost || (!*leader.borrow() && was_leading) {
                if !jobs.is_empty() {
                    tracing::info!(
                        jobs = jobs.len(),
                        "no longer leading: reconcile jobs abandoned"
                    );
                }
                jobs = FuturesUnordered::new();
                schedule.clear();
                settled.all_changed();
                was_leading = false;
            }
        }
    }

    /// One look's queueing: `marks` and the namespaces holding an object
    /// whose backoff is over; with `resync`, every namespace after them
    /// (but those [`Settled`] leaves out, unless `marks.all`), and what is
    /// kept per namespace forgotten for those gone.
    fn queue(
        &self,
        schedule: &mut Schedule,
        settled: &mut Settled,
        mut marks: Marks,
        resync: bool,
    ) {
        if let Ok(b) = self.backoff.lock() {
            marks
                .namespaces
                .extend(b.due_namespaces(Instant::now()).map(str::to_string));
        }
        for ns in &marks.namespaces {
            settled.changed(ns);
            schedule.mark(ns);
        }
        let all_pdbs = self.cache.pdbs.state();
        let managed = all_pdbs.iter().filter(|p| owned_by_us(&p.metadata)).count() as i64;
        self.metrics.managed_pdbs.set(managed);
        if !resync {
            return;
        }
        let existing: HashSet<String> = self
            .cache
            .namespaces
            .state()
            .iter()
            .filter_map(|n| n.metadata.name.clone())
            .collect();
        if marks.all {
            settled.all_changed();
        }
        let swept = settled.resync(&existing);
        schedule.sweep(swept.iter().copied());
        let kind = PassLabel { pass: "full" };
        tracing::debug!(pass = kind.pass, namespaces = ?swept, "reconcile pass");
        self.metrics.reconcile_passes.get_or_create(&kind).inc();
        // Objects of namespaces deleted while no job of this replica
        // planned them (it was not leading, or a job outlasted the deletion).
        if let Ok(mut b) = self.backoff.lock() {
            b.forget_gone_namespaces(|ns| existing.contains(ns));
        }
        self.degraded.forget_gone(|ns, _| existing.contains(ns));
    }

    /// The jobs of the namespaces `started` names, from one read of each
    /// store (the freshest copy at their start). A namespace the cache does
    /// not hold (deleted, or not seen yet: its own event marks it again)
    /// gets none and is finished at once.
    fn jobs(&self, started: Vec<(String, Origin)>, schedule: &mut Schedule) -> Vec<NamespaceJob> {
        let marks = Marks {
            all: false,
            namespaces: started.iter().map(|(n, _)| n.clone()).collect(),
        };
        let mut deployments_by_ns = marked_by_namespace(self.cache.deployments.state(), &marks);
        let mut pdbs_by_ns = marked_by_namespace(self.cache.pdbs.state(), &marks);
        let mut hpas_by_ns = marked_by_namespace(self.cache.hpas.state(), &marks);
        // Without the EvictionAutoScaler store (its CRD deleted), the PDBs
        // are still planned: a PDB a user adds meanwhile must still make
        // ours step aside (never two PDBs over one pod).
        let eas_known = self.cache.eas_ready();
        let mut eas_by_ns = if eas_known {
            marked_by_namespace(self.cache.eas.state(), &marks)
        } else {
            HashMap::new()
        };
        let mut namespaces: HashMap<String, Arc<k8s_openapi::api::core::v1::Namespace>> = self
            .cache
            .namespaces
            .state()
            .into_iter()
            .filter_map(|ns| {
                let name = ns.metadata.name.clone()?;
                marks.covers(&name).then_some((name, ns))
            })
            .collect();
        let mut jobs = Vec::new();
        let mut by_origin: [BTreeSet<String>; 2] = Default::default();
        for (name, origin) in started {
            let Some(ns) = namespaces.remove(&name) else {
                schedule.finished(&name, Instant::now());
                // Gone (an object of it retried would be due for good).
                if let Ok(mut b) = self.backoff.lock() {
                    b.forget_gone_namespaces(|n| n != name);
                }
                continue;
            };
            by_origin[(origin == Origin::Sweep) as usize].insert(name.clone());
            jobs.push(NamespaceJob {
                deployments: deployments_by_ns.remove(&name).unwrap_or_default(),
                pdbs: pdbs_by_ns.remove(&name).unwrap_or_default(),
                hpas: hpas_by_ns.remove(&name).unwrap_or_default(),
                eas: eas_known.then(|| eas_by_ns.remove(&name).unwrap_or_default()),
                ns,
                name,
            });
        }
        let [marked, swept] = by_origin;
        if !marked.is_empty() {
            let kind = PassLabel { pass: "marked" };
            tracing::debug!(pass = kind.pass, namespaces = ?marked, eas_known, "reconcile pass");
            self.metrics.reconcile_passes.get_or_create(&kind).inc();
            self.metrics
                .reconcile_namespaces
                .get_or_create(&kind)
                .inc_by(marked.len() as u64);
        }
        if !swept.is_empty() {
            self.metrics
                .reconcile_namespaces
                .get_or_create(&PassLabel { pass: "full" })
                .inc_by(swept.len() as u64);
        }
        jobs
    }

    /// Plans and writes one namespace; returns the keys it planned to write
    /// and whether it found the namespace settled.
    async fn namespace_pass(&self, job: NamespaceJob, leader: &watch::Receiver<bool>) -> Planned {
        let mut planned = BTreeSet::new();
        let NamespaceJob {
            ns,
            name,
            deployments,
            pdbs,
            hpas,
            eas,
        } = job;
        let sc = scope::namespace_scope(
            &name,
            ns.metadata.annotations.as_ref(),
            &self.cache.behaviour,
        );
        let bad_annotation = sc
            .invalid_annotation
            .as_ref()
            .map(|bad| format!("ns/{name}/{bad}"));
        if let (Some(bad), Some(key)) = (&sc.invalid_annotation, &bad_annotation) {
            self.report_once(
                key.clone(),
                &ns.object_ref(&()),
                "InvalidAnnotation",
                format!(
                    "annotation {}: {bad:?} is not a boolean; ignored",
                    names::ENABLE
                ),
            );
        }
        // Every Deployment still there, being deleted too: the worker may
        // still hold a reason for one (a surge that cannot help while its
        // pods run), and forgetting it would have the worker set it again,
        // with its Event, every pass.
        let present: HashSet<String> = deployments
            .iter()
            .filter_map(|d| d.metadata.name.clone())
            .collect();
        // Read only by the release of the Go project's finalizers on records
        // being deleted: not worked out on every pass.
        let releasing = eas
            .iter()
            .flatten()
            .any(|e| e.metadata.deletion_timestamp.is_some());
        let surging = if releasing {
            surging(
                &deployments,
                &hpas,
                &self.cache.scaled_objects_in(&name),
                !self.cache.keda_known(),
            )
        } else {
            BTreeSet::new()
        };
        let deleting: BTreeSet<String> = deployments
            .iter()
            .filter(|d| d.metadata.deletion_timestamp.is_some())
            .filter_map(|d| d.metadata.name.clone())
            .collect();
        // A Deployment being deleted gets no new PDB (garbage collection
        // is removing the old one).
        let deployments: Vec<_> = deployments
            .into_iter()
            .filter(|d| d.metadata.deletion_timestamp.is_none())
            .collect();
        // Out of scope with nothing of ours, or being deleted (everything in
        // it goes, and the apiserver refuses new content there): nothing to
        // write, and no problem left to report but a bad annotation.
        if (!sc.enabled && pdbs.is_empty() && eas.as_ref().is_none_or(Vec::is_empty))
            || ns.metadata.deletion_timestamp.is_some()
        {
            if let Ok(mut r) = self.reported.lock() {
                forget_solved(&mut r, &name, &bad_annotation.into_iter().collect());
            }
            // But the Go project's finalizers on records being deleted with
            // the namespace: nothing of it stays to guard, and held, they
            // would hold the namespace's deletion for good.
            if ns.metadata.deletion_timestamp.is_some() {
                let releases = plan::finalizer_releases(eas.as_deref(), &[], &BTreeSet::new());
                let share = std::time::Instant::now();
                self.write_actions(&name, &deployments, releases, leader, &mut planned, share)
                    .await;
            }
            return Planned {
                settled: planned.is_empty(),
                keys: planned,
            };
        }
        let keda_min = keda_minimums_of(&self.cache.scaled_objects_in(&name), &hpas);
        let age = |p: &PodDisruptionBudget| -> i64 {
            p.metadata
                .creation_timestamp
                .as_ref()
                .map(|t| (k8s_openapi::jiff::Timestamp::now() - t.0).get_seconds())
                .unwrap_or(i64::MAX)
        };
        // With the pods coming back under their name (a StatefulSet's):
        // ours made before one is back would be a second budget over it.
        let pods = self.cache.pods_and_leaving_if_ready(&name);
        let snapshot = NamespaceSnapshot {
            name: &name,
            in_scope: sc.enabled,
            pdb_create: self.cache.behaviour.pdb_create,
            deployments: &deployments,
            pdbs: &pdbs,
            hpas: &hpas,
            keda_min: &keda_min,
            keda_unknown: !self.cache.keda_known(),
            eas: eas.as_deref(),
            pods: pods.as_deref(),
            pdb_age_secs: &age,
            orphan_grace_secs: self.orphan_grace.as_secs() as i64,
            surging: &surging,
            deleting: &deleting,
        };
        let mut actions = plan::plan(&snapshot);
        // Settled (left out of resyncs until a change marks it): the plan
        // has nothing, with every pod known, and no rule waits on the clock.
        let quiet = actions.is_empty() && pods.is_some() && !plan::waits_on_the_clock(&snapshot);
        // Creates are planned from the cache: a PDB the user made just
        // before (applied with the Deployment) may not be in it yet, and
        // ours would be a second budget over the pods until the next pass
        // stepped aside. One live list per pass that creates; while it shows
        // a PDB the cache lacks (or fails), the creates wait for a pass that
        // sees it (its watch event marks the namespace again).
        if actions.iter().any(|a| matches!(a, Action::CreatePdb(_)))
            && !self.pdbs_cached(&name, &pdbs).await
        {
            tracing::debug!(namespace = %name,
                "a PDB the cache does not hold yet: the namespace's creates wait for a pass that sees it");
            actions.retain(|a| !matches!(a, Action::CreatePdb(_)));
        }
        // A `pdb-create` that is no boolean, on a Deployment in scope.
        let mut bad_opt_outs = BTreeSet::new();
        for d in deployments.iter().filter(|_| sc.enabled) {
            let Some(bad) = scope::invalid_opt_out(d.metadata.annotations.as_ref()) else {
                continue;
            };
            let dn = d.metadata.name.as_deref().unwrap_or_default();
            let key = format!("optout/{name}/{dn}/{bad}");
            self.report_once(
                key.clone(),
                &d.object_ref(&()),
                "InvalidAnnotation",
                scope::invalid_opt_out_note(bad),
            );
            bad_opt_outs.insert(key);
        }
        // A problem comes back after it was solved: report it again then.
        // Not while the pod cache is unready: the overlaps seen through
        // pods are missing from such a plan, not solved.
        let still: BTreeSet<String> = actions
            .iter()
            .filter_map(|a| report_key(a, &name))
            .chain(bad_annotation)
            .chain(bad_opt_outs)
            .collect();
        if pods.is_some() {
            if let Ok(mut r) = self.reported.lock() {
                forget_solved(&mut r, &name, &still);
            }
        }
        self.degraded
            .forget_gone(|ns, dep| ns != name || present.contains(dep));
        for d in &deployments {
            let dn = d.metadata.name.as_deref().unwrap_or_default();
            let conflicted = actions
                .iter()
                .any(|a| matches!(a, Action::NameConflict { deployment, .. } if deployment == dn));
            if !conflicted {
                self.degraded.clear_reason(&name, dn, "PDBNameConflict");
            }
            let overlapping = actions.iter().any(
                |a| matches!(a, Action::SelectorOverlap { deployment, .. } if deployment == dn),
            );
            // Pods unknown: an overlap seen through them is not solved.
            if !overlapping && pods.is_some() {
                self.degraded.clear_reason(&name, dn, "PDBSelectorOverlap");
            }
        }
        // After a write that timed out, the namespace's other writes wait
        // for the pass that its backoff brings (that object is skipped then).
        // After its share of the pass, for the next pass (marked again).
        let share = std::time::Instant::now();
        // Writes that failed before go after the others: one slow again
        // (a webhook on EvictionAutoScalers that hangs) would else come
        // first in every pass its backoff brings, and the writes after it
        // (a step-aside among them) would wait for as long as it fails. A
        // create of a PDB, or our reference on one (SetOwner, planned only
        // once the proof is in place), stays behind the EvictionAutoScaler
        // of its name, whose status is that proof (`Action::CreateEas`).
        let eas_failing = |pdb: &str| self.failing(&format!("{name}/eas/{pdb}"));
        let (retried, first): (Vec<Action>, Vec<Action>) = actions.into_iter().partition(|a| {
            self.failing(&format!("{name}/{}", a.object()))
                || match a {
                    Action::CreatePdb(p) => {
                        eas_failing(p.metadata.name.as_deref().unwrap_or_default())
                    }
                    Action::SetOwner { pdb, .. } => eas_failing(pdb),
                    _ => false,
                }
        });
        let actions: Vec<Action> = first.into_iter().chain(retried).collect();
        let Some(slowed) = self
            .write_actions(&name, &deployments, actions, leader, &mut planned, share)
            .await
        else {
            // Stepped down: not one more write.
            return Planned {
                keys: planned,
                settled: false,
            };
        };
        if let (true, false, Some(eas)) = (sc.enabled, slowed, &eas) {
            self.write_statuses(&name, &deployments, &pdbs, eas, leader, &mut planned, share)
                .await;
        }
        Planned {
            settled: quiet && !slowed && planned.is_empty(),
            keys: planned,
        }
    }

    /// Did the plan see every PDB a live list of namespace `ns` shows
    /// (`planned_from`, the pass's read of the cache; those this replica
    /// created count as seen)? Not the cache as it is now: a PDB that reached
    /// it after the pass read it was not planned around. False when the list
    /// fails or takes longer than [`WRITE_TIMEOUT`].
    async fn pdbs_cached(&self, ns: &str, planned_from: &[Arc<PodDisruptionBudget>]) -> bool {
        let api: Api<PodDisruptionBudget> = Api::namespaced(self.client.clone(), ns);
        match tokio::time::timeout(WRITE_TIMEOUT, api.list(&ListParams::default())).await {
            Ok(Ok(live)) => match self.created.lock() {
                Ok(created) => all_planned_around(&live.items, planned_from, &created),
                Err(_) => false,
            },
            _ => false,
        }
    }

    /// Writes `actions` in turn, each within [`WRITE_TIMEOUT`] and its
    /// object's backoff, for the namespace's share of the pass; after a
    /// write that timed out, the rest wait for the next pass. Whether one
    /// was slow; None when this replica stepped down.
    async fn write_actions(
        &self,
        name: &str,
        deployments: &[Arc<Deployment>],
        actions: Vec<Action>,
        leader: &watch::Receiver<bool>,
        planned: &mut BTreeSet<String>,
        share: std::time::Instant,
    ) -> Option<bool> {
        let mut slowed = false;
        for action in actions {
            if !*leader.borrow() {
                return None;
            }
            let key = format!("{name}/{}", action.object());
            planned.insert(key.clone());
            if !slowed && self.share_spent(name, share) {
                slowed = true;
            }
            if slowed || !self.due(&key) {
                continue;
            }
            let started = std::time::Instant::now();
            let result = bounded(WRITE_TIMEOUT, self.apply(name, deployments, action)).await;
            slowed = slow(&result, started.elapsed());
            self.settle(&key, "pdb", result);
        }
        Some(slowed)
    }

    /// Has namespace `ns` written for its [`NAMESPACE_SHARE`] of this pass
    /// (since `share`)? Then it is marked again, for the next pass.
    fn share_spent(&self, ns: &str, share: std::time::Instant) -> bool {
        let spent = share.elapsed() >= NAMESPACE_SHARE;
        if spent {
            self.cache.ns_dirty.mark(ns);
        }
        spent
    }

    /// Reports `note` once per `key` (`<kind>/<namespace>/<what>`) until
    /// [`forget_solved`] drops the key.
    fn report_once(&self, key: String, obj: &ObjectReference, reason: &str, note: String) {
        let fresh = self
            .reported
            .lock()
            .map(|mut r| r.insert(key))
            .unwrap_or(false);
        if !fresh {
            return;
        }
        tracing::warn!(reason, %note, "reported");
        self.events.emit(obj, EventType::Warning, reason, note);
    }

    async fn apply(
        &self,
        ns: &str,
        deployments: &[Arc<Deployment>],
        action: Action,
    ) -> Result<(), kube::Error> {
        let pdbs: Api<PodDisruptionBudget> = Api::namespaced(self.client.clone(), ns);
        let eas: Api<EvictionAutoScaler> = Api::namespaced(self.client.clone(), ns);
        let pp = PatchParams::default();
        let dep_ref = |name: &str| {
            deployments
                .iter()
                .find(|d| d.metadata.name.as_deref() == Some(name))
                .map(|d| object_ref(d.as_ref()))
        };
        let key = report_key(&action, ns);
        match action {
            Action::CreatePdb(p) => {
                let name = p.metadata.name.clone().unwrap_or_default();
                let min = min_available_text(&p);
                let pp = PostParams {
                    field_manager: Some(names::MANAGER.into()),
                    ..Default::default()
                };
                let created = match pdbs.create(&pp, &p).await {
                    Ok(c) => c,
                    // The webhook (or another pass) made it first.
                    Err(kube::Error::Api(s)) if s.code == 409 => return Ok(()),
                    Err(e) => return Err(e),
                };
                tracing::info!(namespace = ns, pdb = %name, "created PDB");
                if let (Some(uid), Ok(mut c)) = (created.metadata.uid.clone(), self.created.lock())
                {
                    // Bounded: each goes at its SetOwner; forgetting one
                    // costs at most a repeated Event or a create a pass later.
                    if c.len() >= 10_000 {
                        c.clear();
                    }
                    c.insert(uid);
                }
                // The proof that this PDB is ours (its UID in the status of
                // the EvictionAutoScaler of its name) written at once: our
                // controller reference follows in a later pass, only once
                // the proof is there (a user who removed `ownedBy` before
                // would otherwise keep that reference for good, and
                // deleting the Deployment would take their PDB). Best
                // effort: the pass after makes the EvictionAutoScaler
                // anyway, and an existing one is left to it.
                let target = plan::target_of(&created).unwrap_or(&name).to_string();
                if let Err(e) = self
                    .create_eas(
                        &eas,
                        ns,
                        name.clone(),
                        target,
                        plan::pdb_owner(&created),
                        created.metadata.uid.clone(),
                    )
                    .await
                {
                    tracing::debug!(namespace = ns, pdb = %name, error = %e,
                        "EvictionAutoScaler not made with the PDB; the next pass makes it");
                }
                if let Some(r) = dep_ref(&name) {
                    self.events.emit(
                        &r,
                        EventType::Normal,
                        "PDBCreated",
                        format!("created PodDisruptionBudget {name} (minAvailable {min})"),
                    );
                }
            }
            Action::SetMinAvailable { pdb, min } => {
                let Some(cached) = self.cached_pdb(ns, &pdb) else {
                    return Ok(()); // gone from the cache: re-planned
                };
                pdbs.patch(&pdb, &pp, &json_patch(set_min_available_ops(&cached, min))?)
                    .await?;
                tracing::info!(namespace = ns, %pdb, min, "PDB minAvailable updated");
            }
            Action::SetOwner { pdb, owner } => {
                // Guard the one field we change, not the whole object: the
                // disruption controller writes the PDB's status all the time.
                let Some(cached) = self.cached_pdb(ns, &pdb) else {
                    return Ok(());
                };
                let current = cached.metadata.owner_references.clone();
                let mut refs: Vec<_> = current
                    .clone()
                    .unwrap_or_default()
                    .into_iter()
                    .filter(|o| !(o.kind == "Deployment" && o.name == owner.name))
                    .collect();
                let owner_name = owner.name.clone();
                refs.push(owner);
                // Made by the Deployment webhook at admission (the
                // Deployment names it in its annotation) and owned by
                // nothing yet: this is where its creation is announced (the
                // Deployment did not exist when the webhook made it).
                let made_here = cached
                    .metadata
                    .uid
                    .as_ref()
                    .is_some_and(|u| self.created.lock().is_ok_and(|c| c.contains(u)));
                let made_at_admission = current.as_ref().is_none_or(Vec::is_empty)
                    && !made_here
                    && deployments.iter().any(|d| {
                        d.metadata.name.as_deref() == Some(owner_name.as_str())
                            && d.metadata
                                .annotations
                                .as_ref()
                                .and_then(|a| a.get(names::PDB_ANNOTATION))
                                .is_some_and(|n| *n == pdb)
                    });
                let mut ops = ours_guard(&cached);
                ops.extend(guarded_set(
                    "/metadata/ownerReferences",
                    current.map(|c| json!(c)),
                    json!(refs),
                ));
                pdbs.patch(&pdb, &pp, &json_patch(ops)?).await?;
                tracing::info!(namespace = ns, %pdb, "owner reference set");
                if let (Some(uid), Ok(mut c)) = (cached.metadata.uid.as_ref(), self.created.lock())
                {
                    c.remove(uid);
                }
                if made_at_admission {
                    if let Some(r) = dep_ref(&owner_name) {
                        let min = min_available_text(&cached);
                        self.events.emit(
                            &r,
                            EventType::Normal,
                            "PDBCreated",
                            format!("created PodDisruptionBudget {pdb} (minAvailable {min}) when the Deployment was created"),
                        );
                    }
                }
            }
            Action::ReleaseOwner {
                pdb,
                uid,
                deployment,
            } => {
                let current = self
                    .cache
                    .pdbs
                    .get(&kube::runtime::reflector::ObjectRef::new(&pdb).within(ns))
                    .and_then(|p| p.metadata.owner_references.clone());
                // The other references as they are now, not as the plan read
                // them: one added since stays. Only the PDB the plan read (its
                // UID): one re-created under its name keeps its references.
                let Some(ops) = plan::release_ops(
                    uid.as_deref(),
                    current.as_deref().unwrap_or_default(),
                    &deployment,
                ) else {
                    return Ok(());
                };
                let released = pdbs.patch(&pdb, &pp, &json_patch(ops)?).await?;
                // The PDB as written tells a manifest's hand-over from
                // `ownedBy` removed by hand.
                let (why, back) = match crate::declared::declared_by(&released.metadata) {
                    Some(by) => (
                        format!(
                            "a manifest applied by {by} declares it without our ownedBy annotation"
                        ),
                        "in its manifest",
                    ),
                    None => (
                        "its ownedBy annotation was removed".to_string(),
                        "added back",
                    ),
                };
                tracing::info!(namespace = ns, %pdb, %deployment, %why, "PDB handed to its user: owner reference dropped");
                let note = format!(
                    "PodDisruptionBudget {pdb} is no longer kept by eviction-autoscaler: {why}. \
                     Our owner reference to Deployment {deployment} is dropped and it is not written \
                     again; ownedBy: EvictionAutoScaler {back} hands it back"
                );
                self.events.emit(
                    &pdb_ref(ns, pdb, released.metadata.uid.clone()),
                    EventType::Normal,
                    "PDBHandedOver",
                    note,
                );
            }
            Action::SetSelector { pdb, uid, from, to } => {
                let mut ops = ours_guard_uid(uid.as_deref());
                ops.extend(guarded_set(
                    "/spec/selector",
                    from.map(|f| json!(f)),
                    json!(to),
                ));
                pdbs.patch(&pdb, &pp, &json_patch(ops)?).await?;
                tracing::info!(
                    namespace = ns,
                    %pdb,
                    "PDB selector set back to its Deployment's"
                );
            }
            Action::DeletePdb { pdb, uid, why } => {
                match delete_ours(&pdbs, &pdb, uid.as_deref(), false).await? {
                    Deleted::Done => tracing::info!(namespace = ns, %pdb, why, "deleted our PDB"),
                    Deleted::Gone => {}
                    Deleted::HandedOver => {
                        tracing::info!(namespace = ns, %pdb, why, "PDB taken over by its user before our delete: kept")
                    }
                }
            }
            Action::NameConflict { deployment, pdb } => {
                let note = format!(
                    "PodDisruptionBudget {pdb} exists and does not select the pods of Deployment {deployment}; \
                     no PDB created. Rename one of them, or give the PDB a matching selector."
                );
                self.degraded.set(ns, &deployment, "PDBNameConflict", &note);
                if let (Some(r), Some(key)) = (dep_ref(&deployment), key) {
                    self.report_once(key, &r, "PDBNameConflict", note);
                }
            }
            Action::SelectorOverlap {
                deployment,
                pdb,
                other,
            } => {
                // A pod may be the Deployment's own, relabelled at run time:
                // then its labels are the thing to change, not the selector.
                let pod_hint = if other.starts_with("Pod ") {
                    " (or, if that pod is one of its own relabelled at run time, remove the \
                     label the other PDB selects)"
                } else {
                    ""
                };
                let note = format!(
                    "the selector of Deployment {deployment} also selects {other}, which \
                     PodDisruptionBudget {pdb} protects; no PDB created, since two budgets over \
                     one pod make every eviction of it fail. Give the Deployment a selector that \
                     selects its own pods only{pod_hint}, or a PDB of your own."
                );
                self.degraded
                    .set(ns, &deployment, "PDBSelectorOverlap", &note);
                if let (Some(r), Some(key)) = (dep_ref(&deployment), key) {
                    self.report_once(key, &r, "PDBSelectorOverlap", note);
                }
            }
            Action::CreateEas {
                name,
                target,
                owner,
                pdb_uid,
            } => {
                self.create_eas(&eas, ns, name, target, owner, pdb_uid)
                    .await?
            }
            Action::StepAside {
                pdb,
                uid,
                deployment,
                by,
            } => {
                match delete_ours(&pdbs, &pdb, uid.as_deref(), false).await? {
                    Deleted::Done => {}
                    Deleted::Gone => return Ok(()),
                    Deleted::HandedOver => {
                        tracing::info!(namespace = ns, %pdb, "PDB taken over by its user before our step-aside: kept");
                        return Ok(());
                    }
                }
                tracing::info!(namespace = ns, %pdb, %deployment, took_over = %by, "another PDB selects the pods: deleted ours");
                let note = format!(
                    "PodDisruptionBudget {by} also selects pods that our PodDisruptionBudget \
                     {pdb} of Deployment {deployment} selects; deleted ours so that each pod \
                     has one budget ({by} took over; ours comes back if {by} is deleted)"
                );
                if let Some(r) = dep_ref(&deployment) {
                    self.events
                        .emit(&r, EventType::Normal, "PDBSteppedAside", note.clone());
                }
                self.events.emit(
                    &pdb_ref(ns, pdb, uid),
                    EventType::Normal,
                    "PDBSteppedAside",
                    note,
                );
            }
            Action::DeleteEas { name, uid } => {
                // Gone, replaced under the name, or taken over: nothing of
                // ours to delete.
                delete_ours(&eas, &name, uid.as_deref(), false).await?;
            }
            Action::ReleaseFinalizers {
                name,
                uid,
                read,
                remove,
            } => {
                let ops = crate::finalizers::release_ops(uid.as_deref(), &read, &remove);
                match eas.patch(&name, &pp, &json_patch(ops)?).await {
                    Ok(_) => {
                        tracing::info!(namespace = ns, eas = %name, released = ?remove,
                            "the Go project's finalizers released: what they guard is done");
                    }
                    // Gone with its last finalizer (another replica's pass).
                    Err(kube::Error::Api(s)) if s.code == 404 => {}
                    Err(e) => return Err(e),
                }
            }
        }
        Ok(())
    }

    fn cached_pdb(&self, ns: &str, name: &str) -> Option<Arc<PodDisruptionBudget>> {
        self.cache
            .pdbs
            .get(&kube::runtime::reflector::ObjectRef::new(name).within(ns))
    }

    /// Creates our EvictionAutoScaler for a PDB; for a PDB of ours, records
    /// its UID in the status at once (the evidence `plan::once_ours` reads).
    async fn create_eas(
        &self,
        api: &Api<EvictionAutoScaler>,
        ns: &str,
        name: String,
        target: String,
        owner: Option<k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference>,
        pdb_uid: Option<String>,
    ) -> Result<(), kube::Error> {
        let obj = EvictionAutoScaler {
            metadata: ObjectMeta {
                name: Some(name.clone()),
                namespace: Some(ns.into()),
                annotations: Some(
                    [
                        (
                            names::OWNED_BY.to_string(),
                            names::OWNED_BY_VALUE.to_string(),
                        ),
                        (names::TARGET.to_string(), target.clone()),
                    ]
                    .into(),
                ),
                owner_references: owner.map(|o| vec![o]),
                ..Default::default()
            },
            spec: EvictionAutoScalerSpec {
                target_name: target,
                target_kind: "deployment".into(),
                last_eviction: None,
            },
            status: None,
        };
        let pp = PostParams {
            field_manager: Some(names::MANAGER.into()),
            ..Default::default()
        };
        match api.create(&pp, &obj).await {
            Ok(_) => {}
            // Made by an earlier pass; its status is kept by write_statuses.
            Err(kube::Error::Api(s)) if s.code == 409 => return Ok(()),
            Err(e) => return Err(e),
        }
        if let Some(uid) = pdb_uid {
            let patch = json!({"status": {"pdbUID": uid}});
            api.patch_status(&name, &PatchParams::default(), &Patch::Merge(&patch))
                .await?;
        }
        Ok(())
    }

    /// Status of each EvictionAutoScaler, written only when it differs from
    /// what the cache holds; fields we no longer set are removed.
    #[allow(clippy::too_many_arguments)]
    async fn write_statuses(
        &self,
        ns: &str,
        deployments: &[Arc<Deployment>],
        pdbs: &[Arc<PodDisruptionBudget>],
        eas: &[Arc<EvictionAutoScaler>],
        leader: &watch::Receiver<bool>,
        planned: &mut BTreeSet<String>,
        share: std::time::Instant,
    ) {
        let api: Api<EvictionAutoScaler> = Api::namespaced(self.client.clone(), ns);
        // After a slow write or the namespace's share of the pass: no more
        // writes, the rest planned for the next pass.
        let mut stop = false;
        // Looked up per record: a scan each time made a namespace's job
        // quadratic.
        let (deps_named, pdbs_named) = (plan::named(deployments), plan::named(pdbs));
        for e in eas {
            let Some(name) = e.metadata.name.clone() else {
                continue;
            };
            let target = e.spec.target_name.as_str();
            let dep = deps_named.get(target).and_then(|v| v.first()).copied();
            // The Go project's record of a surge it left: kept until the
            // surge worker has written its baseline beside the lone marker.
            let legacy = dep.and_then(|d| {
                crate::markers::legacy_surge(
                    target,
                    d.metadata.annotations.as_ref(),
                    d.spec.as_ref().and_then(|s| s.replicas),
                    std::slice::from_ref(e),
                )
            });
            if legacy.is_some() {
                continue;
            }
            let pdb = pdbs_named
                .get(name.as_str())
                .and_then(|v| v.first())
                .copied();
            let want = desired_status(
                e,
                dep.map(|d| d.as_ref()),
                pdb.map(|p| p.as_ref()),
                self.degraded.get(ns, target),
            );
            let Some(patch) = status_patch(e.status.as_ref(), &want) else {
                continue;
            };
            if !*leader.borrow() {
                return;
            }
            let key = format!("{ns}/status/{name}");
            // Planned even when not written now: its backoff is kept.
            planned.insert(key.clone());
            if stop {
                continue;
            }
            if self.share_spent(ns, share) {
                stop = true;
                continue;
            }
            if !self.due(&key) {
                continue;
            }
            let started = std::time::Instant::now();
            let result = bounded(
                WRITE_TIMEOUT,
                api.patch_status(&name, &PatchParams::default(), &Patch::Merge(&patch)),
            )
            .await
            .map(|_| ());
            stop = slow(&result, started.elapsed());
            self.settle(&key, "status", result);
        }
    }
}

/// `test` ops that the PDB is still the one the plan read, and still ours:
/// its UID (not a PDB of the user's re-created under the name) and its
/// `ownedBy` annotation (not handed over meanwhile). A patch that starts
/// with them fails as a whole otherwise, and the next pass re-plans.
fn ours_guard(p: &PodDisruptionBudget) -> Vec<serde_json::Value> {
    ours_guard_uid(p.metadata.uid.as_deref())
}

/// PDB `name` in `ns`, for an Event.
fn pdb_ref(ns: &str, name: String, uid: Option<String>) -> ObjectReference {
    ObjectReference {
        api_version: Some("policy/v1".into()),
        kind: Some("PodDisruptionBudget".into()),
        namespace: Some(ns.into()),
        name: Some(name),
        uid,
        ..Default::default()
    }
}

/// [`ours_guard`] for the PDB of this UID.
fn ours_guard_uid(uid: Option<&str>) -> Vec<serde_json::Value> {
    let mut ops = vec![json!({"op": "test", "path": "/metadata/uid", "value": uid})];
    ops.push(json!({
        "op": "test",
        "path": format!("/metadata/annotations/{}", crate::patch::escape(names::OWNED_BY)),
        "value": names::OWNED_BY_VALUE,
    }));
    ops
}

/// Our PDB's `minAvailable` set to `min`, guarded by [`ours_guard`] and the
/// value read. A `maxUnavailable` someone put beside it is removed: the
/// apiserver refuses a PDB with both, and this PDB is ours to keep in line
/// (a user who wants their own budget removes `ownedBy`).
fn set_min_available_ops(p: &PodDisruptionBudget, min: i32) -> Vec<serde_json::Value> {
    let spec = p.spec.as_ref();
    let mut ops = ours_guard(p);
    if let Some(max) = spec.and_then(|s| s.max_unavailable.as_ref()) {
        ops.push(json!({"op": "test", "path": "/spec/maxUnavailable", "value": max}));
        ops.push(json!({"op": "remove", "path": "/spec/maxUnavailable"}));
    }
    ops.extend(guarded_set(
        "/spec/minAvailable",
        spec.and_then(|s| s.min_available.as_ref())
            .map(|v| json!(v)),
        json!(min),
    ));
    ops
}

/// The merge patch that turns `current` into `want`, or None when they are
/// equal (a steady cluster costs no status write). Fields `current` has and
/// `want` does not are sent as null, so the apiserver removes them.
pub fn status_patch(
    current: Option<&EvictionAutoScalerStatus>,
    want: &EvictionAutoScalerStatus,
) -> Option<serde_json::Value> {
    if current == Some(want) {
        return None;
    }
    let old = current.and_then(|c| serde_json::to_value(c).ok());
    let want = serde_json::to_value(want).ok();
    // Equal as written: a time with fractional seconds (an `evictionTime`
    // set by hand) is written in whole seconds, so it never compares equal
    // to what is read back, and would be patched on every pass.
    if old.is_some() && old == want {
        return None;
    }
    let mut body = match want {
        Some(serde_json::Value::Object(m)) => m,
        _ => serde_json::Map::new(),
    };
    if let Some(serde_json::Value::Object(old)) = old {
        for k in old.keys() {
            body.entry(k.clone()).or_insert(serde_json::Value::Null);
        }
    }
    Some(json!({ "status": body }))
}

/// Objects grouped by namespace.
/// What one namespace's pass works on.
struct NamespaceJob {
    ns: Arc<k8s_openapi::api::core::v1::Namespace>,
    name: String,
    deployments: Vec<Arc<Deployment>>,
    pdbs: Vec<Arc<PodDisruptionBudget>>,
    hpas: Vec<Arc<k8s_openapi::api::autoscaling::v2::HorizontalPodAutoscaler>>,
    /// None while the EvictionAutoScaler store is not ready.
    eas: Option<Vec<Arc<EvictionAutoScaler>>>,
}

/// [`by_namespace`], keeping only the namespaces `marks` covers.
fn marked_by_namespace<K: Resource>(
    all: Vec<Arc<K>>,
    marks: &Marks,
) -> HashMap<String, Vec<Arc<K>>> {
    if marks.all {
        return by_namespace(all);
    }
    by_namespace(
        all.into_iter()
            .filter(|o| {
                o.meta()
                    .namespace
                    .as_deref()
                    .is_some_and(|ns| marks.covers(ns))
            })
            .collect(),
    )
}

pub fn by_namespace<K: Resource>(all: Vec<Arc<K>>) -> HashMap<String, Vec<Arc<K>>> {
    let mut out: HashMap<String, Vec<Arc<K>>> = HashMap::new();
    for o in all {
        let ns = o.meta().namespace.clone().unwrap_or_default();
        out.entry(ns).or_default().push(o);
    }
    out
}

/// The Deployments of namespace `ns` some object of which carries a marker
/// of a surge: the Deployment (being deleted too), an HPA, a ScaledObject.
/// With the ScaledObjects unknown, every Deployment under KEDA's HPA counts.
pub(crate) fn surging(
    deployments: &[Arc<Deployment>],
    hpas: &[Arc<k8s_openapi::api::autoscaling::v2::HorizontalPodAutoscaler>],
    scaled_objects: &[Arc<kube::core::DynamicObject>],
    keda_unknown: bool,
) -> BTreeSet<String> {
    let marked = |a: Option<&BTreeMap<String, String>>| Markers::any_present(a);
    // Lower case, as a record's target is read (`markers::legacy_surge`).
    deployments
        .iter()
        .filter(|d| marked(d.metadata.annotations.as_ref()))
        .filter_map(|d| d.metadata.name.clone())
        .chain(
            hpas.iter()
                .filter(|h| {
                    marked(h.metadata.annotations.as_ref())
                        || (keda_unknown && crate::surge::view::hpa_is_kedas(h))
                })
                .filter_map(|h| crate::surge::view::hpa_carrier(h)),
        )
        .chain(
            scaled_objects
                .iter()
                .filter(|so| marked(so.metadata.annotations.as_ref()))
                .filter_map(|so| crate::surge::view::scaled_object_carrier(so)),
        )
        .map(|n| n.to_ascii_lowercase())
        .collect()
}

/// KEDA minimums by target Deployment (the persisted baseline while
/// surged), of these ScaledObjects beside `hpas` (the namespace's, or more):
/// `surge::view::scaled_object_floor`. A paused one whose HPA KEDA deleted
/// has none: KEDA scales nothing, so
/// nothing holds the Deployment at that minimum, and a PDB kept there over
/// fewer replicas (a `kubectl scale` or `paused-replicas` below it, as for
/// maintenance) refused every eviction until a surge from the minimum (3
/// replicas for 1 pod under a minimum of 3). Its Deployment's floor is then
/// its own replicas, as with no autoscaler. One KEDA holds at its paused
/// count N (`KedaHold::HeldAt`) has its minimum up to N: that many pods is
/// all KEDA keeps, and a minimum below it (1 under a hold at 5, a freeze at
/// the current scale) keeps letting pods go as before the pause.
pub fn keda_minimums_of(
    scaled_objects: &[Arc<DynamicObject>],
    hpas: &[Arc<k8s_openapi::api::autoscaling::v2::HorizontalPodAutoscaler>],
) -> BTreeMap<String, i32> {
    let mut out = BTreeMap::new();
    for so in scaled_objects {
        let Some(name) = crate::surge::view::scaled_object_target(so) else {
            continue;
        };
        if let Some(floor) =
            crate::surge::view::scaled_object_floor(so, hpas.iter().map(AsRef::as_ref))
        {
            out.insert(name.to_string(), floor);
        }
    }
    out
}

/// Now, at the precision the apiserver stores a condition time with, so the
/// status we want compares equal to the one we read back.
fn now_in_seconds() -> k8s_openapi::jiff::Timestamp {
    let now = k8s_openapi::jiff::Timestamp::now();
    k8s_openapi::jiff::Timestamp::from_second(now.as_second()).unwrap_or(now)
}

fn condition(type_: &str, ok: bool, reason: &str, message: &str, prev: &[Condition]) -> Condition {
    let status = if ok { "True" } else { "False" };
    // Keep the transition time while the status stays the same.
    let last = prev
        .iter()
        .find(|c| c.type_ == type_ && c.status == status)
        .map(|c| c.last_transition_time.clone())
        .unwrap_or_else(|| Time(now_in_seconds()));
    Condition {
        type_: type_.into(),
        status: status.into(),
        reason: reason.into(),
        message: message.into(),
        last_transition_time: last,
        observed_generation: None,
    }
}

/// The UID recorded as proof that we created the PDB of this name (see
/// `plan::once_ours`): set while the PDB carries `ownedBy`, kept while the same
/// PDB (same UID) exists after a hand-over, dropped once it is gone.
fn recorded_pdb_uid(e: &EvictionAutoScaler, pdb: Option<&PodDisruptionBudget>) -> Option<String> {
    let p = pdb?;
    let uid = p.metadata.uid.as_deref()?;
    let recorded = e.status.as_ref().and_then(|s| s.pdb_uid.as_deref()) == Some(uid);
    (owned_by_us(&p.metadata) || recorded).then(|| uid.to_string())
}

pub fn desired_status(
    e: &EvictionAutoScaler,
    dep: Option<&Deployment>,
    pdb: Option<&PodDisruptionBudget>,
    degraded: Option<(String, String)>,
) -> EvictionAutoScalerStatus {
    let prev = e
        .status
        .as_ref()
        .map(|s| s.conditions.clone())
        .unwrap_or_default();
    let replicas = dep.and_then(|d| d.spec.as_ref()).and_then(|s| s.replicas);
    let baseline = dep.map(baseline_replicas);
    let surge = match (replicas, baseline) {
        (Some(r), Some(b)) if r > b => r - b,
        (Some(_), Some(_)) => 0,
        _ => 0,
    };
    let allowed = pdb
        .and_then(|p| p.status.as_ref())
        .map(|s| s.disruptions_allowed);
    let min = pdb
        .and_then(|p| p.spec.as_ref())
        .and_then(|s| s.min_available.as_ref())
        .and_then(|m| match m {
            k8s_openapi::apimachinery::pkg::util::intstr::IntOrString::Int(i) => Some(*i),
            _ => None,
        });
    let (ready, ready_reason, ready_msg) = match (dep, pdb) {
        (None, _) => (
            false,
            "TargetMissing",
            format!("Deployment {} not found", e.spec.target_name),
        ),
        (_, None) => (
            false,
            "PDBMissing",
            "no PodDisruptionBudget of this name".to_string(),
        ),
        (Some(_), Some(_)) if surge > 0 => (
            true,
            "Surging",
            format!(
                "surged from {} to {} replicas",
                baseline.unwrap_or(0),
                replicas.unwrap_or(0)
            ),
        ),
        _ => (
            true,
            "Protected",
            "the PodDisruptionBudget protects the Deployment".to_string(),
        ),
    };
    let (deg, deg_reason, deg_msg) = match degraded {
        Some((r, m)) => (true, r, m),
        None => (
            false,
            "AsExpected".to_string(),
            "nothing prevents a surge".to_string(),
        ),
    };
    EvictionAutoScalerStatus {
        last_eviction: e.spec.last_eviction.clone(),
        min_replicas: min,
        deployment_generation: dep.and_then(|d| d.metadata.generation),
        baseline_replicas: baseline,
        current_replicas: replicas,
        surge_replicas: Some(surge),
        disruptions_allowed: allowed,
        pdb_uid: recorded_pdb_uid(e, pdb),
        conditions: vec![
            condition("Ready", ready, ready_reason, &ready_msg, &prev),
            condition("Degraded", deg, &deg_reason, &deg_msg, &prev),
        ],
    }
}

/// Drops the reports of namespace `ns` whose problem is gone (not in
/// `still`), so that it is reported again if it comes back; keys are
/// `<kind>/<namespace>/<what>`.
/// The key a reported problem is remembered by, so it is reported once
/// and again only after it was solved (`forget_solved` reads its namespace
/// from the second segment).
fn report_key(action: &Action, ns: &str) -> Option<String> {
    match action {
        Action::NameConflict { deployment, .. } => Some(format!("conflict/{ns}/{deployment}")),
        Action::SelectorOverlap { deployment, .. } => Some(format!("overlap/{ns}/{deployment}")),
        _ => None,
    }
}

fn forget_solved(reported: &mut BTreeSet<String>, ns: &str, still: &BTreeSet<String>) {
    reported.retain(|k| k.split('/').nth(1) != Some(ns) || still.contains(k));
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pdb::owned_pdb;

    /// A ScaledObject's minimum is its Deployment's floor (its recorded
    /// baseline while surged), except while KEDA is paused on it and its
    /// HPA is gone: then it has none, and the Deployment's own replicas are
    /// the floor.
    #[test]
    fn a_paused_scaled_object_sets_no_floor_or_one_up_to_its_hold() {
        let so = |name: &str, target: &str, min: i64, annotations: &[(&str, &str)]| {
            let mut so = crate::surge::view::scaled_object_of("ns", name, target, min);
            so.metadata.annotations = Some(
                annotations
                    .iter()
                    .map(|(k, v)| (k.to_string(), v.to_string()))
                    .collect(),
            );
            Arc::new(so)
        };
        let sos = [
            so("web", "web", 3, &[]),
            so("api", "api", 3, &[("autoscaling.keda.sh/paused", "true")]),
            so("job", "job", 4, &[("autoscaling.keda.sh/paused", "false")]),
            so(
                "surged",
                "surged",
                5,
                &[
                    (names::SURGE_REPLICAS, "5"),
                    (names::ORIGINAL_MIN_REPLICAS, "2"),
                ],
            ),
            // paused-replicas counts once KEDA applied it (its status).
            so(
                "pending",
                "pending",
                3,
                &[("autoscaling.keda.sh/paused-replicas", "1")],
            ),
            // Paused, KEDA's HPA not deleted yet: it still lifts.
            so("late", "late", 3, &[("autoscaling.keda.sh/paused", "true")]),
        ];
        let kedas_hpa = |dep: &str| Arc::new(crate::surge::view::kedas_hpa("ns", dep, 3, 9));
        let floors = keda_minimums_of(&sos, &[kedas_hpa("late"), kedas_hpa("web")]);
        assert_eq!(
            floors,
            [
                ("web".to_string(), 3),
                ("job".to_string(), 4),
                ("surged".to_string(), 2),
                ("pending".to_string(), 3),
                ("late".to_string(), 3)
            ]
            .into()
        );
        // KEDA's HPA of another ScaledObject, or of this one in another
        // namespace, does not count.
        let mut elsewhere = (*kedas_hpa("late")).clone();
        elsewhere.metadata.namespace = Some("other".into());
        assert!(
            !keda_minimums_of(&sos, &[Arc::new(elsewhere), kedas_hpa("web")]).contains_key("late")
        );
        let applied = Arc::new(crate::surge::view::paused_at(
            crate::surge::view::scaled_object_of("ns", "held", "held", 3),
            1,
        ));
        assert!(keda_minimums_of(std::slice::from_ref(&applied), &[]).is_empty());
        // KEDA's HPA left standing at a minimum and maximum of the paused
        // count (what KEDA does once the Deployment is there): KEDA keeps 1
        // pod, so the floor is 1, not the minimum of 3 (over 1 pod, it
        // refused every eviction); at any other bounds that HPA still lifts
        // the Deployment to the minimum.
        let held_hpa = |n: i32| {
            let mut h = crate::surge::view::kedas_hpa("ns", "held", n, n);
            // KEDA copies the ScaledObject's annotations, our markers
            // among them: no floor is read from the HPA.
            h.metadata.annotations = Some(
                [
                    (names::SURGE_REPLICAS.to_string(), "4".to_string()),
                    (names::ORIGINAL_MIN_REPLICAS.to_string(), "3".to_string()),
                ]
                .into(),
            );
            Arc::new(h)
        };
        assert_eq!(
            keda_minimums_of(std::slice::from_ref(&applied), &[held_hpa(1)]),
            [("held".to_string(), 1)].into()
        );
        // Frozen at the current scale (minimum 1, paused at 5): the minimum
        // stays the floor, and pods go as they went before the pause.
        let frozen = crate::surge::view::paused_at(
            crate::surge::view::scaled_object_of("ns", "held", "held", 1),
            5,
        );
        assert_eq!(
            keda_minimums_of(&[Arc::new(frozen)], &[held_hpa(5)]),
            [("held".to_string(), 1)].into()
        );
        let lifting = Arc::new(crate::surge::view::kedas_hpa("ns", "held", 3, 9));
        assert_eq!(
            keda_minimums_of(&[applied], &[lifting]),
            [("held".to_string(), 3)].into()
        );
    }

    /// What keeps the Go project's `surge-revert` on a deleted record: a
    /// marker on the Deployment (being deleted too), on an HPA over it, on
    /// its ScaledObject, or KEDA's HPA over it while the ScaledObjects are
    /// unknown; by the name in lower case.
    #[test]
    fn a_surge_is_seen_on_every_object_that_may_carry_it() {
        use crate::surge::view::kedas_hpa;
        let marked = || -> Option<BTreeMap<String, String>> {
            Some([(names::SURGE_REPLICAS.to_string(), "4".to_string())].into())
        };
        let mut d = crate::pdb::tests::dep("web", 3);
        d.metadata.annotations = marked();
        d.metadata.deletion_timestamp = Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
            k8s_openapi::jiff::Timestamp::UNIX_EPOCH,
        ));
        let plain = Arc::new(crate::pdb::tests::dep("api", 3));
        assert_eq!(
            surging(&[Arc::new(d), plain.clone()], &[], &[], false),
            ["web".to_string()].into()
        );
        let mut h = kedas_hpa("ns", "Shop", 2, 9);
        let kedas = Arc::new(h.clone());
        h.metadata.owner_references = None;
        h.metadata.annotations = marked();
        assert_eq!(
            surging(std::slice::from_ref(&plain), &[Arc::new(h)], &[], false),
            ["shop".to_string()].into()
        );
        assert!(surging(
            std::slice::from_ref(&plain),
            std::slice::from_ref(&kedas),
            &[],
            false
        )
        .is_empty());
        assert_eq!(
            surging(std::slice::from_ref(&plain), &[kedas], &[], true),
            ["shop".to_string()].into(),
            "KEDA's HPA while the ScaledObjects are unknown"
        );
        let ar = kube::core::ApiResource::from_gvk_with_plural(
            &kube::core::GroupVersionKind::gvk("keda.sh", "v1alpha1", "ScaledObject"),
            "scaledobjects",
        );
        let mut so = kube::core::DynamicObject::new("q", &ar).within("ns");
        so.data = serde_json::json!({"spec": {"scaleTargetRef": {"name": "queue"}}});
        so.metadata.annotations = marked();
        assert_eq!(
            surging(&[plain], &[], &[Arc::new(so)], false),
            ["queue".to_string()].into()
        );
    }

    #[test]
    fn a_reason_is_kept_only_where_asked() {
        let d = DegradedReasons::default();
        d.set("a", "web", "SurgeImpossible", "maxUnavailable is 0");
        d.set("a", "api", "SurgeImpossible", "Recreate");
        d.set("b", "web", "PDBNameConflict", "taken");
        d.retain_reason("SurgeImpossible", |ns, dep| (ns, dep) == ("a", "api"));
        assert_eq!(d.get("a", "web"), None);
        assert!(d.get("a", "api").is_some());
        assert!(d.get("b", "web").is_some(), "another reason stays");
    }

    /// A Deployment deleted while in conflict (or its namespace) leaves no
    /// reason behind, whatever the reason.
    #[test]
    fn the_reasons_of_gone_deployments_are_forgotten() {
        let d = DegradedReasons::default();
        d.set("a", "web", "PDBNameConflict", "taken");
        d.set("a", "api", "PDBSelectorOverlap", "both");
        d.set("b", "web", "SurgeImpossible", "Recreate");
        d.forget_gone(|ns, dep| ns != "a" || dep == "api");
        assert_eq!(d.get("a", "web"), None);
        assert!(d.get("a", "api").is_some());
        d.forget_gone(|ns, _| ns == "a");
        assert_eq!(d.get("b", "web"), None, "its namespace is gone");
        assert!(d.get("a", "api").is_some());
    }

    /// A namespace's writes stop for this pass after a slow one, whatever
    /// its answer: a hung admission webhook answers 500 after its own
    /// timeout, one namespace must not hold the pass that long per object.
    #[test]
    fn a_slow_answer_holds_the_namespace_whatever_it_says() {
        let api = |code: u16| Err(crate::client::api_status(code));
        let quick = Duration::from_millis(20);
        assert!(!slow(&Ok(()), quick));
        assert!(!slow(&api(500), quick), "an object refused at once");
        assert!(
            slow(&api(500), Duration::from_secs(5)),
            "a webhook's timeout"
        );
        assert!(slow(&Ok(()), SLOW_WRITE));
        let timed_out = Err(kube::Error::Service("no answer".into()));
        assert!(slow(&timed_out, quick));
    }
    use crate::pdb::tests::dep;
    use k8s_openapi::api::policy::v1::PodDisruptionBudgetSpec;
    use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
    use kube::core::response::{StatusCause, StatusDetails};

    #[test]
    fn a_solved_problem_is_forgotten_so_its_return_is_reported_again() {
        let keys = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<BTreeSet<_>>();
        let mut reported = keys(&[
            "conflict/a/web",
            "overlap/a/api",
            "ns/a/yes-please",
            "conflict/ab/web",
            "conflict/b/web",
        ]);
        // Namespace a still has its overlap; its conflict and annotation are solved.
        forget_solved(&mut reported, "a", &keys(&["overlap/a/api"]));
        assert_eq!(
            reported,
            keys(&["overlap/a/api", "conflict/ab/web", "conflict/b/web"]),
            "other namespaces' reports stay, even one whose name starts the same"
        );
        forget_solved(&mut reported, "b", &BTreeSet::new());
        assert_eq!(reported, keys(&["overlap/a/api", "conflict/ab/web"]));
    }

    fn eas(status: Option<EvictionAutoScalerStatus>) -> EvictionAutoScaler {
        EvictionAutoScaler {
            metadata: ObjectMeta {
                name: Some("web".into()),
                ..Default::default()
            },
            spec: EvictionAutoScalerSpec {
                target_name: "web".into(),
                target_kind: "deployment".into(),
                last_eviction: None,
            },
            status,
        }
    }

    fn pdb(min: Option<i32>, max: Option<i32>, ours: bool, uid: &str) -> PodDisruptionBudget {
        let mut p = owned_pdb(&dep("web", 3), 3);
        if !ours {
            p.metadata.annotations = None;
        }
        p.metadata.uid = Some(uid.into());
        p.spec = Some(PodDisruptionBudgetSpec {
            min_available: min.map(IntOrString::Int),
            max_unavailable: max.map(IntOrString::Int),
            ..Default::default()
        });
        p
    }

    /// The stored object after our merge patch, as the apiserver computes it.
    fn stored_after(
        current: &EvictionAutoScalerStatus,
        patch: &serde_json::Value,
    ) -> serde_json::Value {
        let mut doc = json!({ "status": current });
        json_patch::merge(&mut doc, patch);
        doc
    }

    #[test]
    fn a_field_we_stop_setting_is_removed_and_a_steady_status_is_not_rewritten() {
        let d = dep("web", 3);
        // A user PDB with minAvailable 2 ...
        let first = desired_status(
            &eas(None),
            Some(&d),
            Some(&pdb(Some(2), None, false, "u")),
            None,
        );
        assert_eq!(first.min_replicas, Some(2));
        // ... switched to maxUnavailable.
        let e = eas(Some(first.clone()));
        let want = desired_status(&e, Some(&d), Some(&pdb(None, Some(1), false, "u")), None);
        assert_eq!(want.min_replicas, None);
        let patch = status_patch(Some(&first), &want).expect("a write");
        assert_eq!(patch["status"]["minReplicas"], serde_json::Value::Null);
        let stored = stored_after(&first, &patch);
        assert!(
            stored["status"].get("minReplicas").is_none(),
            "the old minimum is gone: {stored}"
        );
        let back: EvictionAutoScalerStatus =
            serde_json::from_value(stored["status"].clone()).expect("status");
        assert_eq!(back, want);
        // Steady: nothing to write.
        let e = eas(Some(back));
        let again = desired_status(&e, Some(&d), Some(&pdb(None, Some(1), false, "u")), None);
        assert_eq!(status_patch(e.status.as_ref(), &again), None);
    }

    /// An `evictionTime` with fractional seconds (set by hand) is copied to
    /// the status, written in whole seconds: once written, nothing more.
    #[test]
    fn a_fractional_eviction_time_is_written_once() {
        let d = dep("web", 3);
        let mut e = eas(None);
        e.spec.last_eviction = Some(crate::crd::LastEviction {
            pod_name: "web-1".into(),
            eviction_time: serde_json::from_value(json!("2026-12-05T10:00:00.5Z")).ok(),
        });
        let want = desired_status(&e, Some(&d), None, None);
        let patch = status_patch(None, &want).expect("a first write");
        let stored: EvictionAutoScalerStatus =
            serde_json::from_value(patch["status"].clone()).expect("status");
        assert_ne!(stored, want, "read back in whole seconds");
        e.status = Some(stored);
        let again = desired_status(&e, Some(&d), None, None);
        assert_eq!(status_patch(e.status.as_ref(), &again), None);
    }

    #[test]
    fn the_pdb_uid_is_recorded_while_ours_and_kept_only_for_that_pdb() {
        let d = dep("web", 3);
        let s = desired_status(
            &eas(None),
            Some(&d),
            Some(&pdb(Some(3), None, true, "p1")),
            None,
        );
        assert_eq!(s.pdb_uid.as_deref(), Some("p1"));
        // Handed over (ownedBy removed): the same PDB keeps its record.
        let e = eas(Some(s));
        let s = desired_status(&e, Some(&d), Some(&pdb(Some(3), None, false, "p1")), None);
        assert_eq!(s.pdb_uid.as_deref(), Some("p1"));
        // Another PDB of that name, never ours: no record.
        let s2 = desired_status(&e, Some(&d), Some(&pdb(Some(3), None, false, "p2")), None);
        assert_eq!(s2.pdb_uid, None);
        // A user PDB never gets one.
        let s3 = desired_status(
            &eas(None),
            Some(&d),
            Some(&pdb(Some(3), None, false, "p3")),
            None,
        );
        assert_eq!(s3.pdb_uid, None);
        // PDB gone: record dropped.
        assert_eq!(desired_status(&e, Some(&d), None, None).pdb_uid, None);
    }

    fn api_error(code: u16, reason: &str, message: &str, cause: Option<&str>) -> kube::Error {
        kube::Error::Api(Box::new(Status {
            code,
            reason: reason.into(),
            message: message.into(),
            details: cause.map(|c| StatusDetails {
                name: "web".into(),
                group: String::new(),
                kind: "poddisruptionbudgets".into(),
                uid: String::new(),
                causes: vec![StatusCause {
                    reason: c.into(),
                    message: "namespace ns is being terminated".into(),
                    field: "metadata.namespace".into(),
                }],
                retry_after_seconds: 0,
            }),
            ..Default::default()
        }))
    }

    /// The minAvailable write lands only on the PDB the plan read, while it
    /// is ours: a user's PDB re-created under the name, or ours handed over
    /// meanwhile, fails the patch as a whole and is left as it is.
    #[test]
    fn the_min_available_write_is_guarded_by_uid_and_ownership() {
        let dep = crate::pdb::tests::dep("web", 3);
        let mut ours = crate::pdb::owned_pdb(&dep, 2);
        ours.metadata.uid = Some("u1".into());
        let ops = set_min_available_ops(&ours, 3);
        let patch: json_patch::Patch =
            serde_json::from_value(serde_json::Value::Array(ops)).unwrap();
        let apply = |p: &PodDisruptionBudget| {
            let mut doc = serde_json::to_value(p).unwrap();
            json_patch::patch(&mut doc, &patch).map(|_| doc)
        };
        let after: PodDisruptionBudget =
            serde_json::from_value(apply(&ours).expect("ours, as read")).unwrap();
        assert_eq!(
            after.spec.unwrap().min_available,
            Some(k8s_openapi::apimachinery::pkg::util::intstr::IntOrString::Int(3))
        );
        let mut users = ours.clone();
        users.metadata.uid = Some("u2".into());
        users.metadata.annotations = None;
        assert!(apply(&users).is_err(), "a user's PDB of that name");
        let mut handed = ours.clone();
        handed.metadata.annotations = Some([(names::TARGET.to_string(), "web".to_string())].into());
        assert!(apply(&handed).is_err(), "ownedBy removed meanwhile");
        let mut edited = ours.clone();
        edited.spec.as_mut().unwrap().min_available =
            Some(k8s_openapi::apimachinery::pkg::util::intstr::IntOrString::Int(5));
        assert!(apply(&edited).is_err(), "minAvailable changed meanwhile");
        // maxUnavailable put beside it: removed, or the apiserver refuses both.
        let mut with_max = ours.clone();
        with_max.spec.as_mut().unwrap().max_unavailable =
            Some(k8s_openapi::apimachinery::pkg::util::intstr::IntOrString::Int(1));
        with_max.spec.as_mut().unwrap().min_available = None;
        let ops = set_min_available_ops(&with_max, 3);
        let patch: json_patch::Patch =
            serde_json::from_value(serde_json::Value::Array(ops)).unwrap();
        let mut doc = serde_json::to_value(&with_max).unwrap();
        json_patch::patch(&mut doc, &patch).expect("applies");
        let after: PodDisruptionBudget = serde_json::from_value(doc).unwrap();
        let spec = after.spec.unwrap();
        assert_eq!(spec.max_unavailable, None);
        assert_eq!(
            spec.min_available,
            Some(k8s_openapi::apimachinery::pkg::util::intstr::IntOrString::Int(3))
        );
    }

    /// The live list before creates is held against the read the plan was
    /// made from: a user's PDB that reached the cache after the pass read
    /// it was not planned around, and the creates wait (a review, session
    /// 45: it was held against the cache as it is now).
    #[test]
    fn creates_wait_for_a_pdb_the_plan_did_not_see() {
        let pdb_of = |uid: &str| {
            let mut p = PodDisruptionBudget::default();
            p.metadata.uid = Some(uid.into());
            p
        };
        let planned_from = vec![Arc::new(pdb_of("seen"))];
        let mut created = HashSet::new();
        let live = [pdb_of("seen")];
        assert!(all_planned_around(&live, &planned_from, &created));
        let live = [pdb_of("seen"), pdb_of("users")];
        assert!(
            !all_planned_around(&live, &planned_from, &created),
            "a PDB the plan did not see, wherever the cache is now"
        );
        created.insert("ours".to_string());
        let live = [pdb_of("seen"), pdb_of("ours")];
        assert!(
            all_planned_around(&live, &planned_from, &created),
            "this replica's own creates count as seen"
        );
        assert!(all_planned_around(&[], &planned_from, &created));
    }

    #[test]
    fn namespace_deletion_answers_are_expected_other_failures_are_errors() {
        let terminating = api_error(
            403,
            "Forbidden",
            "poddisruptionbudgets \"web\" is forbidden: unable to create new content in namespace ns because it is being terminated",
            Some("NamespaceTerminating"),
        );
        assert_eq!(classify(&terminating), Refusal::Expected);
        let by_cause_only = api_error(403, "Forbidden", "forbidden", Some("NamespaceTerminating"));
        assert_eq!(classify(&by_cause_only), Refusal::Expected);
        assert_eq!(
            classify(&api_error(404, "NotFound", "not found", None)),
            Refusal::Expected
        );
        assert_eq!(
            classify(&api_error(409, "Conflict", "precondition failed", None)),
            Refusal::Expected
        );
        let rbac = api_error(
            403,
            "Forbidden",
            "poddisruptionbudgets is forbidden: User \"x\" cannot create resource",
            None,
        );
        assert_eq!(classify(&rbac), Refusal::Error);
        assert_eq!(
            classify(&api_error(500, "InternalError", "boom", None)),
            Refusal::Error
        );
        assert_eq!(
            classify(&api_error(422, "Invalid", "bad", Some("FieldValueInvalid"))),
            Refusal::Error
        );
        // What the apiserver answers a JSON patch whose `test` failed.
        assert_eq!(
            classify(&api_error(
                422,
                "Invalid",
                "the server rejected our request due to an error in our request",
                None
            )),
            Refusal::Expected
        );
        // An admission webhook's denial with its own code: an error to see,
        // not a change to re-plan for.
        for code in [409, 422] {
            let denied = api_error(
                code,
                "",
                "admission webhook \"lock.example.com\" denied the request: locked",
                None,
            );
            assert_eq!(classify(&denied), Refusal::Error, "{code}");
        }
        let no_crd = api_error(
            404,
            "NotFound",
            "the server could not find the requested resource",
            None,
        );
        assert_eq!(
            classify(&no_crd),
            Refusal::Error,
            "a missing CRD is an error"
        );
        let no_group = api_error(
            404,
            "Failed to parse error data",
            "404 page not found",
            None,
        );
        assert_eq!(
            classify(&no_group),
            Refusal::Error,
            "a missing API group too"
        );
    }
}
