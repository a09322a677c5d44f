//! Shared integration-test harness: a real etcd cluster from the `etcd`
//! binary on free 127.0.0.1 ports ([`EtcdCluster`]), and the exporter's serve
//! pipeline running in-process on a free port ([`Exporter`]). Every child is
//! killed on Drop; every wait is bounded by a deadline.

#![allow(dead_code)]

pub mod atomic_writer;

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use etcd_readiness_exporter::config::{ServeArgs, ServeConfig};
use etcd_readiness_exporter::demo::{etcd_member_command, free_ports, http_get};
use etcd_readiness_exporter::serve::{self, Running};

/// Server TLS material for a member (PEM file paths).
#[derive(Clone, Debug)]
pub struct ServerTls {
    pub ca: PathBuf,
    pub cert: PathBuf,
    pub key: PathBuf,
}

pub struct Member {
    pub name: String,
    pub client_port: u16,
    pub peer_port: u16,
    pub data_dir: PathBuf,
    pub log: PathBuf,
    child: Option<Child>,
    stopped: bool,
}

pub struct EtcdClusterBuilder {
    n: usize,
    tls: Option<ServerTls>,
    quota: Option<u64>,
}

impl EtcdClusterBuilder {
    /// Serve clients over https with client-certificate auth.
    pub fn tls(mut self, tls: ServerTls) -> Self {
        self.tls = Some(tls);
        self
    }

    /// `--quota-backend-bytes`.
    pub fn quota(mut self, bytes: u64) -> Self {
        self.quota = Some(bytes);
        self
    }

    pub fn start(self) -> EtcdCluster {
        let dir = tempfile::tempdir().expect("tempdir");
        let ports = free_ports(2 * self.n).unwrap();
        let members = (1..=self.n)
            .map(|i| Member {
                name: format!("m{i}"),
                client_port: ports[2 * i - 2],
                peer_port: ports[2 * i - 1],
                data_dir: dir.path().join(format!("m{i}.etcd")),
                log: dir.path().join(format!("m{i}.log")),
                child: None,
                stopped: false,
            })
            .collect();
        let mut c = EtcdCluster {
            dir,
            members,
            tls: self.tls,
            quota: self.quota,
        };
        for i in 0..self.n {
            c.spawn(i);
        }
        c
    }
}

/// A running etcd cluster. Dropping it kills every member.
pub struct EtcdCluster {
    pub dir: tempfile::TempDir,
    pub members: Vec<Member>,
    tls: Option<ServerTls>,
    quota: Option<u64>,
}

impl EtcdCluster {
    pub fn builder(n: usize) -> EtcdClusterBuilder {
        EtcdClusterBuilder {
            n,
            tls: None,
            quota: None,
        }
    }

    fn scheme(&self) -> &'static str {
        if self.tls.is_some() { "https" } else { "http" }
    }

    pub fn endpoint(&self, i: usize) -> String {
        format!(
            "{}://127.0.0.1:{}",
            self.scheme(),
            self.members[i].client_port
        )
    }

    fn spawn(&mut self, i: usize) {
        let initial: Vec<String> = self
            .members
            .iter()
            .map(|m| format!("{}=http://127.0.0.1:{}", m.name, m.peer_port))
            .collect();
        let client = self.endpoint(i);
        let m = &mut self.members[i];
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&m.log)
            .unwrap();
        let peer = format!("http://127.0.0.1:{}", m.peer_port);
        let mut cmd = etcd_member_command(
            Path::new("etcd"),
            &m.name,
            &m.data_dir,
            &client,
            &peer,
            &initial.join(","),
        );
        cmd.args(["--initial-cluster-state", "new"])
            .args(["--heartbeat-interval", "50", "--election-timeout", "500"])
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log);
        if let Some(q) = self.quota {
            cmd.arg(format!("--quota-backend-bytes={q}"));
        }
        if let Some(t) = &self.tls {
            cmd.arg("--client-cert-auth")
                .arg("--trusted-ca-file")
                .arg(&t.ca)
                .arg("--cert-file")
                .arg(&t.cert)
                .arg("--key-file")
                .arg(&t.key);
        }
        m.child = Some(
            cmd.spawn()
                .expect("etcd binary (apt-get install etcd-server)"),
        );
        m.stopped = false;
    }

    pub fn kill(&mut self, i: usize) {
        let m = &mut self.members[i];
        if let Some(mut c) = m.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
        m.stopped = false;
    }

    fn signal(&self, i: usize, sig: &str) {
        let pid = self.members[i].child.as_ref().expect("running").id();
        let st = Command::new("kill")
            .args([sig, &pid.to_string()])
            .status()
            .unwrap();
        assert!(st.success(), "kill {sig} {pid}");
    }

    /// Freeze the member (SIGSTOP): its ports stay open, nothing answers.
    pub fn stop(&mut self, i: usize) {
        self.signal(i, "-STOP");
        self.members[i].stopped = true;
    }

    pub fn cont(&mut self, i: usize) {
        self.signal(i, "-CONT");
        self.members[i].stopped = false;
    }

    /// Start a killed member again on its data dir.
    pub fn restart(&mut self, i: usize) {
        self.kill(i);
        self.spawn(i);
    }

    pub fn log(&self, i: usize) -> String {
        std::fs::read_to_string(&self.members[i].log).unwrap_or_default()
    }

    /// A plain (non-TLS) client to member `i`, for test writes.
    pub async fn client(&self, i: usize) -> etcd_client::Client {
        etcd_client::Client::connect(
            [self.endpoint(i)],
            Some(etcd_client::ConnectOptions::new().with_timeout(Duration::from_secs(2))),
        )
        .await
        .unwrap()
    }

    /// Index of the leader, asked of every running member.
    pub async fn leader(&self) -> Option<usize> {
        let mut ids = vec![0u64; self.members.len()];
        let mut leader = 0;
        for (i, id) in ids.iter_mut().enumerate() {
            let m = &self.members[i];
            if m.child.is_none() || m.stopped || self.tls.is_some() {
                continue;
            }
            let mut c = self.client(i).await;
            if let Ok(Ok(s)) = tokio::time::timeout(Duration::from_secs(2), c.status()).await {
                *id = s.header().map_or(0, |h| h.member_id());
                if s.leader() != 0 {
                    leader = s.leader();
                }
            }
        }
        ids.iter().position(|id| *id != 0 && *id == leader)
    }
}

impl Drop for EtcdCluster {
    fn drop(&mut self) {
        for i in 0..self.members.len() {
            self.kill(i);
        }
    }
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
    /// last response.
    pub async fn wait_for(&self, path: &str, status: u16, deadline: Duration) -> Resp {
        let end = Instant::now() + deadline;
        loop {
            let r = self.get(path).await;
            if r.status == status || Instant::now() > end {
                return r;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
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
        let end = Instant::now() + deadline;
        loop {
            let p = self.policy_json().await;
            if cond(&p) {
                return p;
            }
            assert!(Instant::now() < end, "timed out waiting for {what}: {p}");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Poll `path` until its response satisfies `cond` or `deadline` passes;
    /// returns the last response.
    pub async fn wait_until(
        &self,
        path: &str,
        deadline: Duration,
        cond: impl Fn(&Resp) -> bool,
    ) -> Resp {
        let end = Instant::now() + deadline;
        loop {
            let r = self.get(path).await;
            if cond(&r) || Instant::now() > end {
                return r;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
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
