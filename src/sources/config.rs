//! The `--config` file (YAML) of generic scrape sources, and how the catalogue
//! follows the configuration: scrape signals are added to it, and the signals
//! of sources that are not configured are disabled, so a policy naming them is
//! rejected at load time with the flag that would enable them.
//!
//! ```yaml
//! sources:
//!   - name: etcd_metrics
//!     url: http://127.0.0.1:2381/metrics
//!     interval: 15s
//!     timeout: 2s
//!     signals:
//!       fsync_count: {metric: etcd_disk_wal_fsync_duration_seconds_count}
//! ```

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use serde::{Deserialize, Deserializer};

use crate::outside::http_client::TlsFiles;
use crate::outside::redacted_url::RedactedUrl;
use etcd_readiness_policy::duration::Bounds;
use etcd_readiness_policy::signals::{Catalogue, SignalDef, SignalType, Source, Unit};

/// Default `interval` of a scrape source.
pub const DEFAULT_SCRAPE_INTERVAL: Duration = Duration::from_secs(15);
/// Default `timeout` of a scrape source.
pub const DEFAULT_SCRAPE_TIMEOUT: Duration = Duration::from_secs(2);

/// The largest `--config` file read (a few sources take a few KiB).
pub const MAX_CONFIG_BYTES: u64 = 1024 * 1024;

/// The whole `--config` file.
#[derive(Clone, Debug, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Config {
    #[serde(default)]
    pub sources: Vec<ScrapeConfig>,
}

/// One Prometheus endpoint and the signals read from it.
#[derive(Clone, Debug, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ScrapeConfig {
    /// Names the source in metrics (`scrape:<name>`) and messages.
    pub name: String,
    /// The full URL to GET, e.g. `http://127.0.0.1:2381/metrics`.
    pub url: RedactedUrl,
    #[serde(default = "default_interval", deserialize_with = "duration")]
    pub interval: Duration,
    #[serde(default = "default_timeout", deserialize_with = "duration")]
    pub timeout: Duration,
    #[serde(default)]
    pub tls: TlsFiles,
    /// Largest body read (`--source.max-body-bytes`, not a field of the file).
    #[serde(skip, default = "default_max_body")]
    pub max_body_bytes: u64,
    /// Signal name → which series, and how to fold several into one number.
    pub signals: BTreeMap<String, SignalSpec>,
}

/// How one signal is read from a scrape.
#[derive(Clone, Debug, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SignalSpec {
    /// The metric (sample) name, e.g. `etcd_disk_wal_fsync_duration_seconds_count`.
    pub metric: String,
    /// Exact label matchers; a label not listed may have any value.
    #[serde(default)]
    pub labels: BTreeMap<String, String>,
    #[serde(default)]
    pub aggregate: Aggregate,
}

/// Folding the matching series into one value.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Aggregate {
    /// Exactly one series must match; several are an error.
    #[default]
    Single,
    Sum,
    Max,
    Min,
}

impl Aggregate {
    pub fn as_str(self) -> &'static str {
        match self {
            Aggregate::Single => "single",
            Aggregate::Sum => "sum",
            Aggregate::Max => "max",
            Aggregate::Min => "min",
        }
    }
}

fn default_interval() -> Duration {
    DEFAULT_SCRAPE_INTERVAL
}

fn default_max_body() -> u64 {
    crate::outside::http_client::DEFAULT_MAX_BODY_BYTES
}

fn default_timeout() -> Duration {
    DEFAULT_SCRAPE_TIMEOUT
}

/// What a source's `interval` and `timeout` accept at parse time (their
/// ranges are checked after).
const SOURCE_DURATION: Bounds = Bounds::positive_at_most(Duration::from_secs(86_400));

fn duration<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
    let s = String::deserialize(d)?;
    etcd_readiness_policy::duration::parse(&s, SOURCE_DURATION).map_err(serde::de::Error::custom)
}

/// A problem with the `--config` file.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The error is in the message, not a `source()`: an `{:#}` chain
    /// would say it twice.
    #[error("cannot read the config file {path}: {error}")]
    Read { path: String, error: std::io::Error },
    /// The parser's message, which quotes the offending line, with the
    /// user information of anything URL-like in it redacted.
    #[error("{0}")]
    Yaml(String),
    #[error("{path}: {message}")]
    Invalid { path: String, message: String },
}

fn is_identifier(s: &str) -> bool {
    let mut chars = s.chars();
    matches!(chars.next(), Some(c) if c.is_ascii_lowercase() || c == '_')
        && chars.all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_')
}

impl Config {
    /// Read and validate a config file.
    pub fn load(path: &Path) -> Result<Config, ConfigError> {
        Config::load_with_sha256(path).map(|(c, _)| c)
    }

    /// [`Config::load`], with the SHA-256 of the bytes read (what the
    /// reloader compares a changed file with).
    pub fn load_with_sha256(path: &Path) -> Result<(Config, String), ConfigError> {
        let shown = path.display().to_string();
        let read = |error| ConfigError::Read {
            path: shown.clone(),
            error,
        };
        let bytes = crate::outside::bounded_read::read_bounded(path, MAX_CONFIG_BYTES)
            .map_err(|e| read(std::io::Error::other(e)))?;
        let text = String::from_utf8(bytes).map_err(|e| {
            read(std::io::Error::new(
                std::io::ErrorKind::InvalidData,
                format!(
                    "not UTF-8 (first bad byte at offset {})",
                    e.utf8_error().valid_up_to()
                ),
            ))
        })?;
        let sha = hex::encode(<sha2::Sha256 as sha2::Digest>::digest(text.as_bytes()));
        Ok((Config::parse(&shown, &text)?, sha))
    }

    /// Parse and validate config text; `path` is only used in messages.
    pub fn parse(path: &str, text: &str) -> Result<Config, ConfigError> {
        let config: Config = etcd_readiness_policy::yaml::from_str(path, text).map_err(|e| {
            ConfigError::Yaml(
                crate::outside::redacted_url::scrub_quoted_lines(&e.to_string()).into_owned(),
            )
        })?;
        let invalid = |message: String| ConfigError::Invalid {
            path: path.to_string(),
            message,
        };
        let mut names = std::collections::BTreeSet::new();
        let mut signals = BTreeMap::new();
        for src in &config.sources {
            let n = &src.name;
            if !is_identifier(n) {
                return Err(invalid(format!(
                    "source name `{n}` must be lowercase letters, digits and `_`"
                )));
            }
            if !names.insert(n.as_str()) {
                return Err(invalid(format!("source `{n}` is defined twice")));
            }
            crate::outside::http_client::base_url(&src.url)
                .map_err(|e| invalid(format!("source `{n}`: {e}")))?;
            // Bounded like --sample.interval / --sample.timeout (before,
            // `interval: 1ms` sent 1,002 requests a second to the target).
            let ranges = crate::outside::checked::FlagRanges::SAMPLE_INTERVAL;
            crate::outside::checked::duration_in_range(
                &format!("source `{n}`: interval"),
                src.interval,
                ranges.0,
                ranges.1,
            )
            .map_err(|e| invalid(e.to_string()))?;
            let ranges = crate::outside::checked::FlagRanges::SAMPLE_TIMEOUT;
            crate::outside::checked::duration_in_range(
                &format!("source `{n}`: timeout"),
                src.timeout,
                ranges.0,
                ranges.1,
            )
            .map_err(|e| invalid(e.to_string()))?;
            if src.timeout > src.interval {
                return Err(invalid(format!(
                    "source `{n}`: timeout {} is longer than interval {}",
                    etcd_readiness_policy::text::fmt_duration_exact(src.timeout),
                    etcd_readiness_policy::text::fmt_duration_exact(src.interval)
                )));
            }
            if src.signals.is_empty() {
                return Err(invalid(format!("source `{n}` defines no signals")));
            }
            for (sig, spec) in &src.signals {
                if !is_identifier(sig) {
                    return Err(invalid(format!(
                        "source `{n}`: signal name `{sig}` must be lowercase letters, digits and `_`"
                    )));
                }
                if spec.metric.is_empty() {
                    return Err(invalid(format!(
                        "source `{n}`: signal `{sig}` has no metric"
                    )));
                }
                if let Some(other) = signals.insert(sig.as_str(), n.as_str()) {
                    return Err(invalid(format!(
                        "signal `{sig}` is defined by both source `{other}` and source `{n}`"
                    )));
                }
            }
        }
        Ok(config)
    }
}

/// A scrape signal clashes with a signal already in the catalogue.
#[derive(Debug, thiserror::Error)]
#[error(
    "signal `{signal}` of scrape source `{source_name}` clashes with the {existing} signal of that name; rename it in the config file"
)]
pub struct NameClash {
    pub signal: String,
    pub source_name: String,
    /// "built-in" or `scrape source `x``.
    pub existing: String,
}

/// Add every scrape signal of `config` to `catalogue` as a Number signal of
/// `Source::Scrape(name)`.
pub fn extend_catalogue(config: &Config, catalogue: &mut Catalogue) -> Result<(), NameClash> {
    for src in &config.sources {
        for (sig, spec) in &src.signals {
            if let Some(id) = catalogue.lookup(sig) {
                let existing = match &catalogue.get(id).source {
                    Source::Scrape(other) => format!("scrape source `{other}`'s"),
                    _ => "built-in".to_string(),
                };
                return Err(NameClash {
                    signal: sig.clone(),
                    source_name: src.name.clone(),
                    existing,
                });
            }
            catalogue
                .add(SignalDef {
                    name: sig.clone(),
                    ty: SignalType::Number,
                    source: Source::Scrape(src.name.clone()),
                    unit: Unit::None,
                    help: format!(
                        "{} from {} ({})",
                        selector(spec),
                        src.url,
                        spec.aggregate.as_str()
                    ),
                })
                .map_err(|_| NameClash {
                    signal: sig.clone(),
                    source_name: src.name.clone(),
                    existing: "built-in".to_string(),
                })?;
        }
    }
    Ok(())
}

/// `metric{k="v",...}` as shown in help texts and messages.
pub fn selector(spec: &SignalSpec) -> String {
    if spec.labels.is_empty() {
        return spec.metric.clone();
    }
    let labels: Vec<String> = spec
        .labels
        .iter()
        .map(|(k, v)| format!("{k}={v:?}"))
        .collect();
    format!("{}{{{}}}", spec.metric, labels.join(","))
}

/// Which optional built-in sources `serve` runs (etcd always runs).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct BuiltinSources {
    /// `--backup.url`.
    pub backup: bool,
    /// `--owner.name` and `--owner.id`.
    pub owner: bool,
    /// `--etcd.metrics-url`.
    pub etcd_metrics: bool,
}

/// Make `catalogue` match what `serve` runs: add the scrape signals of
/// `scrapes` and disable the signals of the built-in sources that are not
/// configured (a policy naming them then fails to load, saying which flag
/// enables them, unless it names them only on the left of `??`).
pub fn configure_catalogue(
    on: BuiltinSources,
    scrapes: Option<&Config>,
    catalogue: &mut Catalogue,
) -> Result<(), NameClash> {
    if let Some(config) = scrapes {
        extend_catalogue(config, catalogue)?;
    }
    catalogue.set_source_enabled(&Source::Backup, on.backup);
    catalogue.set_source_enabled(&Source::Owner, on.owner);
    catalogue.set_source_enabled(&Source::EtcdMetrics, on.etcd_metrics);
    Ok(())
}

/// The catalogue for `check` and `signals`: every built-in signal, plus the
/// scrape signals of `--config` when given.
pub fn catalogue_with_config(config: Option<&Path>) -> anyhow::Result<Catalogue> {
    let mut catalogue = Catalogue::builtin();
    if let Some(path) = config {
        let config = Config::load(path)?;
        extend_catalogue(&config, &mut catalogue)?;
    }
    Ok(catalogue)
}

#[cfg(test)]
mod tests {
    use super::*;

    const EXAMPLE: &str = include_str!("../../deploy/sources.example.yaml");

    #[test]
    fn the_example_parses_and_extends_the_catalogue() {
        let c = Config::parse("sources.example.yaml", EXAMPLE).unwrap();
        let mut cat = Catalogue::builtin();
        let before = cat.len();
        extend_catalogue(&c, &mut cat).unwrap();
        assert!(cat.len() > before);
        let id = cat.id("fsync_count");
        assert_eq!(cat.get(id).source, Source::Scrape("etcd_metrics".into()));
        assert_eq!(cat.get(id).ty, SignalType::Number);
    }

    fn err(text: &str) -> String {
        Config::parse("c.yaml", text).unwrap_err().to_string()
    }

    #[test]
    fn rejects_unknown_fields_bad_durations_and_duplicates() {
        let e = err(
            "sources:\n- name: a\n  url: http://x/metrics\n  intervall: 1s\n  signals: {s: {metric: m}}\n",
        );
        assert!(e.contains("unknown field `intervall`"), "{e}");
        let e = err(
            "sources:\n- name: a\n  url: http://x/\n  interval: 5\n  signals: {s: {metric: m}}\n",
        );
        assert!(e.contains("`5` is not a duration"), "{e}");
        let e = err(
            "sources:\n- name: a\n  url: http://x/\n  signals: {s: {metric: m, aggregate: avg}}\n",
        );
        assert!(e.contains("unknown variant `avg`"), "{e}");
        let e = err(
            "sources:\n- name: a\n  url: http://x/\n  signals: {s: {metric: m}}\n- name: b\n  url: http://y/\n  signals: {s: {metric: n}}\n",
        );
        assert!(
            e.contains("signal `s` is defined by both source `a` and source `b`"),
            "{e}"
        );
        let e = err("sources:\n- name: a\n  url: ftp://x/\n  signals: {s: {metric: m}}\n");
        assert!(e.contains("scheme must be http or https"), "{e}");
        let e = err("sources:\n- name: A-b\n  url: http://x/\n  signals: {s: {metric: m}}\n");
        assert!(e.contains("source name `A-b`"), "{e}");
    }

    /// Regression: a scrape source accepted `interval: 1ms` (1,002 requests a
    /// second to its target, 20 % of a core) while --sample.interval is
    /// bounded to 10ms–1h. Now the same ranges hold for every source.
    #[test]
    fn scrape_interval_and_timeout_are_bounded_like_sample_interval() {
        let src = |interval: &str, timeout: &str| {
            format!(
                "sources:\n- name: a\n  url: http://x/\n  interval: {interval}\n  timeout: {timeout}\n  signals: {{s: {{metric: m}}}}\n"
            )
        };
        let e = err(&src("1ms", "1ms"));
        assert!(
            e.contains("source `a`: interval 1ms is out of range: allowed 10ms to 1h"),
            "{e}"
        );
        let e = err(&src("1h1ms", "1s"));
        assert!(e.contains("interval 1h1ms is out of range"), "{e}");
        let e = err(&src("1h", "1h1ms"));
        assert!(
            e.contains("source `a`: timeout 1h1ms is out of range: allowed 1ms to 1h"),
            "{e}"
        );
        let e = err(&src("1s", "2s"));
        assert!(e.contains("timeout 2s is longer than interval 1s"), "{e}");
        assert!(Config::parse("c.yaml", &src("10ms", "10ms")).is_ok());
    }

    #[test]
    fn a_clash_with_a_builtin_signal_is_a_clear_error() {
        let c = Config::parse(
            "c.yaml",
            "sources:\n- name: etcd_metrics\n  url: http://x/\n  signals: {leader: {metric: etcd_server_has_leader}}\n",
        )
        .unwrap();
        let e = extend_catalogue(&c, &mut Catalogue::builtin()).unwrap_err();
        assert_eq!(
            e.to_string(),
            "signal `leader` of scrape source `etcd_metrics` clashes with the built-in signal of that name; rename it in the config file"
        );
    }

    #[test]
    fn a_policy_naming_an_unconfigured_owner_source_is_rejected_with_the_flag() {
        let mut cat = Catalogue::builtin();
        configure_catalogue(
            BuiltinSources {
                backup: true,
                ..Default::default()
            },
            None,
            &mut cat,
        )
        .unwrap();
        let src = "check owner: owner_ok\ncheck backup: rev_lag < 5000\n";
        let d =
            etcd_readiness_policy::policy::Policy::compile("card.policy", src, &cat).unwrap_err();
        let text = d.to_string();
        assert_eq!(d.items.len(), 1, "{text}");
        assert!(
            text.contains("signal `owner_ok` comes from the owner source, which is not configured"),
            "{text}"
        );
        assert!(
            text.contains("set --owner.name and --owner.id to enable it"),
            "{text}"
        );
        configure_catalogue(
            BuiltinSources {
                backup: true,
                owner: true,
                etcd_metrics: false,
            },
            None,
            &mut cat,
        )
        .unwrap();
        etcd_readiness_policy::policy::Policy::compile("card.policy", src, &cat).unwrap();
    }

    #[test]
    fn an_unconfigured_source_loads_only_on_the_left_of_a_fallback() {
        let mut cat = Catalogue::builtin();
        configure_catalogue(BuiltinSources::default(), None, &mut cat).unwrap();
        let compile = |src: &str| etcd_readiness_policy::policy::Policy::compile("p", src, &cat);
        // An optional term: loads, and the source is not required.
        let p = compile("check leader: leader\ncheck d: !(defrag_inflight ?? false)\n").unwrap();
        assert_eq!(
            p.signals_used(),
            vec![cat.id("leader"), cat.id("defrag_inflight")]
        );
        assert_eq!(p.signals_required(), vec![cat.id("leader")]);
        // Named outside `??`, or on its right, or in a `let`: refused with the flag.
        for src in [
            "check d: !defrag_inflight\n",
            "check d: leader ?? defrag_inflight\n",
            "let d = defrag_inflight\ncheck x: !(d ?? false)\n",
        ] {
            let e = compile(src).unwrap_err().to_string();
            assert!(
                e.contains("set --etcd.metrics-url to enable it"),
                "{src}: {e}"
            );
        }
        // Configured, the same signal is required wherever it is not under `??`.
        configure_catalogue(
            BuiltinSources {
                etcd_metrics: true,
                ..Default::default()
            },
            None,
            &mut cat,
        )
        .unwrap();
        let p = etcd_readiness_policy::policy::Policy::compile(
            "p",
            "check d: !defrag_inflight && ((active_peers > 0) ?? true)\n",
            &cat,
        )
        .unwrap();
        assert_eq!(p.signals_required(), vec![cat.id("defrag_inflight")]);
    }

    #[test]
    fn scrape_signals_can_be_used_in_policies_once_configured() {
        let c = Config::parse("c.yaml", EXAMPLE).unwrap();
        let src = "check fsync: fsync_count >= 0\n";
        assert!(
            etcd_readiness_policy::policy::Policy::compile("p", src, &Catalogue::builtin())
                .is_err()
        );
        let mut cat = Catalogue::builtin();
        configure_catalogue(BuiltinSources::default(), Some(&c), &mut cat).unwrap();
        etcd_readiness_policy::policy::Policy::compile("p", src, &cat).unwrap();
    }
}
