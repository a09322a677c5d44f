//! The etcd-backup-restore sidecar, played by a small HTTP server: the
//! sidecar cannot be installed here, so the tests, the monitoring test and
//! the benchmarks share this one stand-in. It serves the documented API
//! (REFERENCE.md): `/metrics` with `etcdbr_snapshot_latest_revision{kind}`
//! and `etcdbr_snapshot_latest_timestamp{kind}` as client_golang writes
//! them, `/healthz` and `/snapshot/latest`, over HTTP or mutual TLS, with a
//! state the test changes while it runs.

use std::net::SocketAddr;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::IntoResponse;
use axum::routing::get;

use crate::wait::poll;

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

    /// Serve on a free loopback port.
    pub async fn start() -> Sidecar {
        Sidecar::start_on(
            SocketAddr::from(([127, 0, 0, 1], 0)),
            SidecarState::default(),
        )
        .await
        .expect("bind 127.0.0.1:0")
    }

    /// Serve `state` on `addr`.
    pub async fn start_on(addr: SocketAddr, state: SidecarState) -> std::io::Result<Sidecar> {
        let state = Arc::new(Mutex::new(state));
        let app = Sidecar::app(&state);
        let listener = tokio::net::TcpListener::bind(addr).await?;
        let url = format!("http://{}", listener.local_addr()?);
        let task = tokio::spawn(async move {
            axum::serve(listener, app).await.unwrap();
        });
        Ok(Sidecar { url, state, task })
    }

    /// The same over HTTPS with `cert`/`key` (PEM), requiring a client
    /// certificate signed by `client_ca` (PEM): the sidecar's mTLS setup.
    pub async fn start_tls(cert: &Path, key: &Path, client_ca: &Path) -> Sidecar {
        let tcp = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        Sidecar::start_tls_with(tcp, cert, key, client_ca)
    }

    /// [`Sidecar::start_tls`] on `addr` (a restart with new certificates,
    /// on the port the exporter knows).
    pub async fn start_tls_on(
        addr: SocketAddr,
        cert: &Path,
        key: &Path,
        client_ca: &Path,
    ) -> std::io::Result<Sidecar> {
        let tcp = tokio::net::TcpListener::bind(addr).await?;
        Ok(Sidecar::start_tls_with(tcp, cert, key, client_ca))
    }

    fn start_tls_with(
        tcp: tokio::net::TcpListener,
        cert: &Path,
        key: &Path,
        client_ca: &Path,
    ) -> Sidecar {
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

    /// Stop serving; returns once the port refuses connections (panics
    /// after 5 s if it still accepts).
    pub async fn stop(&self) {
        self.task.abort();
        let addr = self
            .url
            .trim_start_matches("http://")
            .trim_start_matches("https://")
            .to_string();
        let addr = &addr;
        let refused = poll(
            Duration::from_secs(5),
            Duration::from_millis(20),
            || async move {
                match tokio::net::TcpStream::connect(addr).await {
                    Ok(_) => Err(()),
                    Err(_) => Ok(()),
                }
            },
        )
        .await;
        if refused.is_err() {
            panic!("the sidecar still accepts on {addr}");
        }
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

/// A Unix time as Go's `time.Time` JSON writes it (RFC 3339 with
/// nanoseconds, UTC); 0 for a time jiff cannot represent.
fn rfc3339(ts: f64) -> String {
    let nanos = (ts * 1e9).round();
    let ts = if nanos.is_finite() && nanos.abs() < 1e27 {
        jiff::Timestamp::from_nanosecond(nanos as i128).unwrap_or(jiff::Timestamp::UNIX_EPOCH)
    } else {
        jiff::Timestamp::UNIX_EPOCH
    };
    format!("{ts:.9}")
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
