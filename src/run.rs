//! `eviction-autoscaler serve`: wires the caches, webhooks and server together.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::mpsc;
use tokio::task::JoinSet;

use crate::config::{LogFormat, ServeOpts};
use crate::metrics::Metrics;
use crate::reconcile::{self, DegradedReasons, Reconciler};
use crate::server::{self, AppState};
use crate::supervise::Fatal;
use crate::surge::signals::SignalBook;
use crate::surge::worker::Worker;
use crate::tls::{ReloadingCert, TlsSettings};
use crate::webhook::live::{ApiReader, LIVE_CHECK_TIMEOUT};
use crate::webhook::Webhooks;
use crate::{cache, tls::TlsError};

#[derive(Debug, thiserror::Error)]
pub enum RunError {
    #[error("TLS: {0}")]
    Tls(#[from] TlsError),
    #[error("Kubernetes client configuration: {0}")]
    Kube(#[from] kube::Error),
    #[error(transparent)]
    Serve(#[from] server::ServeError),
    #[error("settings: {0}")]
    Settings(String),
    #[error("stopped because {0}")]
    TaskEnded(String),
}

pub fn init_logging(format: LogFormat) {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let builder = tracing_subscriber::fmt().with_env_filter(filter);
    // A second init (tests) is harmless: keep the first subscriber.
    let _ = match format {
        LogFormat::Json => builder.json().try_init(),
        LogFormat::Text => builder.try_init(),
    };
}

async fn shutdown_signal() {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{signal, SignalKind};
        match signal(SignalKind::terminate()) {
            Ok(mut term) => {
                tokio::select! {
                    _ = term.recv() => {},
                    _ = tokio::signal::ctrl_c() => {},
                }
            }
            Err(_) => {
                let _ = tokio::signal::ctrl_c().await;
            }
        }
    }
    #[cfg(not(unix))]
    {
        let _ = tokio::signal::ctrl_c().await;
    }
}

pub async fn serve(opts: ServeOpts) -> Result<(), RunError> {
    opts.check().map_err(RunError::Settings)?;
    // Certificates first: a bad file is a start-up error, not a later surprise.
    let cert = ReloadingCert::load(&opts.tls_cert_file, &opts.tls_key_file)?;
    let tls_settings = TlsSettings::load(cert.clone(), opts.client_ca_file.as_deref())?;
    let metrics = Arc::new(Metrics::new());
    let clients = crate::client::infer_counted(&metrics.api_requests).await?;
    let client = clients.api.clone();
    let behaviour = Arc::new(opts.behaviour.clone());
    tracing::info!(?behaviour, listen = %opts.listen, "starting");

    let mut tasks = JoinSet::new();
    // The election and the controllers: stopped first on SIGTERM, before the
    // Lease is released, while the webhooks (and their caches) keep serving.
    let mut controllers = JoinSet::new();
    // Any of these tasks ending (a panic) shuts the process down.
    let fatal = Fatal::default();
    tasks.spawn(fatal.must_run(
        "the serving certificate's reload",
        cert.clone().watch(opts.cert_reload_interval),
    ));
    if tls_settings.client_ca_configured() {
        tasks.spawn(
            fatal.must_run(
                "the client CA's reload",
                tls_settings
                    .clone()
                    .watch_client_ca(opts.cert_reload_interval),
            ),
        );
    }
    let cache = cache::start(
        clients.watch.clone(),
        behaviour.clone(),
        opts.watch_stale_after,
        &metrics.watch_events,
        &mut tasks,
        &fatal,
    );
    let (signals, signal_rx) = mpsc::channel(1024);

    // Controllers run while this replica leads.
    let (leader_tx, leader) = tokio::sync::watch::channel(!opts.leader_election);
    let term = crate::leader::Term::default();
    let mut election_handle = None;
    if opts.leader_election {
        let identity = crate::leader::identity(opts.pod_name.as_deref());
        tracing::info!(%identity, "leader election identity");
        let election = crate::leader::Election {
            api: kube::Api::namespaced(client.clone(), &opts.namespace),
            name: "eviction-autoscaler".into(),
            identity,
            timing: crate::leader::Timing::default(),
            observed: Default::default(),
            term: term.clone(),
        };
        election_handle = Some(election.clone());
        let caches = cache.clone();
        controllers.spawn(fatal.must_run(
            "the leader election",
            election.run(
                leader_tx,
                metrics.clone(),
                move || caches.ready_for(crate::cache::Reader::SurgeWorker),
                opts.watch_stale_after,
            ),
        ));
    } else {
        metrics.leader.set(1);
        // Keep the sender alive: a dropped sender would end the controllers' waits.
        controllers.spawn(fatal.must_run("the leader flag", async move {
            leader_tx.closed().await;
        }));
    }
    let degraded = DegradedReasons::marking(cache.ns_dirty.clone());
    let events = crate::events::Events::spawn(
        reconcile::recorder(client.clone(), opts.pod_name.clone()),
        metrics.events_dropped.clone(),
    );
    let events_at_shutdown = events.clone();
    let reconciler = Arc::new(Reconciler::new(
        cache.clone(),
        client.clone(),
        metrics.clone(),
        events.clone(),
        degraded.clone(),
        opts.orphan_pdb_grace,
    ));
    controllers.spawn(fatal.must_run("the reconciler", reconciler.run(leader.clone())));
    let book = SignalBook::default();
    let worker = Worker::new(
        cache.clone(),
        client.clone(),
        metrics.clone(),
        book.clone(),
        degraded.clone(),
        events,
        term,
    );
    controllers.spawn(fatal.must_run("the surge worker", worker.run(leader.clone())));

    // Every replica records its webhook's signals (memory and durable copy).
    // Signals older than twice the cooldown are never read again.
    let keep = (behaviour.cooldown * 2).max(Duration::from_secs(600));
    tasks.spawn(fatal.must_run(
        "the surge signals' consumer",
        crate::surge::signals::consume(signal_rx, book, client.clone(), keep),
    ));

    let webhooks = Arc::new(Webhooks {
        cache,
        live: ApiReader {
            client: client.clone(),
        },
        live_timeout: LIVE_CHECK_TIMEOUT,
        client,
        metrics: metrics.clone(),
        signals,
        // The Deployment webhook's list and create, within its answer's
        // time (a create cut off by the request timeout would leave the PDB
        // without the Deployment's annotation).
        write_timeout: Duration::from_secs(5)
            .min(opts.request_timeout.saturating_sub(Duration::from_secs(1)))
            .max(Duration::from_millis(500)),
        hold: opts.eviction_hold,
        held: Arc::new(tokio::sync::Semaphore::new(crate::webhook::hold::MAX_HELD)),
        room: Default::default(),
    });
    let draining = Arc::new(AtomicBool::new(false));
    let app = server::router(
        AppState {
            webhooks,
            metrics,
            max_body: opts.max_body_bytes,
            require_client_cert: tls_settings.client_ca_configured(),
            draining: draining.clone(),
        },
        opts.request_timeout,
    );
    let listener = server::bind(opts.listen).await?;
    tracing::info!(listen = %opts.listen, "serving HTTPS");
    let delay = opts.shutdown_delay;
    // Why the process stops, when a task's end (not a signal) stopped it:
    // `fatal` keeps the first, and none once the shutdown began (tasks end
    // then as the server goes: the signal consumer, its senders dropped).
    let stopped_by = fatal.clone();
    let shutdown = async move {
        tokio::select! {
            _ = shutdown_signal() => {},
            why = fatal.wait() => tracing::error!(%why, "shutting down: restart expected"),
        }
        fatal.stopping();
        let started = tokio::time::Instant::now();
        // Readiness first: endpoints stop sending new requests while this
        // replica still answers the ones already on their way.
        draining.store(true, Ordering::Relaxed);
        tracing::info!(?delay, "shutting down: not ready, still serving");
        controllers.abort_all();
        while controllers.join_next().await.is_some() {}
        if let Some(e) = election_handle {
            // No controller of ours runs any more: hand over at once rather
            // than at the Lease's expiry.
            let _ = tokio::time::timeout(Duration::from_secs(3), e.release()).await;
        }
        // The controllers' last Events (a revert just before the signal).
        if tokio::time::timeout(Duration::from_secs(2), events_at_shutdown.flush())
            .await
            .is_err()
        {
            tracing::info!("shutting down with Events not yet sent");
        }
        tokio::time::sleep_until(started + delay).await;
        tracing::info!("closing the listener; finishing requests in flight");
    };
    server::serve(listener, tls_settings, app, opts.request_timeout, shutdown).await;
    tracing::info!("shut down");
    tasks.abort_all();
    match stopped_by.why() {
        Some(why) => Err(RunError::TaskEnded(why.to_string())),
        None => Ok(()),
    }
}
