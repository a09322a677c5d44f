//! Real parts for the source tests: a single-member etcd 3.4 (the library's
//! `localcluster`), a dnsmasq with TXT records, and the testkit's stand-in
//! for the etcd-backup-restore sidecar. Every child is killed when its guard
//! drops; every wait has a deadline.

#![allow(dead_code)]

use std::net::{SocketAddr, TcpListener, UdpSocket};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use etcd_readiness_exporter::localcluster::LocalCluster;
#[allow(unused_imports)]
pub use etcd_readiness_testkit::backup::{Sidecar, SidecarState};

/// A free TCP port on 127.0.0.1 (the OS picks it; we release it for the child).
pub fn free_tcp_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// A port free for both UDP and TCP on 127.0.0.1.
pub fn free_udp_tcp_port() -> u16 {
    for _ in 0..50 {
        let udp = UdpSocket::bind("127.0.0.1:0").unwrap();
        let port = udp.local_addr().unwrap().port();
        if TcpListener::bind(("127.0.0.1", port)).is_ok() {
            return port;
        }
    }
    panic!("no port free for both UDP and TCP");
}

/// Poll `cond` every 20 ms until it is true or `within` passes.
pub async fn wait_until<F, Fut>(what: &str, within: Duration, mut cond: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = Instant::now() + within;
    loop {
        if cond().await {
            return;
        }
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// A child process killed (and reaped) on drop.
pub struct ChildGuard {
    child: Option<Child>,
    pub name: &'static str,
}

impl ChildGuard {
    pub fn new(child: Child, name: &'static str) -> ChildGuard {
        ChildGuard {
            child: Some(child),
            name,
        }
    }

    pub fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

impl Drop for ChildGuard {
    fn drop(&mut self) {
        self.kill();
    }
}

/// dnsmasq on 127.0.0.1:`port` answering for `example.test` only (other names
/// there are NXDOMAIN), with the given TXT records.
pub struct Dnsmasq {
    pub addr: SocketAddr,
    pub guard: ChildGuard,
    _dir: tempfile::TempDir,
}

impl Dnsmasq {
    pub async fn start(txt: &[(&str, &str)]) -> Dnsmasq {
        Dnsmasq::start_on(free_udp_tcp_port(), txt).await
    }

    /// Start on a given port (e.g. again after a kill, with other records).
    pub async fn start_on(port: u16, txt: &[(&str, &str)]) -> Dnsmasq {
        let dir = tempfile::tempdir().unwrap();
        let mut cmd = Command::new("/usr/sbin/dnsmasq");
        cmd.args([
            "--keep-in-foreground",
            "--no-resolv",
            "--no-hosts",
            "--bind-interfaces",
            "--listen-address=127.0.0.1",
            "--local=/example.test/",
            "--user=root",
            "--log-facility=-",
        ])
        .arg(format!("--port={port}"))
        .arg(format!(
            "--pid-file={}",
            dir.path().join("dnsmasq.pid").display()
        ));
        for (name, value) in txt {
            // No shell here: quotes would reach dnsmasq and become part of the text.
            cmd.arg(format!("--txt-record={name},{value}"));
        }
        let child = cmd
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start /usr/sbin/dnsmasq (Debian package dnsmasq-base)");
        let mut guard = ChildGuard {
            child: Some(child),
            name: "dnsmasq",
        };
        // Ready when its UDP port is taken.
        let deadline = Instant::now() + Duration::from_secs(10);
        while UdpSocket::bind(("127.0.0.1", port)).is_ok() {
            if let Some(Ok(Some(status))) = guard.child.as_mut().map(|c| c.try_wait()) {
                panic!("dnsmasq exited early: {status}");
            }
            assert!(
                Instant::now() < deadline,
                "dnsmasq did not bind 127.0.0.1:{port}"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        Dnsmasq {
            addr: SocketAddr::from(([127, 0, 0, 1], port)),
            guard,
            _dir: dir,
        }
    }
}

/// A single-member etcd 3.4 with a metrics listener: the library's
/// [`LocalCluster`] of one, started and answering a linearizable get.
pub struct Etcd {
    pub client_url: String,
    pub metrics_url: String,
    pub cluster: LocalCluster,
    /// A heavy-test slot (`etcd_readiness_testkit::heavy`), held while it runs.
    _slot: etcd_readiness_testkit::heavy::Slot,
}

impl Etcd {
    pub async fn start() -> Etcd {
        let slot = etcd_readiness_testkit::heavy::slot();
        let cluster = LocalCluster::builder(1)
            .metrics()
            .start()
            .expect("etcd (apt-get install etcd-server)");
        let etcd = Etcd {
            client_url: cluster.endpoint(0),
            metrics_url: cluster.metrics_url(0).expect("built with metrics"),
            cluster,
            _slot: slot,
        };
        let url = etcd.client_url.clone();
        wait_until(
            "etcd to answer a linearizable get",
            Duration::from_secs(20),
            || {
                let url = url.clone();
                async move {
                    let Ok(Ok(mut c)) = tokio::time::timeout(
                        Duration::from_secs(1),
                        etcd_client::Client::connect([url], None),
                    )
                    .await
                    else {
                        return false;
                    };
                    matches!(
                        tokio::time::timeout(Duration::from_secs(1), c.get("probe", None)).await,
                        Ok(Ok(_))
                    )
                }
            },
        )
        .await;
        etcd
    }

    /// SIGKILL the member.
    pub fn kill(&mut self) {
        self.cluster.kill(0);
    }

    pub async fn client(&self) -> etcd_client::Client {
        let opts = etcd_client::ConnectOptions::new().with_timeout(Duration::from_secs(5));
        etcd_client::Client::connect([self.client_url.clone()], Some(opts))
            .await
            .unwrap()
    }
}

/// The current revision, from the header of a linearizable Range, and the
/// Range's latency in milliseconds.
pub async fn read_revision(client: &mut etcd_client::Client) -> (i64, f64) {
    let t = Instant::now();
    let resp = client.get("probe", None).await.unwrap();
    let ms = t.elapsed().as_secs_f64() * 1000.0;
    (resp.header().unwrap().revision(), ms)
}

/// Write keys (64 in flight) until the revision is at least `target`.
pub async fn write_until_revision(client: &etcd_client::Client, target: i64) -> i64 {
    let deadline = Instant::now() + Duration::from_secs(40);
    loop {
        let (rev, _) = read_revision(&mut client.clone()).await;
        if rev >= target {
            return rev;
        }
        assert!(Instant::now() < deadline, "etcd revision stuck at {rev}");
        let n = (target - rev).min(2000);
        let mut tasks = tokio::task::JoinSet::new();
        for w in 0..64 {
            let mut c = client.clone();
            tasks.spawn(async move {
                let mut i = w;
                while i < n {
                    c.put(format!("k{}", i % 100), "v", None).await.unwrap();
                    i += 64;
                }
            });
        }
        while let Some(r) = tasks.join_next().await {
            r.unwrap();
        }
    }
}

/// A TCP server that accepts connections and never answers. Stops on drop.
pub struct Silent {
    pub url: String,
    task: tokio::task::JoinHandle<()>,
}

impl Silent {
    pub async fn start() -> Silent {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let task = tokio::spawn(async move {
            let mut held = Vec::new();
            while let Ok((conn, _)) = listener.accept().await {
                held.push(conn);
            }
        });
        Silent { url, task }
    }
}

impl Drop for Silent {
    fn drop(&mut self) {
        self.task.abort();
    }
}
