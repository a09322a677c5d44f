//! The flags of `serve` as clap parses them ([`ServeArgs`]; each also read
//! from an `ERE_*` environment variable), before any validation: ranges,
//! pairings and files are checked by [`super::ServeConfig::from_args`].
//! URLs are [`RedactedUrl`]s from the moment clap reads them, and `--help`
//! does not show their variables' values: they may carry a password.

use std::path::PathBuf;
use std::time::Duration;

use clap::Args;

use super::parse_duration;
use crate::outside::redacted_url::RedactedUrl;
pub use crate::runtime::logging::{LogFormat, LogLevel};
use crate::sources::backup::BackupMode;

/// Flags of `serve`.
#[derive(Args, Clone, Debug)]
pub struct ServeArgs {
    /// Readiness policy file (default: the built-in default policy).
    #[arg(long = "policy", env = "ERE_POLICY", value_name = "FILE")]
    pub policy: Option<PathBuf>,
    /// Candidate policy file: evaluated beside the policy in force on the
    /// same readings, reloaded the same way, deciding nothing (docs/candidate.md).
    #[arg(
        long = "policy.candidate",
        env = "ERE_POLICY_CANDIDATE",
        value_name = "FILE"
    )]
    pub policy_candidate: Option<PathBuf>,
    /// gRPC endpoint of this etcd member (https:// for TLS).
    #[arg(
        long = "etcd.endpoint",
        env = "ERE_ETCD_ENDPOINT",
        hide_env_values = true,
        default_value = "http://127.0.0.1:2379"
    )]
    pub etcd_endpoint: RedactedUrl,
    /// CA certificate (PEM) to verify etcd's server certificate.
    #[arg(long = "etcd.cacert", env = "ERE_ETCD_CACERT", value_name = "FILE")]
    pub etcd_cacert: Option<PathBuf>,
    /// Client certificate (PEM) for mTLS to etcd.
    #[arg(long = "etcd.cert", env = "ERE_ETCD_CERT", value_name = "FILE")]
    pub etcd_cert: Option<PathBuf>,
    /// Client key (PEM) for mTLS to etcd.
    #[arg(long = "etcd.key", env = "ERE_ETCD_KEY", value_name = "FILE")]
    pub etcd_key: Option<PathBuf>,
    /// etcd user to authenticate as, when etcd's authentication is on
    /// (with --etcd.password-file; a role with read on --etcd.probe-key).
    #[arg(
        long = "etcd.user",
        env = "ERE_ETCD_USER",
        value_name = "NAME",
        conflicts_with = "etcd_user_file"
    )]
    pub etcd_user: Option<String>,
    /// File holding the etcd user's name (the Secret's other key; one
    /// trailing newline is ignored), re-read with --etcd.password-file: a
    /// Secret switched to another user is one change (docs/connecting.md).
    #[arg(
        long = "etcd.user-file",
        env = "ERE_ETCD_USER_FILE",
        value_name = "FILE"
    )]
    pub etcd_user_file: Option<PathBuf>,
    /// File holding --etcd.user's password (a Secret mount; one trailing
    /// newline is ignored), re-read when it changes.
    #[arg(
        long = "etcd.password-file",
        env = "ERE_ETCD_PASSWORD_FILE",
        value_name = "FILE"
    )]
    pub etcd_password_file: Option<PathBuf>,
    /// Key read by the probe Ranges (keys-only, limit 1; it need not exist).
    #[arg(
        long = "etcd.probe-key",
        env = "ERE_ETCD_PROBE_KEY",
        default_value = "health"
    )]
    pub etcd_probe_key: String,
    /// This member's own metrics endpoint: etcd's --listen-metrics-urls
    /// (e.g. http://127.0.0.1:2381; /metrics is added to a URL without a
    /// path), or the client port's https://…/metrics with the --etcd.cacert,
    /// --etcd.cert and --etcd.key of the etcd source. Gives defrag_inflight,
    /// db_quota_ratio and active_peers. Default: --etcd.endpoint's own
    /// /metrics; an empty value turns it off.
    #[arg(
        long = "etcd.metrics-url",
        env = "ERE_ETCD_METRICS_URL",
        hide_env_values = true,
        value_name = "URL"
    )]
    pub etcd_metrics_url: Option<RedactedUrl>,
    /// Time between reads of --etcd.metrics-url (each is one GET of etcd's
    /// whole /metrics); its deadline is --sample.timeout, at most this.
    #[arg(long = "etcd.metrics-interval", env = "ERE_ETCD_METRICS_INTERVAL", default_value = "1s", value_parser = parse_duration)]
    pub etcd_metrics_interval: Duration,
    /// The member's heartbeat interval in milliseconds, as etcd's own
    /// --heartbeat-interval (read from etcd's own variable, so one env
    /// entry configures both containers). The shortest trust in an answer
    /// and the reconnect pace follow it.
    #[arg(
        long = "etcd.heartbeat-interval",
        env = "ETCD_HEARTBEAT_INTERVAL",
        value_name = "MS",
        default_value_t = 100
    )]
    pub etcd_heartbeat_interval: u64,
    /// The member's election timeout in milliseconds, as etcd's own
    /// --election-timeout (etcd's own variable). How long a follower's read
    /// is trusted through an election, and the most CPU contention a call
    /// is forgiven, follow it.
    #[arg(
        long = "etcd.election-timeout",
        env = "ETCD_ELECTION_TIMEOUT",
        value_name = "MS",
        default_value_t = 1000
    )]
    pub etcd_election_timeout: u64,
    /// Time between sample rounds.
    #[arg(long = "sample.interval", env = "ERE_SAMPLE_INTERVAL", default_value = "1s", value_parser = parse_duration)]
    pub sample_interval: Duration,
    /// Deadline of every call to etcd.
    #[arg(long = "sample.timeout", env = "ERE_SAMPLE_TIMEOUT", default_value = "500ms", value_parser = parse_duration)]
    pub sample_timeout: Duration,
    /// Address to serve HTTP on: IP:PORT (IPv6 in brackets), or :PORT for
    /// every interface of both address families.
    #[arg(
        long = "web.listen-address",
        env = "ERE_WEB_LISTEN_ADDRESS",
        default_value = ":9379"
    )]
    pub web_listen_address: String,
    /// Path of the metrics endpoint.
    #[arg(
        long = "web.telemetry-path",
        env = "ERE_WEB_TELEMETRY_PATH",
        default_value = "/metrics"
    )]
    pub web_telemetry_path: String,
    /// Most HTTP connections held open at once; lowered to stay below
    /// RLIMIT_NOFILE. At the limit the longest-idle connection is closed to
    /// admit a new one, so a probe always gets in.
    #[arg(
        long = "web.max-connections",
        env = "ERE_WEB_MAX_CONNECTIONS",
        default_value = "512"
    )]
    pub web_max_connections: usize,
    /// A request head must arrive within this time (from the connection's
    /// accept, or from its first byte on a kept-alive connection).
    #[arg(long = "web.read-header-timeout", env = "ERE_WEB_READ_HEADER_TIMEOUT", default_value = "5s", value_parser = parse_duration)]
    pub web_read_header_timeout: Duration,
    /// A connection with no request in flight is closed after this time.
    #[arg(long = "web.idle-timeout", env = "ERE_WEB_IDLE_TIMEOUT", default_value = "60s", value_parser = parse_duration)]
    pub web_idle_timeout: Duration,
    /// On SIGTERM, in-flight requests get this long to finish; then every
    /// connection is closed and the process exits.
    #[arg(long = "web.shutdown-timeout", env = "ERE_WEB_SHUTDOWN_TIMEOUT", default_value = "5s", value_parser = parse_duration)]
    pub web_shutdown_timeout: Duration,
    /// TLS, client certificates, basic auth and response headers of the main
    /// listener, in Prometheus exporter-toolkit's web configuration format
    /// (node_exporter's files work as they are). Re-read when it or a
    /// certificate it names changes; a broken new file keeps the last good one.
    #[arg(
        long = "web.config.file",
        env = "ERE_WEB_CONFIG_FILE",
        value_name = "FILE"
    )]
    pub web_config_file: Option<PathBuf>,
    /// Answer POST /-/reload (off: 403, as Prometheus without the flag).
    /// File changes and SIGHUP reload either way.
    #[arg(long = "web.enable-lifecycle", env = "ERE_WEB_ENABLE_LIFECYCLE")]
    pub web_enable_lifecycle: bool,
    /// Also serve /readyz, /readyz/NAME and /livez in plain HTTP, without
    /// --web.config.file's TLS and auth, on this HOST:PORT or :PORT (for
    /// the kubelet's probes). Off by default.
    #[arg(
        long = "web.probe-listen-address",
        env = "ERE_WEB_PROBE_LISTEN_ADDRESS",
        value_name = "HOST:PORT"
    )]
    pub web_probe_listen_address: Option<String>,
    /// Only log messages with the given severity or above (anything else
    /// exits 2: a misspelt level must not silence the log).
    #[arg(
        long = "log.level",
        env = "ERE_LOG_LEVEL",
        value_enum,
        ignore_case = true,
        default_value = "info"
    )]
    pub log_level: LogLevel,
    /// Output format of log messages (promslog's; `text` is an alias of logfmt).
    #[arg(
        long = "log.format",
        env = "ERE_LOG_FORMAT",
        value_enum,
        default_value = "logfmt"
    )]
    pub log_format: LogFormat,
    /// Safety-net re-read of the policy file.
    #[arg(long = "policy.reload-interval", env = "ERE_POLICY_RELOAD_INTERVAL", default_value = "30s", value_parser = parse_duration)]
    pub policy_reload_interval: Duration,
    /// Base URL of the etcd-backup-restore sidecar.
    #[arg(long = "backup.url", env = "ERE_BACKUP_URL", hide_env_values = true)]
    pub backup_url: Option<RedactedUrl>,
    /// CA certificate (PEM) to verify the sidecar's server certificate (https://).
    #[arg(long = "backup.cacert", env = "ERE_BACKUP_CACERT", value_name = "FILE")]
    pub backup_cacert: Option<PathBuf>,
    /// Client certificate (PEM) for mTLS to the sidecar.
    #[arg(long = "backup.cert", env = "ERE_BACKUP_CERT", value_name = "FILE")]
    pub backup_cert: Option<PathBuf>,
    /// Client key (PEM) for mTLS to the sidecar.
    #[arg(long = "backup.key", env = "ERE_BACKUP_KEY", value_name = "FILE")]
    pub backup_key: Option<PathBuf>,
    #[arg(
        long = "backup.mode",
        env = "ERE_BACKUP_MODE",
        value_enum,
        default_value = "metrics"
    )]
    pub backup_mode: BackupMode,
    /// DNS name whose TXT record names the owner.
    #[arg(long = "owner.name", env = "ERE_OWNER_NAME")]
    pub owner_name: Option<String>,
    /// Expected owner id (the first TXT string).
    #[arg(long = "owner.id", env = "ERE_OWNER_ID")]
    pub owner_id: Option<String>,
    /// Time between owner TXT lookups.
    #[arg(long = "owner.interval", env = "ERE_OWNER_INTERVAL", default_value = "30s", value_parser = parse_duration)]
    pub owner_interval: Duration,
    /// Deadline of one owner TXT lookup.
    #[arg(long = "owner.timeout", env = "ERE_OWNER_TIMEOUT", default_value = "5s", value_parser = parse_duration)]
    pub owner_timeout: Duration,
    /// DNS server to ask (IP:PORT); default: the system resolver.
    #[arg(
        long = "owner.nameserver",
        env = "ERE_OWNER_NAMESERVER",
        value_name = "HOST:PORT"
    )]
    pub owner_nameserver: Option<String>,
    /// Generic scrape sources (YAML).
    #[arg(long = "config", env = "ERE_CONFIG", value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// Largest response body read from the backup sidecar or a scrape source
    /// (bytes); a longer body fails the round without being read further.
    #[arg(
        long = "source.max-body-bytes",
        env = "ERE_SOURCE_MAX_BODY_BYTES",
        default_value_t = crate::outside::http_client::DEFAULT_MAX_BODY_BYTES
    )]
    pub source_max_body_bytes: u64,
}

impl ServeArgs {
    /// Defaults for everything, with this etcd endpoint (for tests and `demo`).
    pub fn for_endpoint(endpoint: &str) -> Self {
        use clap::Parser;
        #[derive(Parser)]
        struct Wrap {
            #[command(flatten)]
            args: ServeArgs,
        }
        let mut a = Wrap::parse_from(["serve"]).args;
        a.etcd_endpoint = RedactedUrl::new(endpoint);
        a
    }
}
