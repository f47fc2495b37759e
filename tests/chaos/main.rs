//! Fault tolerance under chaos (issue 10, docs/reliability.md): leader
//! kills during drains, control-plane restarts, a paused link to the
//! apiserver, all webhook replicas down, rolling restarts and certificate
//! rotations under load, a surge written halfway across a restart, the product's CRD or KEDA's deleted mid-surge, ScaledObjects it cannot list, an
//! eviction racing a scale-down the PDB has not counted, two replicas whose
//! clocks are 10 minutes apart, a lead lost and taken back, a leader whose
//! caches fail while its Lease renews. They restart
//! the server and bring replicas of their own, or delete cluster-wide
//! objects, so they run one at a time (`--test-threads=1`): a short
//! version in `make test`, the long leader loop in `make chaos`
//! (CHAOS_KILLS, default 20). Every figure goes to $CLUSTER_DIR/figures.txt.

#[path = "../e2e/support.rs"]
mod support;

mod clock_skew;
mod control_plane;
mod crd_deleted;
mod fleet;
mod halfway;
mod keda_removed;
mod keda_unlisted;
mod lead_flap;
mod leader_chaos;
mod load;
mod no_webhook;
mod proxy;
mod recount;
mod restart_steps;
mod rolling;
mod set_back;
mod slow_apiserver;
