//! The exporter's serve pipeline in-process on a free port ([`Exporter`]),
//! with the waits that explain a failure (`/readyz?verbose` and `/signals`),
//! the log capture, and small HTTP helpers ([`post`], [`metric_line`]).

use std::net::SocketAddr;
use std::time::Duration;

use etcd_readiness_exporter::cmd::localcluster::http_get;
use etcd_readiness_exporter::cmd::serve::{self, Running};
use etcd_readiness_exporter::config::{ServeArgs, ServeConfig};

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
    pub head: String,
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

    pub async fn get_accept(&self, path: &str, accept: Option<&str>) -> Resp {
        let (status, head, body) =
            tokio::time::timeout(Duration::from_secs(5), http_get(self.addr(), path, accept))
                .await
                .unwrap_or_else(|_| panic!("GET {path} did not answer within 5s"))
                .expect("GET");
        Resp { status, head, body }
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
