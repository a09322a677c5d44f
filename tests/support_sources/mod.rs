//! Real parts for the source tests: a single-member etcd 3.4 (the library's
//! `localcluster`), a dnsmasq with
//! TXT records, and a small HTTP server playing the etcd-backup-restore
//! sidecar. Every child is killed when its guard drops; every wait has a deadline.

#![allow(dead_code)]

use std::net::{SocketAddr, TcpListener, UdpSocket};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::Router;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::IntoResponse;
use axum::routing::get;
use etcd_readiness_exporter::localcluster::LocalCluster;

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
}

impl Etcd {
    pub async fn start() -> Etcd {
        let cluster = LocalCluster::builder(1)
            .metrics()
            .start()
            .expect("etcd (apt-get install etcd-server)");
        let etcd = Etcd {
            client_url: cluster.endpoint(0),
            metrics_url: cluster.metrics_url(0).expect("built with metrics"),
            cluster,
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

/// What the fake sidecar serves.
#[derive(Clone, Debug)]
pub struct SidecarState {
    pub full_revision: i64,
    pub full_timestamp: f64,
    pub incr_revision: i64,
    pub incr_timestamp: f64,
    pub healthz: u16,
    /// Serve this instead of the documented /metrics (to test bad answers).
    pub metrics_body: Option<String>,
}

impl Default for SidecarState {
    fn default() -> Self {
        SidecarState {
            full_revision: 0,
            full_timestamp: 0.0,
            incr_revision: 0,
            incr_timestamp: 0.0,
            healthz: 200,
            metrics_body: None,
        }
    }
}

/// An HTTP server playing etcd-backup-restore: `/metrics`, `/healthz`,
/// `/snapshot/latest`, with the documented shapes. Stops on drop.
pub struct Sidecar {
    pub url: String,
    pub state: Arc<Mutex<SidecarState>>,
    task: tokio::task::JoinHandle<()>,
}

impl Sidecar {
    fn app(state: &Arc<Mutex<SidecarState>>) -> Router {
        Router::new()
            .route("/metrics", get(metrics))
            .route("/healthz", get(healthz))
            .route("/snapshot/latest", get(latest))
            .with_state(state.clone())
    }

    pub async fn start() -> Sidecar {
        let state = Arc::new(Mutex::new(SidecarState::default()));
        let app = Sidecar::app(&state);
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let task = tokio::spawn(async move {
            axum::serve(listener, app).await.unwrap();
        });
        Sidecar { url, state, task }
    }

    /// The same over HTTPS with `cert`/`key` (PEM), requiring a client
    /// certificate signed by `client_ca` (PEM): the sidecar's mTLS setup.
    pub async fn start_tls(cert: &Path, key: &Path, client_ca: &Path) -> Sidecar {
        use tokio_rustls::rustls::pki_types::pem::PemObject;
        use tokio_rustls::rustls::pki_types::{CertificateDer, PrivateKeyDer};
        use tokio_rustls::rustls::{
            RootCertStore, ServerConfig, crypto, server::WebPkiClientVerifier,
        };
        let provider = Arc::new(crypto::ring::default_provider());
        let mut roots = RootCertStore::empty();
        for c in CertificateDer::pem_file_iter(client_ca).unwrap() {
            roots.add(c.unwrap()).unwrap();
        }
        let verifier =
            WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider.clone())
                .build()
                .unwrap();
        let chain: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(cert)
            .unwrap()
            .map(|c| c.unwrap())
            .collect();
        let config = ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_client_cert_verifier(verifier)
            .with_single_cert(chain, PrivateKeyDer::from_pem_file(key).unwrap())
            .unwrap();
        let tcp = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("https://{}", tcp.local_addr().unwrap());
        let listener = TlsListener {
            tcp,
            acceptor: tokio_rustls::TlsAcceptor::from(Arc::new(config)),
        };
        let state = Arc::new(Mutex::new(SidecarState::default()));
        let app = Sidecar::app(&state);
        let task = tokio::spawn(async move {
            axum::serve(listener, app).await.unwrap();
        });
        Sidecar { url, state, task }
    }

    pub fn set(&self, f: impl FnOnce(&mut SidecarState)) {
        f(&mut self.state.lock().unwrap());
    }

    /// Stop serving (the port refuses connections afterwards).
    pub async fn stop(&self) {
        self.task.abort();
        let url = self.url.clone();
        wait_until("the sidecar to stop", Duration::from_secs(5), || {
            let addr = url
                .trim_start_matches("http://")
                .trim_start_matches("https://")
                .to_string();
            async move { tokio::net::TcpStream::connect(addr).await.is_err() }
        })
        .await;
    }
}

/// A TCP listener that completes a TLS handshake before handing a connection
/// to axum; failed handshakes (a client that rejects our certificate, or has
/// none) are dropped and the next connection is accepted.
struct TlsListener {
    tcp: tokio::net::TcpListener,
    acceptor: tokio_rustls::TlsAcceptor,
}

impl axum::serve::Listener for TlsListener {
    type Io = tokio_rustls::server::TlsStream<tokio::net::TcpStream>;
    type Addr = SocketAddr;

    async fn accept(&mut self) -> (Self::Io, Self::Addr) {
        loop {
            let Ok((tcp, addr)) = self.tcp.accept().await else {
                continue;
            };
            if let Ok(Ok(tls)) =
                tokio::time::timeout(Duration::from_secs(5), self.acceptor.accept(tcp)).await
            {
                return (tls, addr);
            }
        }
    }

    fn local_addr(&self) -> std::io::Result<Self::Addr> {
        self.tcp.local_addr()
    }
}

impl Drop for Sidecar {
    fn drop(&mut self) {
        self.task.abort();
    }
}

type Shared = State<Arc<Mutex<SidecarState>>>;

async fn metrics(State(s): Shared) -> impl IntoResponse {
    let s = s.lock().unwrap().clone();
    let body = s.metrics_body.clone().unwrap_or_else(|| {
        format!(
            "# HELP etcdbr_snapshot_latest_revision Latest revision of snapshot taken.\n\
# TYPE etcdbr_snapshot_latest_revision gauge\n\
etcdbr_snapshot_latest_revision{{kind=\"Chunk\"}} 0\n\
etcdbr_snapshot_latest_revision{{kind=\"Full\"}} {}\n\
etcdbr_snapshot_latest_revision{{kind=\"Incr\"}} {}\n\
# HELP etcdbr_snapshot_latest_timestamp Timestamp of latest snapshot taken.\n\
# TYPE etcdbr_snapshot_latest_timestamp gauge\n\
etcdbr_snapshot_latest_timestamp{{kind=\"Chunk\"}} 0\n\
etcdbr_snapshot_latest_timestamp{{kind=\"Full\"}} {}\n\
etcdbr_snapshot_latest_timestamp{{kind=\"Incr\"}} {}\n\
# HELP etcdbr_snapshot_required Indicates whether a new snapshot is required to be taken.\n\
# TYPE etcdbr_snapshot_required gauge\n\
etcdbr_snapshot_required{{kind=\"Full\"}} 0\n\
etcdbr_snapshot_required{{kind=\"Incr\"}} 0\n\
# HELP etcdbr_cluster_size Size of the etcd cluster.\n\
# TYPE etcdbr_cluster_size gauge\n\
etcdbr_cluster_size 1\n",
            s.full_revision,
            s.incr_revision,
            go_float(s.full_timestamp),
            go_float(s.incr_timestamp)
        )
    });
    (
        [("content-type", "text/plain; version=0.0.4; charset=utf-8")],
        body,
    )
}

/// A float as Go's client_golang writes it: `0`, `1.7644e+09`.
fn go_float(f: f64) -> String {
    if f == 0.0 {
        return "0".to_string();
    }
    let e = format!("{f:e}");
    let (mant, exp) = e.split_once('e').unwrap();
    let exp: i32 = exp.parse().unwrap();
    format!("{mant}e{}{:02}", if exp < 0 { '-' } else { '+' }, exp.abs())
}

async fn healthz(State(s): Shared) -> impl IntoResponse {
    let code = s.lock().unwrap().healthz;
    let status = StatusCode::from_u16(code).unwrap();
    (status, format!("{{\"health\":{}}}", code == 200))
}

fn rfc3339(ts: f64) -> String {
    // Civil date from days since the epoch (H. Hinnant), in UTC with nanoseconds as Go writes.
    let secs = ts.floor() as i64;
    let nanos = ((ts - ts.floor()) * 1e9).round() as i64;
    let (days, rem) = (secs.div_euclid(86_400), secs.rem_euclid(86_400));
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}.{nanos:09}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

async fn latest(State(s): Shared) -> impl IntoResponse {
    let s = s.lock().unwrap().clone();
    let snap = |kind: &str, start: i64, last: i64, ts: f64| {
        serde_json::json!({
            "kind": kind,
            "startRevision": start,
            "lastRevision": last,
            "createdOn": rfc3339(ts),
            "snapDir": "",
            "snapName": format!("{kind}-{start:08}-{last:08}-{}", ts as i64),
            "isChunk": false,
            "prefix": "v2",
            "compressionSuffix": ".gz",
            "isFinal": false,
        })
    };
    let full = if s.full_revision > 0 {
        snap("Full", 0, s.full_revision, s.full_timestamp)
    } else {
        serde_json::Value::Null
    };
    let deltas = if s.incr_revision > 0 {
        vec![snap(
            "Incr",
            s.full_revision + 1,
            s.incr_revision,
            s.incr_timestamp,
        )]
    } else {
        vec![]
    };
    axum::Json(serde_json::json!({"fullSnapshot": full, "deltaSnapshots": deltas}))
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
