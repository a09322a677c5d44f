//! The sources: the optional samplers and the `--config` set, each prepared
//! once from its spec before anything starts, and the sampling tasks (the
//! engine's, the etcd source's and every other sampler's) spawned from them.

use std::sync::Arc;

use anyhow::Context;
use tokio::task::JoinHandle;

use super::graph::{Source, Wiring};
use crate::engine::EngineHandle;
use crate::reload::ReloadStatus;
use crate::runtime::clock::Clock;
use crate::sources::backup::BackupSampler;
use crate::sources::etcd::{EtcdConfig, ReadFloor};
use crate::sources::etcd_metrics::EtcdMetricsSampler;
use crate::sources::owner::OwnerSampler;
use crate::sources::scrape_set::{PreparedSet, ScrapeSet};
use crate::sources::tls_material::Credentials;
use crate::sources::{self, Prepared, Sampling};
use etcd_readiness_policy::signals::Catalogue;

/// The sources built before anything starts: the optional samplers, the
/// `--config` set, and the TLS credentials their reloaders keep current.
pub(super) struct PreparedSources {
    pub(super) samplers: Vec<Prepared>,
    pub(super) scrape: Option<PreparedSet>,
    pub(super) credentials: Vec<Credentials>,
}

/// The optional sources of the graph, each built once from its spec — its
/// flags, or `--config` — before anything starts (a bad flag or file fails
/// here) and rebuilt from the same spec after a panic. A spec shares its
/// source's credentials, so a rebuilt sampler uses the material in force.
pub(super) fn prepare_sources(
    wiring: &Wiring,
    catalogue: &Arc<Catalogue>,
    sampling: &Sampling,
    scrape_status: Option<ReloadStatus>,
) -> anyhow::Result<PreparedSources> {
    let mut scrape_status = scrape_status;
    let mut scrape = None;
    let mut prepared = Vec::new();
    let mut credentials: Vec<Credentials> = wiring.etcd.tls.iter().cloned().collect();
    for source in &wiring.samplers {
        let cat = catalogue.clone();
        match source.clone() {
            Source::Backup(b) => {
                // Its error names the flags and says the exporter cannot start.
                let creds = crate::sources::backup::backup_credentials(&b.tls)?;
                credentials.extend(creds.clone());
                let spec = move || BackupSampler::with_credentials(b.clone(), creds.clone(), &cat);
                prepared.push(sources::prepare(spec).context("--backup.url")?);
            }
            Source::Owner(o) => {
                let spec = move || OwnerSampler::new(o.clone(), &cat);
                prepared.push(sources::prepare(spec).context("--owner.name")?);
            }
            Source::EtcdMetrics(m, creds) => {
                let spec =
                    move || EtcdMetricsSampler::with_credentials(m.clone(), creds.clone(), &cat);
                prepared.push(sources::prepare(spec).context("--etcd.metrics-url")?);
            }
            Source::Scrape(set, path) => {
                let status = scrape_status.take().unwrap_or_default();
                let set = ScrapeSet::prepare(&path, &set, cat, sampling.clone(), status);
                scrape = Some(set.context("--config")?);
            }
        }
    }
    Ok(PreparedSources {
        samplers: prepared,
        scrape,
        credentials,
    })
}

/// The engine's task, the etcd source's and every other sampler's. Every
/// long-running task is supervised (see crate::runtime::supervise): a panic
/// is logged, counted and the task is built again from its spec.
pub(super) fn spawn_sampling(
    etcd_config: &EtcdConfig,
    engine: &EngineHandle,
    (catalogue, sampling): (&Catalogue, &Sampling),
    (etcd, read_floor): (crate::sources::etcd::Families, &ReadFloor),
    samplers: Vec<Prepared>,
) -> Vec<JoinHandle<()>> {
    let mut tasks = vec![engine.spawn()];
    tasks.push(crate::sources::etcd::spawn(
        etcd_config_for_this_process(etcd_config, &sampling.runtime.clock),
        catalogue,
        sampling.clone(),
        etcd,
        read_floor.clone(),
    ));
    tasks.extend(samplers.into_iter().map(|p| p.spawn(sampling)));
    tasks
}

/// `etcd` with what this process's own CPU limit implies: under a CFS quota
/// the exporter can be frozen for up to one period, which must not outdate a
/// healthy answer (see [`crate::runtime::cpuquota`]).
fn etcd_config_for_this_process(etcd: &EtcdConfig, clock: &Clock) -> EtcdConfig {
    let mut etcd = etcd.clone();
    if let Some(q) = clock.cpu_quota() {
        etcd.freeze = q.longest_freeze();
        tracing::info!(
            limit_millicores = %q.millicores(),
            quota = ?q.quota,
            period = ?q.period,
            trust = ?etcd.trust().base,
            "CPU limit: the exporter can be frozen for up to one CFS period, so a pending etcd call \
             outdates the last answer only after that period and a margin"
        );
    }
    if clock.has_cpu_pressure() {
        tracing::debug!(
            "CPU pressure (PSI) available: time the node's CPU is contended while an etcd call \
             is pending extends its trust, up to {:?}",
            etcd.trust().contended_max
        );
    } else {
        tracing::info!(
            "no CPU pressure information (/proc/pressure/cpu): a pending etcd call is trusted \
             for {:?} however busy the node is",
            etcd.trust().base
        );
    }
    etcd
}
