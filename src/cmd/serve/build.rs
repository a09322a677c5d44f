//! What `serve` builds before any task runs: the catalogue for the
//! configuration, the policy compiled against it, the one runtime, the
//! metric families, the engine and the sources prepared from their specs.
//! A bad flag, file or policy fails here, before a socket is bound.

use std::sync::Arc;

use prometheus_client::registry::Registry;

use super::graph::Wiring;
use super::metrics::{FileMetrics, register_metrics};
use super::sources::{PreparedSources, prepare_sources};
use crate::config::ServeConfig;
use crate::engine::{EngineHandle, Timing};
use crate::http::HttpMetrics;
use crate::runtime::Runtime;
use crate::runtime::clock::Clock;
use crate::sources::etcd::ReadFloor;
use crate::sources::{RoundNotifier, Sampling};
use etcd_readiness_policy::policy::Policy;
use etcd_readiness_policy::signals::{Catalogue, SignalStore};

/// The catalogue for this configuration: the built-in signals plus those of
/// the `--config` scrape sources; sources that are not configured are
/// disabled, so a policy naming their signals is rejected at load time with
/// the flag that enables them.
pub fn catalogue_for(config: &ServeConfig) -> anyhow::Result<Catalogue> {
    let mut c = Catalogue::builtin();
    crate::sources::config::configure_catalogue(
        crate::sources::config::BuiltinSources {
            backup: config.backup.is_some(),
            owner: config.owner.is_some(),
            etcd_metrics: config.etcd_metrics.is_some(),
        },
        config.scrape.as_ref(),
        &mut c,
    )
    .map_err(|e| anyhow::anyhow!("--config: {e}"))?;
    Ok(c)
}

/// Everything `serve` builds before any task runs (a bad flag, file or
/// policy fails here): the catalogue, the samplers' shared parts (store,
/// notifier, runtime), the engine, the sources prepared from their specs,
/// and the metric families not yet handed to their owner.
pub(super) struct Built {
    pub(super) catalogue: Arc<Catalogue>,
    pub(super) sampling: Sampling,
    pub(super) engine: EngineHandle,
    pub(super) sources: PreparedSources,
    pub(super) registry: Arc<Registry>,
    pub(super) http: HttpMetrics,
    pub(super) etcd: crate::sources::etcd::Families,
    pub(super) files: FileMetrics,
    /// What the policy in force compares the etcd reads' latency with.
    pub(super) read_floor: ReadFloor,
}

/// Catalogue and policy, the one runtime, metrics, the engine, the sources.
pub(super) fn build(
    config: &ServeConfig,
    wiring: &Wiring,
    extend: impl FnOnce(&mut Registry),
) -> anyhow::Result<Built> {
    let catalogue = Arc::new(catalogue_for(config)?);
    let policy = Policy::compile(&config.policy.shown(), config.policy.text(), &catalogue)
        .map_err(|d| anyhow::anyhow!("invalid policy:\n{d}"))?;
    // Run-time state, not configuration: what the policy in force still
    // compares the etcd reads' latency with, followed by its reloads.
    let read_floor = ReadFloor::default();
    read_floor.follow(&policy);
    let store = Arc::new(SignalStore::new(&catalogue));
    // The one clock, read here and nowhere below (crate::runtime::clock),
    // and the one supervisor: every task is handed this runtime.
    let runtime = Runtime::new(Clock::node());
    let notifier = RoundNotifier::new();
    let (mut metrics, registry) = register_metrics(wiring, &runtime, extend);
    let sampling = Sampling {
        store: store.clone(),
        notifier: notifier.clone(),
        metrics: metrics.sources.clone(),
        runtime: runtime.clone(),
    };
    // Every source is built from its spec before anything starts.
    let status = metrics.files.scrape.take();
    let sources = prepare_sources(wiring, &catalogue, &sampling, status)?;
    let engine = EngineHandle::new(
        Arc::new(policy),
        catalogue.clone(),
        store,
        notifier,
        metrics.engine,
        timing(config),
        runtime,
    );
    Ok(Built {
        catalogue,
        sampling,
        engine,
        sources,
        registry,
        http: metrics.http,
        etcd: metrics.etcd,
        files: metrics.files,
        read_floor,
    })
}

/// What the engine needs to judge staleness, from the sampling flags.
fn timing(config: &ServeConfig) -> Timing {
    Timing {
        sample_interval: config.sample_interval,
        sample_timeout: config.sample_timeout,
    }
}
