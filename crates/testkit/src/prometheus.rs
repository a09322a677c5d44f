//! A real Prometheus for the tests, and the one rule for which Prometheus
//! and promtool they run: the `prometheus` binary `PROMETHEUS` names, else
//! Debian's `/usr/bin/prometheus` (package prometheus, 2.42, what CI
//! installs); promtool is the one next to that binary. It is the same
//! variable `tests/monitoring/run.sh` sets for `prometheus_it.sh` when it
//! runs the monitoring checks once with each of Debian's 2.42 and the
//! fetched 3.5.3 (`bash .ci/fetch-binaries prometheus-3` prints its
//! directory), so `PROMETHEUS=$DIR/usr/bin/prometheus cargo test` runs the
//! Rust tests on Prometheus 3 the same way.
//!
//! [`Prometheus`] runs on a free loopback port in a directory of the test's
//! (config `prometheus.yml`, TSDB `data/`, log `prometheus.log`), holds a
//! heavy-test slot and is killed on drop.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use etcd_readiness_exporter::outside::http_client;

use crate::heavy::{self, Slot};
use crate::ports::free_tcp_port;
use crate::process::ChildGuard;

/// The `prometheus` binary the tests run (see the module docs).
pub fn prometheus_bin() -> PathBuf {
    std::env::var_os("PROMETHEUS")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/usr/bin/prometheus"))
}

/// The `promtool` next to [`prometheus_bin`].
pub fn promtool_bin() -> PathBuf {
    prometheus_bin().with_file_name("promtool")
}

/// A Prometheus server on a free loopback port; killed on drop.
pub struct Prometheus {
    pub addr: SocketAddr,
    dir: PathBuf,
    guard: ChildGuard,
    _slot: Slot,
}

impl Prometheus {
    /// Write `config` as `dir/prometheus.yml` and start Prometheus on it
    /// (TSDB in `dir/data`, log in `dir/prometheus.log`); does not wait for
    /// it (see [`Prometheus::wait_ready`]).
    pub fn spawn(dir: &Path, config: &str) -> Prometheus {
        Prometheus::spawn_bin(&prometheus_bin(), dir, config, &[])
    }

    /// [`Prometheus::spawn`] with the binary `bin` and `extra` flags (a
    /// test that needs Prometheus 3 whatever `PROMETHEUS` says, or a limit).
    pub fn spawn_bin(bin: &Path, dir: &Path, config: &str, extra: &[&str]) -> Prometheus {
        let slot = heavy::slot();
        let addr = SocketAddr::from(([127, 0, 0, 1], free_tcp_port()));
        let file = dir.join("prometheus.yml");
        std::fs::write(&file, config).unwrap();
        let log = std::fs::File::create(dir.join("prometheus.log")).unwrap();
        let child = Command::new(bin)
            .arg(format!("--config.file={}", file.display()))
            .arg(format!(
                "--storage.tsdb.path={}",
                dir.join("data").display()
            ))
            .arg(format!("--web.listen-address={addr}"))
            .arg("--log.level=warn")
            .args(extra)
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .unwrap_or_else(|e| {
                panic!(
                    "{} (apt-get install prometheus, or PROMETHEUS=): {e}",
                    bin.display()
                )
            });
        Prometheus {
            addr,
            dir: dir.to_path_buf(),
            guard: ChildGuard::new(child, "prometheus"),
            _slot: slot,
        }
    }

    /// Wait until `/-/ready` answers 200; panic with its log when it exits
    /// or `within` passes first.
    pub async fn wait_ready(&mut self, within: Duration) {
        let (addr, log) = (self.addr, self.dir.join("prometheus.log"));
        let name = "prometheus";
        crate::process::wait_http_ready(&mut self.guard, addr, "/-/ready", name, within, &log)
            .await;
    }

    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// What Prometheus logged so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.join("prometheus.log")).unwrap_or_default()
    }

    /// `GET path` of the HTTP API as JSON, if it answers 200 with JSON
    /// within 5 s.
    pub async fn api(&self, path: &str) -> Option<serde_json::Value> {
        let answer = http_client::get_at(self.addr, path, None, Duration::from_secs(5))
            .await
            .ok()?;
        (answer.status == 200)
            .then(|| serde_json::from_str(&answer.body).ok())
            .flatten()
    }

    /// An instant query's result vector (empty when it does not answer).
    pub async fn query(&self, q: &str) -> Vec<serde_json::Value> {
        let q: String = form_urlencoded::byte_serialize(q.as_bytes()).collect();
        let answer = self.api(&format!("/api/v1/query?query={q}")).await;
        answer
            .and_then(|v| v["data"]["result"].as_array().cloned())
            .unwrap_or_default()
    }

    /// The value of an instant query's first result.
    pub async fn query_value(&self, q: &str) -> Option<f64> {
        self.query(q).await.first()?["value"][1]
            .as_str()?
            .parse()
            .ok()
    }
}
