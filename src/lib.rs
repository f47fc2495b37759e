//! eviction-autoscaler: owned PodDisruptionBudgets for Deployments, and a
//! surge of replicas when a budget blocks a node drain.
//! The contract is `shared/spec/behaviour.md`; module docs cite its sections.

pub mod budget;
pub mod cache;
pub mod certs;
pub mod client;
pub mod config;
pub mod crd;
pub mod declared;
pub mod dirty;
pub mod doctor;
pub mod events;
pub mod finalizers;
pub mod header_timer;
pub mod leader;
pub mod markers;
pub mod metrics;
pub mod names;
pub mod patch;
pub mod pdb;
pub mod reconcile;
pub mod run;
pub mod scope;
pub mod server;
pub mod supervise;
pub mod surge;
pub mod tls;
pub mod uninstall;
pub mod webhook;
