//! Kubernetes clients (behaviour.md section 8: every API call has a timeout).
//! Two clients over one kubeconfig: watches stream for minutes and are
//! guarded by the watcher's own idle timeout, so only the client for
//! requests gets a read timeout; a hung request then fails instead of
//! stalling a controller pass or a Lease renewal.

use std::time::Duration;

use kube::{Client, Config};

/// Connecting to the apiserver.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// One request, from the write to the last byte of the answer.
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(15);

#[derive(Clone)]
pub struct Clients {
    /// Gets, lists, patches, creates, deletes: every call bounded.
    pub api: Client,
    /// Watches (reflectors).
    pub watch: Client,
}

/// Both clients from the in-cluster config, else `KUBECONFIG` / `~/.kube/config`.
pub async fn infer() -> Result<Clients, kube::Error> {
    let config = Config::infer().await.map_err(kube::Error::InferConfig)?;
    from_config(config)
}

pub fn from_config(config: Config) -> Result<Clients, kube::Error> {
    let mut api = config.clone();
    api.connect_timeout = Some(CONNECT_TIMEOUT);
    api.read_timeout = Some(REQUEST_TIMEOUT);
    api.write_timeout = Some(REQUEST_TIMEOUT);
    // Count the read timeout from the request, not from when a pooled
    // connection went idle.
    api.reset_reader_on_write = true;
    let mut watch = config;
    watch.connect_timeout = Some(CONNECT_TIMEOUT);
    // The watcher backs off and retries by itself; kube-client's own retry of
    // 429/503/504 (up to 15 attempts, minutes) would hide a failing watch from
    // the cache's health tracking (behaviour.md 4.6).
    watch.default_retry = false;
    Ok(Clients {
        api: Client::try_from(api)?,
        watch: Client::try_from(watch)?,
    })
}
