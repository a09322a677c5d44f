//! The exporter's serve pipeline in-process on a free port ([`Exporter`]),
//! with the waits that explain a failure (`/readyz?verbose` and `/signals`),
//! the log capture, and small HTTP helpers ([`post`], [`metric_line`]); the
//! exporter binary as a child process ([`ChildExporter`]) where a test needs
//! a process of its own (its descriptor limit, its signals, its exit).

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::{Command, ExitStatus, Stdio};
use std::time::Duration;

use etcd_readiness_exporter::cmd::serve::{self, Running};
use etcd_readiness_exporter::config::{ServeArgs, ServeConfig};
use etcd_readiness_exporter::outside::http_client;

use crate::ports::free_tcp_port;
use crate::process::{ChildGuard, wait_http_ready};
use crate::wait::poll;

/// The exporter's log lines (readiness transitions with their reasons,
/// source errors) go to the test's captured output, so a failing test shows
/// why the member changed state; a passing one prints nothing. Once per test
/// binary; the threads of the test's runtime inherit the capture.
pub fn capture_logs() {
    let _ = tracing_subscriber::fmt()
        .with_test_writer()
        .with_env_filter(tracing_subscriber::EnvFilter::new(
            std::env::var("ERE_TEST_LOG").unwrap_or_else(|_| "info".into()),
        ))
        .try_init();
}

/// The exporter's serve pipeline, in-process, on a free port.
pub struct Exporter {
    pub running: Running,
}

/// A response from our own server.
#[derive(Debug)]
pub struct Resp {
    pub status: u16,
    /// Its `Content-Type` ("" when it has none).
    pub content_type: String,
    pub body: String,
}

impl Exporter {
    /// Serve for `endpoint` with test timing (200ms interval and timeout
    /// unless `tweak` changes them).
    pub async fn start(endpoint: &str, tweak: impl FnOnce(&mut ServeArgs)) -> Exporter {
        capture_logs();
        let mut args = ServeArgs::for_endpoint(endpoint);
        args.web_listen_address = "127.0.0.1:0".to_string();
        args.sample_interval = Duration::from_millis(250);
        args.sample_timeout = Duration::from_millis(250);
        // The tests reload through POST /-/reload.
        args.web_enable_lifecycle = true;
        tweak(&mut args);
        let config = ServeConfig::from_args(&args).expect("valid config");
        let running = serve::start(config).await.expect("exporter starts");
        Exporter { running }
    }

    pub fn addr(&self) -> SocketAddr {
        self.running.addr
    }

    pub fn url(&self) -> String {
        self.running.url()
    }

    /// GET with a 5 s deadline.
    pub async fn get(&self, path: &str) -> Resp {
        self.get_accept(path, None).await
    }

    /// GET with `accept`, with a 5 s deadline.
    pub async fn get_accept(&self, path: &str, accept: Option<&str>) -> Resp {
        let answer = http_client::get_at(self.addr(), path, accept, Duration::from_secs(5))
            .await
            .unwrap_or_else(|e| panic!("GET {path}: {e}"));
        let content_type = answer
            .headers
            .get("content-type")
            .map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned())
            .unwrap_or_default();
        Resp {
            status: answer.status.as_u16(),
            content_type,
            body: answer.body,
        }
    }

    /// Poll `path` until it answers `status` or `deadline` passes; returns the
    /// last response. When the deadline passes first, prints that response
    /// and the exporter's `/readyz?verbose` and `/signals` (shown by the test
    /// runner when the test then fails).
    pub async fn wait_for(&self, path: &str, status: u16, deadline: Duration) -> Resp {
        self.wait_until(path, deadline, |r| r.status == status)
            .await
    }

    /// Print what explains the exporter's state: `/readyz?verbose` and
    /// `/signals` (for a failing test's output).
    pub async fn explain(&self, why: &str) {
        let readyz = self.get("/readyz?verbose").await;
        let signals = self.get("/signals").await;
        eprintln!(
            "--- {why}\n--- /readyz?verbose: {} {}\n--- /signals: {}",
            readyz.status, readyz.body, signals.body
        );
    }

    /// `/policy` as JSON.
    pub async fn policy_json(&self) -> serde_json::Value {
        serde_json::from_str(&self.get("/policy").await.body).expect("/policy is JSON")
    }

    /// Poll `/policy` until `cond` holds and return it; fail naming `what`
    /// when `deadline` passes first.
    pub async fn wait_policy(
        &self,
        what: &str,
        deadline: Duration,
        cond: impl Fn(&serde_json::Value) -> bool,
    ) -> serde_json::Value {
        let cond = &cond;
        let polled = poll(deadline, Duration::from_millis(50), || async move {
            let p = self.policy_json().await;
            if cond(&p) { Ok(p) } else { Err(p) }
        })
        .await;
        polled.unwrap_or_else(|p| panic!("timed out waiting for {what}: {p}"))
    }

    /// Poll `path` until its response satisfies `cond` or `deadline` passes;
    /// returns the last response.
    pub async fn wait_until(
        &self,
        path: &str,
        deadline: Duration,
        cond: impl Fn(&Resp) -> bool,
    ) -> Resp {
        let cond = &cond;
        let polled = poll(deadline, Duration::from_millis(100), || async move {
            let r = self.get(path).await;
            if cond(&r) { Ok(r) } else { Err(r) }
        })
        .await;
        match polled {
            Ok(r) => r,
            Err(r) => {
                self.explain(&format!(
                    "GET {path}: condition not met within {deadline:?}, last answer {} {}",
                    r.status, r.body
                ))
                .await;
                r
            }
        }
    }

    /// The first line of a `/metrics` scrape that starts with `name`.
    pub async fn metric(&self, name: &str) -> String {
        metric_line(&self.get("/metrics").await.body, name)
    }

    /// One signal from /signals as JSON.
    pub async fn signal(&self, name: &str) -> serde_json::Value {
        let r = self.get("/signals").await;
        let v: serde_json::Value = serde_json::from_str(&r.body).expect("json");
        v.as_array()
            .unwrap()
            .iter()
            .find(|s| s["name"] == name)
            .cloned()
            .unwrap_or_else(|| panic!("signal {name} not in /signals"))
    }
}

/// The first line of a scrape that starts with `name`.
pub fn metric_line(scrape: &str, name: &str) -> String {
    scrape
        .lines()
        .find(|l| l.starts_with(name))
        .unwrap_or_else(|| panic!("{name} not in the scrape"))
        .to_string()
}

/// The value of the exposition line `series value` (`series` with its
/// labels, exactly as exposed); None when the scrape has no such line or
/// its value is no number.
pub fn metric_value(scrape: &str, series: &str) -> Option<f64> {
    scrape.lines().find_map(|l| {
        l.strip_prefix(series)?
            .strip_prefix(' ')?
            .trim()
            .parse()
            .ok()
    })
}

/// The value of `series` in `scrape` ([`metric_value`]); panics showing the
/// scrape when it has no such line.
pub fn expect_metric(scrape: &str, series: &str) -> f64 {
    metric_value(scrape, series).unwrap_or_else(|| panic!("no {series} in\n{scrape}"))
}

/// How long [`ChildExporter::get`] waits for an answer: a bound, not a
/// performance figure.
pub const CHILD_ANSWER: Duration = Duration::from_secs(5);

/// The exporter binary as a child process on a free port of 127.0.0.1
/// (optionally under `prlimit --nofile`), its output in a log file that
/// every failure shows; killed and reaped on drop ([`ChildGuard`]).
pub struct ChildExporter {
    guard: ChildGuard,
    pid: u32,
    /// The main listener's address.
    pub addr: SocketAddr,
    log: PathBuf,
    _dir: tempfile::TempDir,
}

impl ChildExporter {
    /// `bin serve` for `endpoint` with test timing (250ms interval and
    /// timeout) and `extra` flags; with `nofile`, under `prlimit`, which
    /// sets the descriptor limits and execs the exporter (the same pid).
    /// `bin` is the test's `env!("CARGO_BIN_EXE_etcd-readiness-exporter")`.
    pub fn spawn(bin: &str, endpoint: &str, nofile: Option<u64>, extra: &[&str]) -> ChildExporter {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let log = dir.path().join("exporter.log");
        let addr = SocketAddr::from(([127, 0, 0, 1], free_tcp_port()));
        let mut cmd = match nofile {
            Some(n) => {
                let mut c = Command::new("prlimit");
                c.arg(format!("--nofile={n}:{n}")).arg("--").arg(bin);
                c
            }
            None => Command::new(bin),
        };
        let out = std::fs::File::create(&log).expect("the exporter's log file");
        cmd.arg("serve")
            .args(["--etcd.endpoint", endpoint])
            .args(["--web.listen-address", &addr.to_string()])
            .args(["--sample.interval", "250ms", "--sample.timeout", "250ms"])
            .args(extra)
            .stdin(Stdio::null())
            .stdout(out.try_clone().expect("the log file, twice"))
            .stderr(out);
        let child = cmd
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {bin} (or prlimit): {e}"));
        ChildExporter {
            pid: child.id(),
            guard: ChildGuard::new(child, "exporter"),
            addr,
            log,
            _dir: dir,
        }
    }

    /// What the exporter wrote so far (stdout and stderr).
    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    pub fn pid(&self) -> u32 {
        self.pid
    }

    /// Its exit status once it has exited.
    pub fn try_wait(&mut self) -> Option<ExitStatus> {
        self.guard.try_wait()
    }

    pub fn alive(&mut self) -> bool {
        self.try_wait().is_none()
    }

    /// How many descriptors it has open (0 once it is gone).
    pub fn open_fds(&self) -> usize {
        std::fs::read_dir(format!("/proc/{}/fd", self.pid))
            .map(|d| d.count())
            .unwrap_or(0)
    }

    /// `GET path` within [`CHILD_ANSWER`]: (status, body); None when it did
    /// not answer in time or the connect failed.
    pub async fn get(&self, path: &str) -> Option<(u16, String)> {
        let answer = http_client::get_at(self.addr, path, None, CHILD_ANSWER).await;
        answer.ok().map(|a| (a.status.as_u16(), a.body))
    }

    /// Wait until `/readyz` answers 200; panic with the log when the
    /// exporter exits or `within` passes first.
    pub async fn wait_ready(&mut self, within: Duration) {
        let (addr, log) = (self.addr, &self.log);
        wait_http_ready(&mut self.guard, addr, "/readyz", "exporter", within, log).await;
    }

    /// The value of `series` in a scrape of `/metrics` now ([`expect_metric`]).
    pub async fn metric_value(&self, series: &str) -> f64 {
        let (status, body) = self
            .get("/metrics")
            .await
            .unwrap_or_else(|| panic!("/metrics did not answer:\n{}", self.log()));
        assert_eq!(status, 200, "/metrics: {body}");
        expect_metric(&body, series)
    }
}

/// `POST path` with an empty body; (status, body). 10 s deadline.
pub async fn post(addr: SocketAddr, path: &str) -> (u16, String) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let work = async {
        let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
        let req = format!(
            "POST {path} HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
        );
        s.write_all(req.as_bytes()).await.unwrap();
        let mut buf = Vec::new();
        s.read_to_end(&mut buf).await.unwrap();
        buf
    };
    let buf = tokio::time::timeout(Duration::from_secs(10), work)
        .await
        .unwrap_or_else(|_| panic!("POST {path} did not answer within 10s"));
    let text = String::from_utf8_lossy(&buf).into_owned();
    let status = text[9..12].parse().unwrap();
    let body = text
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.to_string())
        .unwrap_or_default();
    (status, body)
}
