//! The wiring graph: the topology `serve` builds for a configuration, as a
//! plain value made before anything is built. Sources feed the signal store,
//! the store's rounds wake the engine, the engine feeds the sinks (metrics,
//! history, the long polls), the sinks are served by the listeners; the
//! files `serve` follows feed the parts they configure. Each edge is named
//! once, in [`Wiring::edges`]. `start_with` realises the graph: the samplers
//! are prepared from [`Wiring::samplers`], the etcd source runs on
//! [`Wiring::etcd`], the reloaders and their metric families follow
//! [`Wiring::files`], the listeners are bound and served from
//! [`Wiring::servers`]; [`Wiring::render`] is what its unit test snapshots.

use std::fmt::Write as _;
use std::path::PathBuf;

use crate::config::ServeConfig;
use crate::http::listen::ListenAddr;
use crate::outside::http_client::TlsFiles;
use crate::sources::backup::BackupConfig;
use crate::sources::config::Config as ScrapeFile;
use crate::sources::etcd::EtcdConfig;
use crate::sources::etcd_auth::EtcdAuth;
use crate::sources::etcd_metrics::EtcdMetricsConfig;
use crate::sources::owner::OwnerConfig;
use crate::sources::tls_material::Credentials;
use crate::web::WebConfig;

/// What `serve` runs for one configuration, layer by layer.
#[derive(Clone, Debug)]
pub struct Wiring {
    /// The etcd source: always there.
    pub etcd: EtcdConfig,
    /// The optional samplers, in the order they are prepared.
    pub samplers: Vec<Source>,
    /// The files followed (re-read on change), and the policy in force.
    pub files: Vec<Followed>,
    /// What the engine's verdicts go to.
    pub sinks: Vec<Sink>,
    /// The listeners, the main one first.
    pub servers: Vec<Listener>,
}

/// An optional source, with the settings it is built from.
#[derive(Clone, Debug)]
pub enum Source {
    /// `--backup.url`: the backup sidecar.
    Backup(BackupConfig),
    /// `--owner.name`: the DNS owner check.
    Owner(OwnerConfig),
    /// `--etcd.metrics-url`, with the etcd source's credentials when the URL
    /// is `https://`.
    EtcdMetrics(EtcdMetricsConfig, Option<Credentials>),
    /// `--config`: the generic scrape sources, and the file they came from.
    Scrape(ScrapeFile, PathBuf),
}

/// A file `serve` follows, or the built-in policy (which it does not), with
/// what its reloader starts from.
#[derive(Clone, Debug)]
pub enum Followed {
    /// `--policy`, or the built-in policy when `None`.
    Policy(Option<PathBuf>),
    /// `--policy.candidate`.
    Candidate(PathBuf),
    /// `--web.config.file`, as loaded.
    Web(WebConfig),
    /// `--config`, and the SHA-256 of the text its sources came from.
    ScrapeConfig(PathBuf, String),
    /// `--etcd.cacert`/`--etcd.cert`/`--etcd.key`.
    EtcdTls(TlsFiles),
    /// `--backup.cacert`/`--backup.cert`/`--backup.key`.
    BackupTls(TlsFiles),
    /// `--etcd.password-file` (and `--etcd.user-file`), as loaded.
    EtcdPassword(EtcdAuth),
}

/// Where the engine's verdicts go.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Sink {
    /// The registry, served at the telemetry path.
    Metrics(String),
    /// The transitions behind the page and `/history`.
    History,
    /// A listener's held `/readyz?wait` requests.
    LongPolls(Role),
}

/// Which listener.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Role {
    /// `--web.listen-address`: everything, behind `--web.config.file`.
    Main,
    /// `--web.probe-listen-address`: plain HTTP, probes only.
    Probe,
}

/// One listener.
#[derive(Clone, Debug)]
pub struct Listener {
    pub role: Role,
    pub addr: ListenAddr,
    /// The flag that set `addr`, for the error when it cannot be bound.
    pub flag: &'static str,
}

/// One edge: `from` gives `to` what `carries` says.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Edge {
    pub from: String,
    pub to: String,
    pub carries: &'static str,
}

impl Wiring {
    /// The graph for `config`. Nothing is read, bound or started.
    pub fn of(config: &ServeConfig) -> Wiring {
        let mut servers = vec![Listener {
            role: Role::Main,
            addr: config.listen,
            flag: "--web.listen-address",
        }];
        servers.extend(config.web.probe_listen.map(|addr| Listener {
            role: Role::Probe,
            addr,
            flag: "--web.probe-listen-address",
        }));
        let mut sinks = vec![Sink::Metrics(config.telemetry_path.clone()), Sink::History];
        sinks.extend(servers.iter().map(|l| Sink::LongPolls(l.role)));
        Wiring {
            etcd: config.etcd.clone(),
            samplers: samplers(config),
            files: followed(config),
            sinks,
            servers,
        }
    }

    /// Every edge of the graph, each named once, in layer order.
    pub fn edges(&self) -> Vec<Edge> {
        let mut edges = Vec::new();
        let mut edge = |from: &str, to: &str, carries| {
            edges.push(Edge {
                from: from.to_string(),
                to: to.to_string(),
                carries,
            })
        };
        for s in std::iter::once("etcd").chain(self.samplers.iter().map(Source::name)) {
            edge(s, "store", "samples");
        }
        edge("store", "engine", "rounds");
        for f in &self.files {
            for (to, carries) in f.feeds(self) {
                edge(&f.name(), &to, carries);
            }
        }
        for s in &self.sinks {
            edge("engine", &s.name(), s.carries());
            let (to, served) = s.served_by();
            edge(&s.name(), to, served);
        }
        for l in &self.servers {
            edge("engine", l.role.name(), "verdicts (GET /readyz, /livez)");
        }
        edges
    }

    /// The graph as text, a layer a line and then every edge.
    pub fn render(&self) -> String {
        let names = |v: Vec<String>| v.join(", ");
        let mut sources = vec![format!("etcd ({})", self.etcd.endpoint)];
        sources.extend(self.samplers.iter().map(Source::label));
        let mut out = String::new();
        let _ = writeln!(out, "sources: {}", names(sources));
        let files = self.files.iter().map(Followed::label).collect();
        let _ = writeln!(out, "files:   {}", names(files));
        let _ = writeln!(out, "core:    store, engine");
        let sinks = self.sinks.iter().map(Sink::label).collect();
        let _ = writeln!(out, "sinks:   {}", names(sinks));
        let servers = self.servers.iter().map(Listener::label).collect();
        let _ = writeln!(out, "servers: {}", names(servers));
        let _ = writeln!(out, "edges:");
        for e in self.edges() {
            let _ = writeln!(out, "  {:<16} -> {:<16} {}", e.from, e.to, e.carries);
        }
        out
    }
}

/// The optional samplers `config` turns on, in the order they are prepared.
fn samplers(config: &ServeConfig) -> Vec<Source> {
    let mut s = Vec::new();
    s.extend(config.backup.clone().map(Source::Backup));
    s.extend(config.owner.clone().map(Source::Owner));
    if let Some(m) = config.etcd_metrics.clone() {
        // An https:// URL takes the etcd source's files, and their reloader.
        let creds = config
            .etcd
            .tls
            .clone()
            .filter(|_| m.url.starts_with("https://"));
        s.push(Source::EtcdMetrics(m, creds));
    }
    if let (Some(set), Some((path, _))) = (&config.scrape, &config.scrape_file) {
        s.push(Source::Scrape(set.clone(), path.clone()));
    }
    s
}

/// The files `config` has `serve` follow, in the order they are started.
fn followed(config: &ServeConfig) -> Vec<Followed> {
    let mut f = Vec::new();
    let etcd_tls = config.etcd.tls.as_ref().map(|c| c.files().clone());
    f.extend(etcd_tls.map(Followed::EtcdTls));
    let backup_tls = config
        .backup
        .as_ref()
        .filter(|b| b.tls != TlsFiles::default());
    f.extend(backup_tls.map(|b| Followed::BackupTls(b.tls.clone())));
    f.extend(config.etcd.auth.clone().map(Followed::EtcdPassword));
    let scrape = config
        .scrape_file
        .as_ref()
        .filter(|_| config.scrape.is_some());
    f.extend(scrape.map(|(p, sha)| Followed::ScrapeConfig(p.clone(), sha.clone())));
    f.push(Followed::Policy(config.policy.file().map(PathBuf::from)));
    f.extend(config.policy_candidate.clone().map(Followed::Candidate));
    f.extend(config.web.config.clone().map(Followed::Web));
    f
}

impl Source {
    fn name(&self) -> &'static str {
        match self {
            Source::Backup(_) => "backup",
            Source::Owner(_) => "owner",
            Source::EtcdMetrics(..) => "etcd-metrics",
            Source::Scrape(..) => "scrape",
        }
    }

    fn label(&self) -> String {
        match self {
            Source::Backup(b) => format!("backup ({})", b.url),
            Source::Owner(o) => format!("owner ({})", o.name),
            Source::EtcdMetrics(m, _) => format!("etcd-metrics ({})", m.url),
            Source::Scrape(set, _) => format!("scrape ({} sources)", set.sources.len()),
        }
    }
}

impl Followed {
    fn name(&self) -> String {
        match self {
            Followed::Policy(_) => "policy",
            Followed::Candidate(_) => "candidate",
            Followed::Web(_) => "web-config",
            Followed::ScrapeConfig(..) => "scrape-config",
            Followed::EtcdTls(_) => "etcd-tls",
            Followed::BackupTls(_) => "backup-tls",
            Followed::EtcdPassword(_) => "etcd-password",
        }
        .to_string()
    }

    fn label(&self) -> String {
        match self {
            Followed::Policy(None) => "policy (built in, not followed)".to_string(),
            Followed::Policy(Some(p)) | Followed::Candidate(p) | Followed::ScrapeConfig(p, _) => {
                format!("{} ({})", self.name(), p.display())
            }
            Followed::Web(w) => format!("{} ({})", self.name(), w.path.display()),
            _ => self.name(),
        }
    }

    /// The paths its reloader reads.
    pub fn paths(&self) -> Vec<PathBuf> {
        match self {
            Followed::Policy(p) => p.iter().cloned().collect(),
            Followed::Candidate(p) | Followed::ScrapeConfig(p, _) => vec![p.clone()],
            Followed::Web(w) => vec![w.path.clone()],
            Followed::EtcdTls(t) | Followed::BackupTls(t) => [&t.ca, &t.cert, &t.key]
                .into_iter()
                .flatten()
                .cloned()
                .collect(),
            Followed::EtcdPassword(auth) => auth.paths(),
        }
    }

    /// The nodes this file configures, and what it gives each.
    fn feeds(&self, w: &Wiring) -> Vec<(String, &'static str)> {
        let to = |n: &str, carries| (n.to_string(), carries);
        match self {
            Followed::Policy(_) => vec![
                to("engine", "policy in force"),
                to("etcd", "read deadline floor"),
            ],
            Followed::Candidate(_) => vec![to("engine", "candidate policy")],
            Followed::Web(_) => vec![to("main", "TLS, auth, headers")],
            Followed::ScrapeConfig(..) => vec![to("scrape", "sources (restarted on change)")],
            Followed::EtcdTls(_) => {
                let mut v = vec![to("etcd", "client certificate, CA")];
                let https = w
                    .samplers
                    .iter()
                    .any(|s| matches!(s, Source::EtcdMetrics(_, Some(_))));
                if https {
                    v.push(to("etcd-metrics", "client certificate, CA"));
                }
                v
            }
            Followed::BackupTls(_) => vec![to("backup", "client certificate, CA")],
            Followed::EtcdPassword(_) => vec![to("etcd", "password")],
        }
    }
}

impl Sink {
    fn name(&self) -> String {
        match self {
            Sink::Metrics(_) => "metrics".to_string(),
            Sink::History => "history".to_string(),
            Sink::LongPolls(r) => format!("long-polls:{}", r.name()),
        }
    }

    fn label(&self) -> String {
        match self {
            Sink::Metrics(path) => format!("metrics ({path})"),
            _ => self.name(),
        }
    }

    fn carries(&self) -> &'static str {
        match self {
            Sink::Metrics(_) => "verdicts, check states",
            Sink::History => "transitions",
            Sink::LongPolls(_) => "verdict changes",
        }
    }

    /// The listener that serves it, and how.
    fn served_by(&self) -> (&'static str, &'static str) {
        match self {
            Sink::Metrics(_) => ("main", "GET the telemetry path"),
            Sink::History => ("main", "GET /, /history"),
            Sink::LongPolls(r) => (r.name(), "GET /readyz?wait"),
        }
    }
}

impl Role {
    /// The listener's name, as its thread and its long polls are named.
    pub fn name(self) -> &'static str {
        match self {
            Role::Main => "main",
            Role::Probe => "probe",
        }
    }
}

impl Listener {
    fn label(&self) -> String {
        format!("{} ({})", self.role.name(), self.addr)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::ServeArgs;
    use crate::outside::redacted_url::RedactedUrl;

    /// The graph of the configuration these flags give (`f` changes the
    /// flags of `serve --etcd.endpoint=http://127.0.0.1:2379`).
    fn graph(f: impl FnOnce(&mut ServeArgs)) -> String {
        let mut args = ServeArgs::for_endpoint("http://127.0.0.1:2379");
        f(&mut args);
        let config = ServeConfig::from_args(&args).expect("valid flags");
        Wiring::of(&config).render()
    }

    #[test]
    fn wiring_with_the_defaults() {
        insta::assert_snapshot!(graph(|_| {}));
    }

    #[test]
    fn wiring_with_a_backup_sidecar_and_a_dns_owner() {
        insta::assert_snapshot!(graph(|a| {
            a.backup_url = Some(RedactedUrl::new("http://127.0.0.1:8080"));
            a.owner_name = Some("owner.etcd.example".into());
            a.owner_id = Some("cluster-a".into());
        }));
    }

    #[test]
    fn wiring_with_a_probe_listener_and_no_etcd_metrics() {
        insta::assert_snapshot!(graph(|a| {
            a.web_probe_listen_address = Some("127.0.0.1:9380".into());
            a.etcd_metrics_url = Some(RedactedUrl::new(""));
        }));
    }

    #[test]
    fn wiring_with_a_policy_file_and_a_candidate() {
        insta::assert_snapshot!(graph(|a| {
            a.policy = Some("policies/default.policy".into());
            a.policy_candidate = Some("policies/candidate.policy".into());
        }));
    }

    #[test]
    fn every_edge_joins_nodes_of_the_graph() {
        let mut args = ServeArgs::for_endpoint("http://127.0.0.1:2379");
        args.web_probe_listen_address = Some("127.0.0.1:9380".into());
        args.backup_url = Some(RedactedUrl::new("http://127.0.0.1:8080"));
        let w = Wiring::of(&ServeConfig::from_args(&args).expect("valid flags"));
        let mut nodes: Vec<String> = ["etcd", "store", "engine"].map(String::from).to_vec();
        nodes.extend(w.samplers.iter().map(|s| s.name().to_string()));
        nodes.extend(w.files.iter().map(Followed::name));
        nodes.extend(w.sinks.iter().map(Sink::name));
        nodes.extend(w.servers.iter().map(|l| l.role.name().to_string()));
        for e in w.edges() {
            assert!(
                nodes.contains(&e.from) && nodes.contains(&e.to),
                "edge {e:?} names a node not in {nodes:?}"
            );
        }
    }

    /// What a file flag's file holds, for a `serve` that starts.
    fn content(flag: &str, pem: &rcgen::CertifiedKey<rcgen::KeyPair>) -> String {
        let text = |s: &str| s.to_string();
        match flag {
            "policy" | "policy.candidate" => text(crate::config::DEFAULT_POLICY),
            "etcd.cacert" | "etcd.cert" | "backup.cacert" | "backup.cert" => pem.cert.pem(),
            "etcd.key" | "backup.key" => pem.signing_key.serialize_pem(),
            "etcd.user-file" => text("root\n"),
            "etcd.password-file" => text("secret\n"),
            "web.config.file" => text(""),
            "config" => text(
                "sources:\n- name: a\n  url: http://127.0.0.1:9/\n  signals: {s: {metric: m}}\n",
            ),
            other => panic!(
                "--{other} names a file: give it one here, and the graph its reloader (Followed)"
            ),
        }
    }

    #[test]
    fn the_files_followed_are_the_files_the_flags_name() {
        use clap::{Args, Parser};
        #[derive(Parser)]
        struct Wrap {
            #[command(flatten)]
            args: ServeArgs,
        }
        let dir = tempfile::tempdir().unwrap();
        let pem = rcgen::generate_simple_self_signed(vec!["localhost".to_string()]).unwrap();
        let mut argv = vec![
            "serve".to_string(),
            "--etcd.endpoint=https://127.0.0.1:2379".to_string(),
            "--backup.url=https://127.0.0.1:8080".to_string(),
        ];
        let mut named = std::collections::BTreeSet::new();
        // Every flag whose value is a FILE, so a new one fails here.
        for arg in ServeArgs::augment_args(clap::Command::new("serve")).get_arguments() {
            let file = arg
                .get_value_names()
                .is_some_and(|v| v.iter().any(|n| n == "FILE"));
            let (Some(flag), true) = (arg.get_long(), file) else {
                continue;
            };
            let path = dir.path().join(flag);
            std::fs::write(&path, content(flag, &pem)).unwrap();
            argv.push(format!("--{flag}={}", path.display()));
            named.insert(path);
        }
        let args = Wrap::try_parse_from(argv).expect("valid flags").args;
        let config = ServeConfig::from_args(&args).expect("a config that starts");
        let followed: std::collections::BTreeSet<PathBuf> = Wiring::of(&config)
            .files
            .iter()
            .flat_map(Followed::paths)
            .collect();
        let missing: Vec<_> = named.difference(&followed).collect();
        let extra: Vec<_> = followed.difference(&named).collect();
        assert!(
            missing.is_empty() && extra.is_empty(),
            "named by a flag but not followed: {missing:?}; followed but named by no flag: {extra:?}"
        );
    }
}
