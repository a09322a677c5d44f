//! Configuration of `serve`: the validated [`ServeConfig`] the rest of the
//! code uses, built from the clap flags of [`args`] by one small validator
//! per flag group. Validation reads the files flags name (policy, TLS
//! material, `--config`) so that unusable flags fail at start with a clear
//! message (exit code 2).

pub mod args;

pub use args::{LogFormat, LogLevel, ServeArgs};

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

pub use crate::http::listen::ListenAddr;
use crate::outside::checked::FlagRanges;
use crate::outside::http_client::TlsFiles;
use crate::sources::backup::BackupConfig;
use crate::sources::config::Config as ScrapeFile;
use crate::sources::etcd::{EtcdConfig, EtcdTls};
use crate::sources::etcd_metrics::EtcdMetricsConfig;
use crate::sources::owner::OwnerConfig;
use etcd_readiness_policy::duration::{Bounds, DurationError};

/// The default policy, used when `--policy` is not given.
pub const DEFAULT_POLICY: &str = include_str!("../../policies/default.policy");

/// Why flags are unusable.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("--web.listen-address {0:?} is not HOST:PORT ({1})")]
    ListenAddress(String, String),
    #[error(
        "--web.telemetry-path {0:?}: {1} (a literal path starting with /, not one the exporter already serves)"
    )]
    TelemetryPath(String, &'static str),
    #[error("--etcd.endpoint {0:?} must start with http:// or https://")]
    Endpoint(String),
    #[error("--etcd.endpoint {0:?} is not a URL: {1}")]
    EndpointUrl(String, crate::outside::redacted_url::UrlProblem),
    #[error(
        "--etcd.endpoint {0:?} is a list: it takes the one member this exporter sits beside \
         (run one exporter per member)"
    )]
    EndpointList(String),
    #[error("{0}")]
    Tls(String),
    #[error(
        "--sample.interval must be positive and --sample.timeout must be positive and not longer than --sample.interval (got {interval:?} and {timeout:?})"
    )]
    Timing {
        interval: Duration,
        timeout: Duration,
    },
    #[error("--policy: {0}")]
    PolicyFile(String),
    #[error("{0}")]
    Owner(String),
    #[error("--etcd.metrics-url: {0}")]
    EtcdMetrics(String),
    #[error("--config: {0}")]
    ScrapeConfig(String),
    #[error("{0}")]
    Range(String),
    #[error("--web.config.file: {0}")]
    WebConfig(String),
    #[error("--web.probe-listen-address {0:?} is not HOST:PORT ({1})")]
    ProbeListenAddress(String, String),
    #[error(
        "--web.probe-listen-address {0} is the same as --web.listen-address: the probe listener needs a port of its own"
    )]
    ProbeSameAsMain(ListenAddr),
}

/// The `--web.*` access settings: what the main listener requires and the
/// plain probe listener.
#[derive(Clone, Debug, Default)]
pub struct WebAccess {
    /// `--web.config.file`, loaded and checked at start.
    pub config: Option<crate::web::WebConfig>,
    /// `--web.enable-lifecycle`.
    pub lifecycle: bool,
    /// `--web.probe-listen-address`.
    pub probe_listen: Option<ListenAddr>,
}

/// Validated configuration.
#[derive(Clone, Debug)]
pub struct ServeConfig {
    pub listen: ListenAddr,
    /// Connection cap and timeouts of the HTTP server.
    pub http: crate::http::server::Limits,
    /// TLS, auth, lifecycle and the probe listener.
    pub web: WebAccess,
    pub telemetry_path: String,
    pub etcd: EtcdConfig,
    /// The policy's one owner: the file `serve` follows (or the built-in
    /// policy) and the text read from it at start.
    pub policy: PolicySource,
    /// `--policy.candidate`: handed through the wiring graph to its
    /// reloader, which reads it at start (a broken candidate must not stop
    /// the exporter from starting) and keeps the path from then on.
    pub policy_candidate: Option<PathBuf>,
    pub policy_reload_interval: Duration,
    pub sample_interval: Duration,
    pub sample_timeout: Duration,
    /// The backup sidecar source, when `--backup.url` is given.
    pub backup: Option<BackupConfig>,
    /// This member's metrics endpoint: `--etcd.metrics-url`, by default the
    /// endpoint's own `/metrics`; `None` when the flag is empty.
    pub etcd_metrics: Option<EtcdMetricsConfig>,
    /// The DNS owner check, when `--owner.name` and `--owner.id` are given.
    pub owner: Option<OwnerConfig>,
    /// Generic scrape sources from `--config`.
    pub scrape: Option<ScrapeFile>,
    /// The `--config` file and the SHA-256 of what `scrape` was read from,
    /// for its reloader.
    pub scrape_file: Option<(PathBuf, String)>,
}

impl ServeConfig {
    /// Validate every flag; the first problem is the error (exit code 2).
    pub fn from_args(a: &ServeArgs) -> Result<Self, ConfigError> {
        let listen = listen_address(a)?;
        let http = web_limits(a)?;
        check_telemetry_path(a)?;
        check_sampling(a)?;
        let mut etcd = etcd_config(a)?;
        let etcd_metrics = etcd_metrics_config(a)?;
        // Where Status' stand-ins are read if etcd refuses Status to the user.
        etcd.member_http = etcd_metrics
            .as_ref()
            .map(|m| crate::sources::etcd::MemberHttp {
                metrics: m.url.clone(),
                interval: m.interval,
                max_body_bytes: m.max_body_bytes,
            });
        let policy = policy_source(a)?;
        let web = web_access(a, listen)?;
        let scrape = scrape_config(a)?;
        Ok(ServeConfig {
            listen,
            http,
            web,
            telemetry_path: a.web_telemetry_path.clone(),
            etcd,
            policy,
            policy_candidate: a.policy_candidate.clone(),
            policy_reload_interval: a.policy_reload_interval,
            sample_interval: a.sample_interval,
            sample_timeout: a.sample_timeout,
            backup: backup_config(a),
            etcd_metrics,
            owner: owner_config(a)?,
            scrape: scrape.as_ref().map(|(c, _)| c.clone()),
            scrape_file: scrape.map(|(_, f)| f),
        })
    }
}

/// `--web.listen-address`.
fn listen_address(a: &ServeArgs) -> Result<ListenAddr, ConfigError> {
    parse_listen(&a.web_listen_address)
        .map_err(|e| ConfigError::ListenAddress(a.web_listen_address.clone(), e.to_string()))
}

/// `HOST:PORT` with an IP address, or `:PORT` for every interface of both
/// address families (the Prometheus exporters' spelling, e.g.
/// `--web.listen-address=:9379`; [`ListenAddr`]).
pub fn parse_listen(s: &str) -> Result<ListenAddr, std::net::AddrParseError> {
    ListenAddr::parse(s)
}

/// `--web.config.file` (loaded now: a broken file fails the start),
/// `--web.enable-lifecycle` and `--web.probe-listen-address`.
fn web_access(a: &ServeArgs, listen: ListenAddr) -> Result<WebAccess, ConfigError> {
    let config = match &a.web_config_file {
        None => None,
        Some(p) => Some(
            crate::web::WebConfig::load(p).map_err(|e| ConfigError::WebConfig(e.to_string()))?,
        ),
    };
    let probe_listen = match &a.web_probe_listen_address {
        None => None,
        Some(s) => {
            let addr = parse_listen(s)
                .map_err(|e| ConfigError::ProbeListenAddress(s.clone(), e.to_string()))?;
            if addr.port() != 0 && addr == listen {
                return Err(ConfigError::ProbeSameAsMain(addr));
            }
            Some(addr)
        }
    };
    Ok(WebAccess {
        config,
        lifecycle: a.web_enable_lifecycle,
        probe_listen,
    })
}

/// `--web.telemetry-path` must be a literal path that shadows no other
/// endpoint (`http::telemetry_path_problem`).
fn check_telemetry_path(a: &ServeArgs) -> Result<(), ConfigError> {
    match crate::http::telemetry_path_problem(&a.web_telemetry_path) {
        Some(why) => Err(ConfigError::TelemetryPath(
            a.web_telemetry_path.clone(),
            why,
        )),
        None => Ok(()),
    }
}

/// `--sample.*`, `--policy.reload-interval` and `--source.max-body-bytes`
/// within their ranges, and the timeout not longer than the interval.
fn check_sampling(a: &ServeArgs) -> Result<(), ConfigError> {
    in_range(
        "--sample.interval",
        a.sample_interval,
        FlagRanges::SAMPLE_INTERVAL,
    )?;
    in_range(
        "--sample.timeout",
        a.sample_timeout,
        FlagRanges::SAMPLE_TIMEOUT,
    )?;
    in_range(
        "--policy.reload-interval",
        a.policy_reload_interval,
        FlagRanges::POLICY_RELOAD_INTERVAL,
    )?;
    let (lo, hi) = FlagRanges::MAX_BODY_BYTES;
    if !(lo..=hi).contains(&a.source_max_body_bytes) {
        return Err(ConfigError::Range(format!(
            "--source.max-body-bytes {} is out of range: allowed {lo} to {hi}",
            a.source_max_body_bytes
        )));
    }
    if a.sample_timeout > a.sample_interval {
        return Err(ConfigError::Timing {
            interval: a.sample_interval,
            timeout: a.sample_timeout,
        });
    }
    Ok(())
}

/// `--etcd.*`: the endpoint, and TLS exactly when it is https://.
fn etcd_config(a: &ServeArgs) -> Result<EtcdConfig, ConfigError> {
    let ep = a.etcd_endpoint.trimmed();
    // Every message below shows the endpoint without its credentials.
    let shown = ep.redacted().to_string();
    if ep.contains(|c| c == ',' || c.is_whitespace()) {
        return Err(ConfigError::EndpointList(shown));
    }
    let https = ep.starts_with("https://");
    if !https && !ep.starts_with("http://") {
        return Err(ConfigError::Endpoint(shown));
    }
    if let Err(e) = ep.parse_http() {
        return Err(ConfigError::EndpointUrl(shown, e));
    }
    let ep_shown = &shown;
    let tls = match (&a.etcd_cacert, &a.etcd_cert, &a.etcd_key) {
        (None, None, None) if !https => None,
        (None, _, _) if https => {
            return Err(ConfigError::Tls(format!(
                "--etcd.endpoint {ep_shown} is https:// but --etcd.cacert is not set"
            )));
        }
        (_, _, _) if !https => {
            return Err(ConfigError::Tls(format!(
                "--etcd.cacert/--etcd.cert/--etcd.key are set but --etcd.endpoint {ep_shown} is not https://"
            )));
        }
        (Some(ca), cert, key) => {
            crate::outside::http_client::cert_key_pair(
                cert.as_ref(),
                key.as_ref(),
                "--etcd.cert and --etcd.key",
            )
            .map_err(|e| ConfigError::Tls(e.to_string()))?;
            let files = TlsFiles {
                ca: Some(ca.clone()),
                cert: cert.clone(),
                key: key.clone(),
            };
            // Read and checked now; re-read when they change.
            Some(
                EtcdTls::load(crate::sources::tls_material::TlsKind::Etcd, &files)
                    .map_err(|e| ConfigError::Tls(e.to_string()))?,
            )
        }
        (None, _, _) => None,
    };
    use crate::sources::etcd_auth::{EtcdAuth, User};
    let user = match (&a.etcd_user, &a.etcd_user_file) {
        (Some(name), _) if !name.is_empty() => Some(User::Name(name.clone())),
        (Some(_), _) => None,
        (None, Some(file)) => Some(User::File(file.clone())),
        (None, None) => None,
    };
    let auth = match (user, &a.etcd_password_file) {
        (None, None) if a.etcd_user.is_none() => None,
        (Some(user), Some(file)) => {
            Some(EtcdAuth::load(user, file).map_err(|e| ConfigError::Tls(e.to_string()))?)
        }
        _ => {
            return Err(ConfigError::Tls(
                "--etcd.user (not empty) or --etcd.user-file, and --etcd.password-file, must be \
                 given together"
                    .to_string(),
            ));
        }
    };
    Ok(EtcdConfig {
        endpoint: ep,
        tls,
        auth,
        probe_key: a.etcd_probe_key.clone(),
        interval: a.sample_interval,
        timeout: a.sample_timeout,
        freeze: std::time::Duration::ZERO,
        member_http: None,
        etcd: etcd_settings(a)?,
    })
}

/// `--etcd.heartbeat-interval` and `--etcd.election-timeout`, checked by
/// etcd's own rules.
fn etcd_settings(a: &ServeArgs) -> Result<crate::sources::etcd::EtcdSettings, ConfigError> {
    crate::sources::etcd::EtcdSettings::from_millis(
        a.etcd_heartbeat_interval,
        a.etcd_election_timeout,
    )
    .map_err(|e| ConfigError::Range(e.to_string()))
}

/// Where the policy in force at start comes from: the file `--policy`
/// names (read once, here; its reloader follows it from then on), or the
/// built-in one. Every other part asks this value for the path.
#[derive(Clone, Debug)]
pub struct PolicySource {
    file: Option<PathBuf>,
    text: String,
}

impl PolicySource {
    /// The built-in policy ([`DEFAULT_POLICY`]).
    pub fn builtin() -> Self {
        PolicySource {
            file: None,
            text: DEFAULT_POLICY.to_string(),
        }
    }

    /// The file `serve` follows, when `--policy` names one.
    pub fn file(&self) -> Option<&std::path::Path> {
        self.file.as_deref()
    }

    /// The path shown in diagnostics and /policy (`<default>` for the
    /// built-in one).
    pub fn shown(&self) -> String {
        self.file
            .as_ref()
            .map_or_else(|| "<default>".to_string(), |p| p.display().to_string())
    }

    /// The text in force at start.
    pub fn text(&self) -> &str {
        &self.text
    }
}

/// `--policy`: the file read once, or the built-in policy without it.
fn policy_source(a: &ServeArgs) -> Result<PolicySource, ConfigError> {
    let Some(p) = &a.policy else {
        return Ok(PolicySource::builtin());
    };
    let text = crate::reload::read_policy_file(p)
        .map(|(text, _)| text)
        .map_err(|e| match e {
            crate::reload::ReloadError::Read { path, source, .. } => {
                ConfigError::PolicyFile(format!("cannot read {}: {source}", path.display()))
            }
            crate::reload::ReloadError::NotUtf8 { path, offset, .. } => {
                ConfigError::PolicyFile(format!(
                    "{} is not valid UTF-8 (first bad byte at offset {offset})",
                    path.display()
                ))
            }
            other => ConfigError::PolicyFile(other.to_string()),
        })?;
    Ok(PolicySource {
        file: Some(p.clone()),
        text,
    })
}

/// `--backup.*`: the backup sidecar source, if `--backup.url` is set.
fn backup_config(a: &ServeArgs) -> Option<BackupConfig> {
    a.backup_url.as_ref().map(|url| BackupConfig {
        url: url.clone(),
        tls: TlsFiles {
            ca: a.backup_cacert.clone(),
            cert: a.backup_cert.clone(),
            key: a.backup_key.clone(),
        },
        mode: a.backup_mode,
        interval: a.sample_interval,
        timeout: a.sample_timeout,
        max_body_bytes: a.source_max_body_bytes,
    })
}

/// `--etcd.metrics-url` and `--etcd.metrics-interval`: the member's own
/// metrics endpoint, by default the `/metrics` of `--etcd.endpoint` (etcd
/// serves it on its client port), off with an empty value. An https:// URL
/// is the client port's `/metrics`, which takes the etcd source's TLS files;
/// http:// takes none. An etcd that refuses `/metrics` there fails no check:
/// every term that needs these signals is optional (`??`) in the shipped
/// policies, and the election credit is decided without a peer count that
/// was never read.
fn etcd_metrics_config(a: &ServeArgs) -> Result<Option<EtcdMetricsConfig>, ConfigError> {
    let flag = match &a.etcd_metrics_url {
        Some(flag) if flag.expose_for_request().trim().is_empty() => return Ok(None),
        Some(flag) => flag.clone(),
        None => a.etcd_endpoint.trimmed(),
    };
    let url = crate::sources::etcd_metrics::metrics_url(&flag)
        .map_err(|e| ConfigError::EtcdMetrics(e.to_string()))?;
    in_range(
        "--etcd.metrics-interval",
        a.etcd_metrics_interval,
        FlagRanges::SAMPLE_INTERVAL,
    )?;
    let tls = if url.starts_with("https://") {
        TlsFiles {
            ca: a.etcd_cacert.clone(),
            cert: a.etcd_cert.clone(),
            key: a.etcd_key.clone(),
        }
    } else {
        TlsFiles::default()
    };
    Ok(Some(EtcdMetricsConfig {
        url,
        tls,
        interval: a.etcd_metrics_interval,
        timeout: a.sample_timeout.min(a.etcd_metrics_interval),
        max_body_bytes: a.source_max_body_bytes,
    }))
}

/// `--owner.*`: the DNS owner check, if `--owner.name` and `--owner.id` are set.
fn owner_config(a: &ServeArgs) -> Result<Option<OwnerConfig>, ConfigError> {
    let owner = match (&a.owner_name, &a.owner_id) {
        (None, None) => None,
        (Some(name), Some(id)) => {
            let nameserver = match &a.owner_nameserver {
                None => None,
                Some(ns) => Some(ns.parse::<SocketAddr>().map_err(|e| {
                    ConfigError::Owner(format!(
                        "--owner.nameserver {ns:?} is not HOST:PORT with an IP address: {e}"
                    ))
                })?),
            };
            in_range(
                "--owner.interval",
                a.owner_interval,
                FlagRanges::OWNER_INTERVAL,
            )?;
            in_range(
                "--owner.timeout",
                a.owner_timeout,
                FlagRanges::OWNER_TIMEOUT,
            )?;
            if a.owner_timeout > a.owner_interval {
                return Err(ConfigError::Owner(format!(
                    "--owner.timeout ({:?}) must be positive and not longer than --owner.interval ({:?})",
                    a.owner_timeout, a.owner_interval
                )));
            }
            Some(OwnerConfig {
                name: name.clone(),
                id: id.clone(),
                interval: a.owner_interval,
                timeout: a.owner_timeout,
                nameserver,
            })
        }
        _ => {
            return Err(ConfigError::Owner(
                "--owner.name and --owner.id must be given together".to_string(),
            ));
        }
    };
    Ok(owner)
}

/// The `--config` file read at start: its sources, and its path and SHA-256.
type ScrapeRead = (ScrapeFile, (PathBuf, String));

/// `--config`: the generic scrape sources file, and where it came from.
fn scrape_config(a: &ServeArgs) -> Result<Option<ScrapeRead>, ConfigError> {
    let Some(p) = &a.config else {
        return Ok(None);
    };
    let (mut c, sha) =
        ScrapeFile::load_with_sha256(p).map_err(|e| ConfigError::ScrapeConfig(e.to_string()))?;
    for s in &mut c.sources {
        s.max_body_bytes = a.source_max_body_bytes;
    }
    Ok(Some((c, (p.clone(), sha))))
}

/// The `--web.*` connection limits, each within its [`FlagRanges`] range.
fn web_limits(a: &ServeArgs) -> Result<crate::http::server::Limits, ConfigError> {
    let (lo, hi) = FlagRanges::WEB_MAX_CONNECTIONS;
    if !(lo..=hi).contains(&a.web_max_connections) {
        return Err(ConfigError::Range(format!(
            "--web.max-connections {} is out of range: allowed {lo} to {hi}",
            a.web_max_connections
        )));
    }
    in_range(
        "--web.read-header-timeout",
        a.web_read_header_timeout,
        FlagRanges::WEB_TIMEOUT,
    )?;
    in_range(
        "--web.idle-timeout",
        a.web_idle_timeout,
        FlagRanges::WEB_TIMEOUT,
    )?;
    in_range(
        "--web.shutdown-timeout",
        a.web_shutdown_timeout,
        FlagRanges::WEB_SHUTDOWN_TIMEOUT,
    )?;
    Ok(crate::http::server::Limits {
        max_connections: a.web_max_connections,
        read_header_timeout: a.web_read_header_timeout,
        idle_timeout: a.web_idle_timeout,
        shutdown_timeout: a.web_shutdown_timeout,
    })
}

/// What any duration flag accepts at parse time: up to a year; each flag
/// then has its own, tighter range (see [`FlagRanges`]).
const FLAG_DURATION: Bounds = Bounds::at_most(Duration::from_secs(366 * 24 * 3600));

/// A duration flag in the project's one grammar (`500ms`, `1.5s`, `1m30s`,
/// [`etcd_readiness_policy::duration`]) within [`FLAG_DURATION`]; clap turns an error into
/// exit code 2 naming the flag.
pub fn parse_duration(s: &str) -> Result<Duration, DurationError> {
    etcd_readiness_policy::duration::parse(s, FLAG_DURATION)
}

fn in_range(flag: &str, v: Duration, range: (Duration, Duration)) -> Result<(), ConfigError> {
    crate::outside::checked::duration_in_range(flag, v, range.0, range.1)
        .map(|_| ())
        .map_err(|e| ConfigError::Range(e.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_parse_like_prometheus() {
        assert_eq!(parse_duration("500ms"), Ok(Duration::from_millis(500)));
        assert_eq!(parse_duration("1s"), Ok(Duration::from_secs(1)));
        assert_eq!(parse_duration("1m30s"), Ok(Duration::from_secs(90)));
        assert!(parse_duration("5").is_err());
        assert!(parse_duration("5x").is_err());
    }

    #[test]
    fn absurd_durations_are_errors_not_panics() {
        // Regression: `--sample.interval 9999999999999999h` exited 101 (a panic).
        for bad in ["9999999999999999h", "2000000000000000h", "1e400s", "367d"] {
            assert!(parse_duration(bad).is_err(), "{bad}");
        }
        let e = parse_duration("9999999999999999h").unwrap_err().to_string();
        assert!(e.contains("longer than the limit of 8784h"), "{e}");
    }

    #[test]
    fn flags_outside_their_range_name_flag_and_range() {
        let mut a = ServeArgs::for_endpoint("http://127.0.0.1:2379");
        a.owner_name = Some("o.example".into());
        a.owner_id = Some("me".into());
        a.owner_interval = Duration::from_secs(300 * 24 * 3600);
        let e = ServeConfig::from_args(&a).unwrap_err().to_string();
        assert_eq!(
            e,
            "--owner.interval 7200h is out of range: allowed 100ms to 24h"
        );
        let mut a = ServeArgs::for_endpoint("http://127.0.0.1:2379");
        a.sample_interval = Duration::from_secs(2 * 3600);
        let e = ServeConfig::from_args(&a).unwrap_err().to_string();
        assert_eq!(
            e,
            "--sample.interval 2h is out of range: allowed 10ms to 1h"
        );
        let mut a = ServeArgs::for_endpoint("http://127.0.0.1:2379");
        a.source_max_body_bytes = 10;
        let e = ServeConfig::from_args(&a).unwrap_err().to_string();
        assert!(
            e.starts_with("--source.max-body-bytes 10 is out of range"),
            "{e}"
        );
    }

    #[test]
    fn the_members_metrics_are_read_from_its_endpoint_by_default_and_an_empty_flag_turns_them_off()
    {
        let a = ServeArgs::for_endpoint("http://127.0.0.1:2379");
        let m = ServeConfig::from_args(&a).unwrap().etcd_metrics.unwrap();
        assert_eq!(m.url.expose_for_request(), "http://127.0.0.1:2379/metrics");
        assert!(m.tls.ca.is_none());
        let mut a = ServeArgs::for_endpoint("http://127.0.0.1:2379");
        a.etcd_metrics_url = Some(String::new().into());
        assert!(ServeConfig::from_args(&a).unwrap().etcd_metrics.is_none());
        a.etcd_metrics_url = Some("http://127.0.0.1:2381".into());
        let m = ServeConfig::from_args(&a).unwrap().etcd_metrics.unwrap();
        assert_eq!(m.url.expose_for_request(), "http://127.0.0.1:2381/metrics");
    }

    #[test]
    fn https_without_ca_is_refused() {
        let mut a = ServeArgs::for_endpoint("https://127.0.0.1:2379");
        a.web_listen_address = "127.0.0.1:0".into();
        let e = ServeConfig::from_args(&a).unwrap_err().to_string();
        assert!(e.contains("--etcd.cacert"), "{e}");
    }

    #[test]
    fn web_limits_out_of_range_are_refused_with_the_flag() {
        let base = ServeArgs::for_endpoint("http://127.0.0.1:2379");
        type Tweak = fn(&mut ServeArgs);
        let cases: [(&str, Tweak); 4] = [
            ("--web.max-connections", |a| a.web_max_connections = 0),
            ("--web.read-header-timeout", |a| {
                a.web_read_header_timeout = Duration::ZERO
            }),
            ("--web.idle-timeout", |a| {
                a.web_idle_timeout = Duration::from_secs(86_400)
            }),
            ("--web.shutdown-timeout", |a| {
                a.web_shutdown_timeout = Duration::from_secs(60)
            }),
        ];
        for (flag, tweak) in cases {
            let mut a = base.clone();
            tweak(&mut a);
            let e = ServeConfig::from_args(&a).unwrap_err().to_string();
            assert!(e.starts_with(flag), "{e}");
        }
        let c = ServeConfig::from_args(&base).unwrap();
        assert_eq!(c.http, crate::http::server::Limits::default());
    }

    #[test]
    fn listen_addresses_take_a_bare_port_like_the_prometheus_exporters() {
        // Regression: deploy/kubernetes's `--web.listen-address=:9379` was refused.
        assert_eq!(parse_listen(":9379").unwrap(), ListenAddr::AnyFamily(9379));
        assert_eq!(
            parse_listen("[::1]:9380").unwrap(),
            ListenAddr::Exact("[::1]:9380".parse::<SocketAddr>().unwrap())
        );
        assert!(parse_listen(":").is_err());
        assert!(parse_listen("::9379").is_err());
        let mut a = ServeArgs::for_endpoint("http://127.0.0.1:2379");
        a.web_listen_address = ":9379".into();
        a.web_probe_listen_address = Some(":9379".into());
        let e = ServeConfig::from_args(&a).unwrap_err().to_string();
        assert!(e.contains("needs a port of its own"), "{e}");
        a.web_probe_listen_address = Some("localhost:9380".into());
        let e = ServeConfig::from_args(&a).unwrap_err().to_string();
        assert!(
            e.starts_with("--web.probe-listen-address \"localhost:9380\""),
            "{e}"
        );
        a.web_probe_listen_address = Some(":9380".into());
        let c = ServeConfig::from_args(&a).unwrap();
        assert_eq!(c.web.probe_listen, Some(ListenAddr::AnyFamily(9380)));
        assert!(!c.web.lifecycle, "lifecycle is off by default");
    }

    #[test]
    fn timeout_longer_than_interval_is_refused() {
        let mut a = ServeArgs::for_endpoint("http://127.0.0.1:2379");
        a.sample_timeout = Duration::from_secs(2);
        assert!(matches!(
            ServeConfig::from_args(&a),
            Err(ConfigError::Timing { .. })
        ));
    }
}
