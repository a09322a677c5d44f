//! The running scrape sources of `--config`, and the file as a [`Load`] for
//! the one reloader: a changed file is parsed and checked as at start, every
//! source's sampler is built (URL, TLS files), and only then are the sources
//! whose settings changed restarted with them; a broken file changes nothing.
//!
//! The TLS files the sources name are part of the file: a change of their
//! content (a Secret's `..data` swap) restarts the sources that use them
//! with a client built from the new files, and a pair that does not match
//! fails the reload like a bad file (see [`super::tls_material`]).
//!
//! What a reload may change: each source's `url`, `interval`, `timeout`,
//! `tls` and its signals' selectors (`metric`, `labels`, `aggregate`). What
//! needs a restart: adding, removing or renaming a source or a signal — the
//! catalogue, and the policy checked against it, are fixed at start (a
//! reload that tries is refused with that reason; the catalogue's help text
//! of a scrape signal also stays the start's).

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use sha2::{Digest, Sha256};
use tokio::task::JoinHandle;

use super::Sampling;
use super::config::{Config, ConfigError, MAX_CONFIG_BYTES, ScrapeConfig};
use super::scrape::ScrapeSampler;
use crate::outside::http_client::SourceError;
use crate::reload::{Change, LastGood, Load, Names, Problem, ReloadStatus};
use etcd_readiness_policy::signals::Catalogue;
use etcd_readiness_policy::sync::TolerantLock;

/// Why a changed `--config` was not put in force.
#[derive(Debug, thiserror::Error)]
pub enum ScrapeReloadError {
    #[error("{0}")]
    Config(#[from] ConfigError),
    #[error("{path}: source `{source_name}`: {error}")]
    Sampler {
        path: PathBuf,
        source_name: String,
        error: SourceError,
    },
    #[error(
        "{path}: {change} needs a restart (the signal catalogue is fixed at start); \
         only the sources' url, interval, timeout, tls and their signals' selectors reload"
    )]
    NeedsRestart { path: PathBuf, change: String },
}

impl Problem for ScrapeReloadError {}

const NAMES: Names = Names {
    what: "scrape config",
    kept: "the previous scrape sources stay in force",
};

/// The scrape config's reloader.
pub type ScrapeReloader = LastGood<ScrapeSet>;

/// Which signals each source defines: what a reload must keep.
type Shape = BTreeMap<String, BTreeSet<String>>;

fn shape(config: &Config) -> Shape {
    config
        .sources
        .iter()
        .map(|s| (s.name.clone(), s.signals.keys().cloned().collect()))
        .collect()
}

/// One running source: the configuration it runs with, the hash of its
/// TLS files, and its task.
struct Running {
    config: ScrapeConfig,
    tls_sha256: Option<String>,
    task: JoinHandle<()>,
}

/// The scrape sources in force, each on its own supervised task.
pub struct ScrapeSet {
    catalogue: Arc<Catalogue>,
    /// `--source.max-body-bytes`, not a field of the file.
    max_body_bytes: u64,
    shape: Shape,
    sampling: Sampling,
    /// Reloads run on the blocking pool: tasks are spawned on this runtime.
    runtime: tokio::runtime::Handle,
    running: Mutex<BTreeMap<String, Running>>,
    status: ReloadStatus,
}

impl ScrapeSet {
    /// Build every sampler of `config` (loaded at start from `path`; its signals are in
    /// `catalogue`) without starting any: a sampler that cannot be built
    /// fails the start before anything runs. Must be called within a tokio
    /// runtime (the sources' tasks are spawned on it).
    pub fn prepare(
        path: &Path,
        config: &Config,
        catalogue: Arc<Catalogue>,
        sampling: Sampling,
        status: ReloadStatus,
    ) -> Result<PreparedSet, ScrapeReloadError> {
        let max_body_bytes = config
            .sources
            .first()
            .map_or(crate::outside::http_client::DEFAULT_MAX_BODY_BYTES, |s| {
                s.max_body_bytes
            });
        let set = ScrapeSet {
            catalogue,
            max_body_bytes,
            shape: shape(config),
            sampling,
            runtime: tokio::runtime::Handle::current(),
            running: Mutex::new(BTreeMap::new()),
            status,
        };
        let samplers = set.samplers(path, config)?;
        Ok(PreparedSet { set, samplers })
    }

    /// The reloader of `path` (the file `config` was loaded from, whose
    /// SHA-256 is `sha256`).
    pub fn reloader(self, path: PathBuf, sha256: String) -> Arc<ScrapeReloader> {
        let sha = {
            let running = self.lock();
            let tls = running
                .iter()
                .map(|(n, r)| (n.clone(), r.tls_sha256.as_deref()));
            combined(&sha256, tls)
        };
        let clock = self.sampling.runtime.clock.clone();
        Arc::new(LastGood::new(path, NAMES, self, Some(sha), clock))
    }

    /// The configuration each source runs with, by name.
    pub fn in_force(&self) -> BTreeMap<String, ScrapeConfig> {
        self.lock()
            .iter()
            .map(|(n, r)| (n.clone(), r.config.clone()))
            .collect()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<String, Running>> {
        self.running.locked()
    }

    fn samplers(
        &self,
        path: &Path,
        config: &Config,
    ) -> Result<Vec<ScrapeSampler>, ScrapeReloadError> {
        config
            .sources
            .iter()
            .map(|s| {
                ScrapeSampler::new(s.clone(), &self.catalogue).map_err(|error| {
                    ScrapeReloadError::Sampler {
                        path: path.to_path_buf(),
                        source_name: s.name.clone(),
                        error,
                    }
                })
            })
            .collect()
    }

    /// Start `samplers`, each replacing the task of its source, if any.
    fn start_all(&self, samplers: Vec<ScrapeSampler>) {
        let _runtime = self.runtime.enter();
        let mut running = self.lock();
        for sampler in samplers {
            let config = sampler.config().clone();
            let tls_sha256 = sampler.tls_sha256().map(str::to_string);
            let (cfg, cat) = (config.clone(), self.catalogue.clone());
            let task = crate::sources::spawn(
                sampler,
                move || ScrapeSampler::new(cfg.clone(), &cat),
                self.sampling.clone(),
            );
            if let Some(old) = running.insert(
                config.name.clone(),
                Running {
                    config,
                    tls_sha256,
                    task,
                },
            ) {
                old.task.abort();
            }
        }
    }
}

impl Drop for ScrapeSet {
    fn drop(&mut self) {
        for r in self.lock().values() {
            r.task.abort();
        }
    }
}

/// The scrape sources built at start, not yet running.
pub struct PreparedSet {
    set: ScrapeSet,
    samplers: Vec<ScrapeSampler>,
}

impl PreparedSet {
    /// Start every source.
    pub fn start(self) -> ScrapeSet {
        self.set.start_all(self.samplers);
        self.set
    }
}

/// A checked file and its built samplers, not yet running.
pub struct Built {
    samplers: Vec<ScrapeSampler>,
    /// The file's and its TLS files' combined hash.
    sha256: String,
}

impl Load for ScrapeSet {
    type Value = Built;
    type Error = ScrapeReloadError;

    fn limit(&self) -> u64 {
        MAX_CONFIG_BYTES
    }

    fn build(&self, path: &Path, text: String) -> Result<Built, ScrapeReloadError> {
        let mut config = Config::parse(&path.display().to_string(), &text)?;
        for s in &mut config.sources {
            s.max_body_bytes = self.max_body_bytes;
        }
        let now = shape(&config);
        if now != self.shape {
            return Err(ScrapeReloadError::NeedsRestart {
                path: path.to_path_buf(),
                change: describe_change(&self.shape, &now),
            });
        }
        // Every sampler is built (its TLS files read); only the sources
        // whose settings or TLS files changed are restarted.
        let mut samplers = self.samplers(path, &config)?;
        let file_sha = hex::encode(Sha256::digest(text.as_bytes()));
        let sha256 = combined(
            &file_sha,
            samplers
                .iter()
                .map(|s| (s.config().name.clone(), s.tls_sha256())),
        );
        let running = self.lock();
        samplers.retain(|s| {
            running.get(&s.config().name).is_none_or(|r| {
                r.config != *s.config() || r.tls_sha256.as_deref() != s.tls_sha256()
            })
        });
        Ok(Built { samplers, sha256 })
    }

    /// The file's hash and its TLS files': a rotated certificate behind an
    /// unchanged file is seen.
    fn identity(&self, built: &Built) -> Option<String> {
        Some(built.sha256.clone())
    }

    fn reads_other_files(&self) -> bool {
        true
    }

    fn other_files(&self) -> Vec<PathBuf> {
        let running = self.lock();
        let tls = running.values().map(|r| &r.config.tls);
        tls.flat_map(|t| [&t.ca, &t.cert, &t.key])
            .flatten()
            .cloned()
            .collect()
    }

    fn apply(&self, built: Built, _: &Change<'_>) -> Result<String, ScrapeReloadError> {
        let names: Vec<String> = built
            .samplers
            .iter()
            .map(|s| s.config().name.clone())
            .collect();
        self.start_all(built.samplers);
        Ok(if names.is_empty() {
            "no source changed".to_string()
        } else {
            format!("restarted {}", names.join(", "))
        })
    }

    fn status(&self) -> &ReloadStatus {
        &self.status
    }
}

/// The identity of the file whose SHA-256 is `file_sha` with its sources'
/// TLS files (by source name): the file's own hash when no source has any.
fn combined<'a>(file_sha: &str, tls: impl Iterator<Item = (String, Option<&'a str>)>) -> String {
    let mut tls: Vec<(String, &str)> = tls.filter_map(|(n, s)| Some((n, s?))).collect();
    if tls.is_empty() {
        return file_sha.to_string();
    }
    tls.sort();
    let mut sha = Sha256::new();
    sha.update(file_sha.as_bytes());
    for (name, s) in tls {
        sha.update(format!("\0{name}\0{s}").as_bytes());
    }
    hex::encode(sha.finalize())
}

/// The `--config` file's reload status families,
/// `etcd_readiness_scrape_config_*`, like the policy's and the web config's.
pub fn register_status(registry: &mut prometheus_client::registry::Registry) -> ReloadStatus {
    ReloadStatus::register(
        registry,
        "etcd_readiness_scrape_config",
        crate::metrics::reload_status::Help {
            successful: "Whether the last reload of --config (the scrape sources) succeeded (1) or failed (0)",
            timestamp: "Unix time of the last successful load or reload of --config",
            reloads: "Reloads of --config that changed or failed to change the scrape sources in force, by result",
        },
    )
}

/// In words: the first source or signal added or removed.
fn describe_change(was: &Shape, now: &Shape) -> String {
    for name in was.keys() {
        if !now.contains_key(name) {
            return format!("removing source `{name}`");
        }
    }
    for (name, signals) in now {
        let Some(before) = was.get(name) else {
            return format!("adding source `{name}`");
        };
        if let Some(s) = signals.difference(before).next() {
            return format!("adding signal `{s}` to source `{name}`");
        }
        if let Some(s) = before.difference(signals).next() {
            return format!("removing signal `{s}` from source `{name}`");
        }
    }
    "changing the sources' signals".to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Config {
        Config::parse("c.yml", text).unwrap()
    }

    const ONE: &str = "sources:\n  - name: a\n    url: http://127.0.0.1:1/metrics\n    signals:\n      x: {metric: m}\n";

    #[test]
    fn a_change_of_sources_or_signals_is_named() {
        let was = shape(&parse(ONE));
        let two = format!(
            "{ONE}  - name: b\n    url: http://127.0.0.1:1/m\n    signals:\n      y: {{metric: m}}\n"
        );
        assert_eq!(
            describe_change(&was, &shape(&parse(&two))),
            "adding source `b`"
        );
        assert_eq!(
            describe_change(&shape(&parse(&two)), &was),
            "removing source `b`"
        );
        let more = ONE.replace("x: {metric: m}", "x: {metric: m}\n      z: {metric: n}");
        assert_eq!(
            describe_change(&was, &shape(&parse(&more))),
            "adding signal `z` to source `a`"
        );
        let renamed = ONE.replace("x: {", "w: {");
        assert_eq!(
            describe_change(&was, &shape(&parse(&renamed))),
            "adding signal `w` to source `a`"
        );
        // Settings and selectors are not part of the shape.
        let moved = ONE
            .replace("127.0.0.1:1", "127.0.0.1:2")
            .replace("metric: m", "metric: other");
        assert_eq!(shape(&parse(&moved)), was);
    }
}
