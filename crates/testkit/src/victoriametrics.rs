//! A real VictoriaMetrics (single node, Debian sid's 1.145 through
//! `.ci/fetch-binaries victoria-metrics`) for the tests: on a free loopback
//! port, its storage in a directory of the test's, log in
//! `victoria-metrics.log`, holding a heavy-test slot, killed on drop.
//! History goes in through its own ingestion path, `/api/v1/import/prometheus`
//! (Prometheus text with millisecond timestamps), and `/internal/force_flush`
//! makes it searchable at once.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use crate::heavy::{self, Slot};
use crate::ports::free_tcp_port;
use crate::process::ChildGuard;

/// The fetched `victoria-metrics` binary, or why there is none.
pub fn victoria_metrics_bin() -> Result<PathBuf, crate::binaries::FetchError> {
    crate::binaries::fetched("victoria-metrics", "victoria-metrics")
}

/// A VictoriaMetrics server on a free loopback port; killed on drop.
pub struct VictoriaMetrics {
    pub addr: SocketAddr,
    dir: PathBuf,
    guard: ChildGuard,
    _slot: Slot,
}

impl VictoriaMetrics {
    /// Start `bin` with its storage in `dir/vm` and `extra` flags (limits);
    /// does not wait for it ([`VictoriaMetrics::wait_ready`]).
    pub fn spawn(bin: &Path, dir: &Path, extra: &[&str]) -> VictoriaMetrics {
        let slot = heavy::slot();
        let addr = SocketAddr::from(([127, 0, 0, 1], free_tcp_port()));
        let log = std::fs::File::create(dir.join("victoria-metrics.log")).unwrap();
        let child = Command::new(bin)
            .arg(format!("-storageDataPath={}", dir.join("vm").display()))
            .arg(format!("-httpListenAddr={addr}"))
            .arg("-retentionPeriod=10y")
            .arg("-loggerLevel=WARN")
            .args(extra)
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .unwrap_or_else(|e| panic!("{}: {e}", bin.display()));
        VictoriaMetrics {
            addr,
            dir: dir.to_path_buf(),
            guard: ChildGuard::new(child, "victoria-metrics"),
            _slot: slot,
        }
    }

    /// Wait until `/health` answers 200; panic with its log when it exits
    /// or `within` passes first.
    pub async fn wait_ready(&mut self, within: Duration) {
        let (addr, log) = (self.addr, self.dir.join("victoria-metrics.log"));
        let name = "victoria-metrics";
        crate::process::wait_http_ready(&mut self.guard, addr, "/health", name, within, &log).await;
    }

    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// What it logged so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.join("victoria-metrics.log")).unwrap_or_default()
    }

    /// POST `body` (Prometheus text, millisecond timestamps) to
    /// `/api/v1/import/prometheus`, then `/internal/force_flush`; panics
    /// with the answer and the log unless both answer 2xx within 5 minutes.
    pub fn import(&self, body: &[u8]) {
        for (path, body) in [
            ("/api/v1/import/prometheus", body),
            ("/internal/force_flush", &b""[..]),
        ] {
            let status = self.post(path, body);
            assert!(
                status.starts_with("HTTP/1.1 2"),
                "POST {path}: {status}\n{}",
                self.log()
            );
        }
    }

    /// POST over a plain connection (bodies of hundreds of MB, no client
    /// needed); the answer's status line, or the error.
    fn post(&self, path: &str, body: &[u8]) -> String {
        let run = || -> std::io::Result<String> {
            let mut c = TcpStream::connect(self.addr)?;
            c.set_read_timeout(Some(Duration::from_secs(300)))?;
            c.set_write_timeout(Some(Duration::from_secs(300)))?;
            write!(
                c,
                "POST {path} HTTP/1.1\r\nHost: {}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
                self.addr,
                body.len()
            )?;
            c.write_all(body)?;
            let mut answer = Vec::new();
            c.take(64 * 1024).read_to_end(&mut answer)?;
            Ok(String::from_utf8_lossy(&answer).into_owned())
        };
        run().unwrap_or_else(|e| format!("error: {e}"))
    }
}
