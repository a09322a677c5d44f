//! Access control on the exporter's port, with real clients: `--web.config.file`
//! (exporter-toolkit format) with TLS, client certificates and basic auth,
//! checked by curl and by a real Prometheus scraping with `tls_config` and
//! `basic_auth`; the plain probe listener answering the kubelet's way while
//! the main listener requires all that; `POST /-/reload` refused without
//! `--web.enable-lifecycle`; and the web configuration reloaded without a
//! restart — a certificate rotated under a live scrape, a broken file that
//! keeps the last good one. Certificates are generated in the test
//! (tests/pki); every wait has a deadline.

use std::cell::RefCell;
use std::net::SocketAddr;
use std::path::Path;
use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, Instant};

use etcd_readiness_testkit::etcd::EtcdCluster;
use etcd_readiness_testkit::exporter;
use etcd_readiness_testkit::exporter::Exporter;
use etcd_readiness_testkit::pki;
use etcd_readiness_testkit::prometheus::Prometheus;
use etcd_readiness_testkit::wait::{poll, until_some};

const WAIT: Duration = Duration::from_secs(60);
const PASSWORD: &str = "correct horse battery staple";

/// What curl got: its exit code, the HTTP status (0 when none) and the body.
#[derive(Debug)]
struct Curl {
    exit: i32,
    status: u16,
    body: String,
    /// Shown in failure messages (Debug).
    #[allow(dead_code)]
    stderr: String,
}

/// Run curl with `args` (a 10 s limit of its own) off the async workers.
async fn curl(args: Vec<String>) -> Curl {
    tokio::task::spawn_blocking(move || {
        let out = Command::new("curl")
            .args(["-sS", "--max-time", "10", "-w", "\n%{http_code}"])
            .args(&args)
            .output()
            .expect("curl");
        let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
        let (body, code) = stdout.rsplit_once('\n').unwrap_or(("", &stdout));
        Curl {
            exit: out.status.code().unwrap_or(-1),
            status: code.trim().parse().unwrap_or(0),
            body: body.to_string(),
            stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        }
    })
    .await
    .unwrap()
}

fn s(p: &Path) -> String {
    p.display().to_string()
}

/// curl arguments for an mTLS client of `pki` (`client`: which cert, e.g.
/// "client" or "other-client", None for none) with basic auth `user:pass`.
fn tls_args(pki: &pki::Pki, client: Option<&str>, auth: Option<&str>) -> Vec<String> {
    let mut a = vec!["--cacert".to_string(), s(&pki.path("ca.pem"))];
    if let Some(c) = client {
        a.extend([
            "--cert".to_string(),
            s(&pki.path(&format!("{c}.pem"))),
            "--key".to_string(),
            s(&pki.path(&format!("{c}-key.pem"))),
        ]);
    }
    if let Some(u) = auth {
        a.extend(["-u".to_string(), u.to_string()]);
    }
    a
}

fn with(mut a: Vec<String>, more: &[&str]) -> Vec<String> {
    a.extend(more.iter().map(|s| s.to_string()));
    a
}

/// The mTLS + basic-auth web config for `pki`, with `password` for user
/// `prometheus`.
fn mtls_web_config(pki: &pki::Pki, password: &str) -> String {
    let hash = bcrypt::hash(password, 10).unwrap();
    format!(
        "tls_server_config:\n  cert_file: server.pem\n  key_file: server-key.pem\n  \
         client_auth_type: RequireAndVerifyClientCert\n  client_ca_file: {}\n\
         basic_auth_users:\n  prometheus: '{hash}'\n\
         http_server_config:\n  headers:\n    X-Frame-Options: deny\n",
        s(&pki.path("ca.pem"))
    )
}

/// Replace `path`'s content in one rename, as an editor or cert-manager's
/// Secret update does.
fn replace(path: &Path, content: &str) {
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, content).unwrap();
    std::fs::rename(&tmp, path).unwrap();
}

/// The DER of the certificate a TLS server at `addr` presents (verified
/// against `ca`, no client certificate: the handshake completes from the
/// client's side before the server can refuse it, which is all we need).
async fn served_certificate(addr: SocketAddr, ca: &Path) -> Option<Vec<u8>> {
    use tokio_rustls::rustls::pki_types::pem::PemObject;
    use tokio_rustls::rustls::pki_types::{CertificateDer, ServerName};
    use tokio_rustls::rustls::{ClientConfig, RootCertStore, crypto};
    let mut roots = RootCertStore::empty();
    for c in CertificateDer::pem_file_iter(ca).unwrap() {
        roots.add(c.unwrap()).unwrap();
    }
    let config = ClientConfig::builder_with_provider(Arc::new(crypto::ring::default_provider()))
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
    let connector = tokio_rustls::TlsConnector::from(Arc::new(config));
    let work = async {
        let tcp = tokio::net::TcpStream::connect(addr).await.ok()?;
        let name = ServerName::try_from("127.0.0.1").ok()?;
        let tls = connector.connect(name, tcp).await.ok()?;
        let (_, conn) = tls.get_ref();
        conn.peer_certificates()
            .and_then(|c| c.first())
            .map(|c| c.as_ref().to_vec())
    };
    tokio::time::timeout(Duration::from_secs(5), work)
        .await
        .ok()
        .flatten()
}

fn pem_der(pem: &str) -> Vec<u8> {
    use tokio_rustls::rustls::pki_types::CertificateDer;
    use tokio_rustls::rustls::pki_types::pem::PemObject;
    CertificateDer::from_pem_slice(pem.as_bytes())
        .unwrap()
        .as_ref()
        .to_vec()
}

/// A real Prometheus (the testkit's) in a directory of its own.
struct Prom {
    inner: Prometheus,
    _dir: tempfile::TempDir,
}

impl Prom {
    fn start(config: &str) -> Prom {
        let dir = tempfile::tempdir().unwrap();
        Prom {
            inner: Prometheus::spawn(dir.path(), config),
            _dir: dir,
        }
    }

    fn log(&self) -> String {
        self.inner.log()
    }

    async fn api(&self, path: &str) -> Option<serde_json::Value> {
        self.inner.api(path).await
    }

    /// The one active target of `job`: (health, lastError, lastScrape).
    async fn target(&self, job: &str) -> Option<(String, String, String)> {
        let v = self.api("/api/v1/targets?state=active").await?;
        let t = v["data"]["activeTargets"]
            .as_array()?
            .iter()
            .find(|t| t["labels"]["job"] == job)?
            .clone();
        Some((
            t["health"].as_str()?.to_string(),
            t["lastError"].as_str()?.to_string(),
            t["lastScrape"].as_str()?.to_string(),
        ))
    }

    /// The value of an instant query with one result.
    async fn query(&self, q: &str) -> Option<f64> {
        self.inner.query_value(q).await
    }

    /// Wait until `n` more successful scrapes of `job` were seen (by its
    /// `lastScrape` changing while its health is "up").
    async fn wait_scrapes(&self, job: &str, n: usize) {
        let seen: &RefCell<Vec<String>> = &RefCell::default();
        let scraped = poll(WAIT, Duration::from_millis(200), || async move {
            let t = self.target(job).await;
            if let Some((health, _, last)) = &t
                && health == "up"
                && !seen.borrow().contains(last)
            {
                seen.borrow_mut().push(last.clone());
                // The first one seen may predate the call.
                if seen.borrow().len() > n {
                    return Ok(());
                }
            }
            Err(t)
        })
        .await;
        if let Err(t) = scraped {
            panic!(
                "timed out waiting for {n} successful scrapes of {job}: {t:?}\n{}",
                self.log()
            );
        }
    }
}

/// Start an exporter for `etcd` with `web.yml` (written into the PKI dir,
/// so its relative paths name the PKI files) and a probe listener.
async fn exporter(etcd: &str, web: &Path, lifecycle: bool) -> Exporter {
    let web = web.to_path_buf();
    Exporter::start(etcd, move |a| {
        a.web_config_file = Some(web);
        a.web_enable_lifecycle = lifecycle;
        a.web_probe_listen_address = Some("127.0.0.1:0".into());
    })
    .await
}

fn main_url(e: &Exporter, path: &str) -> String {
    format!("https://{}{path}", e.addr())
}

/// The file of exporter-toolkit's documentation (docs/web-config.yml), as
/// node_exporter's README points to it: TLS, two bcrypt users and a rate
/// limit. It loads as is and the listener it configures speaks TLS and asks
/// for a password.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exporter_toolkits_documented_file_works_as_is() {
    let pki = pki::make_pki();
    std::fs::copy(pki.path("server.pem"), pki.path("server.crt")).unwrap();
    std::fs::copy(pki.path("server-key.pem"), pki.path("server.key")).unwrap();
    let web = pki.path("web-config.yml");
    std::fs::write(
        &web,
        r#"# TLS and basic authentication configuration example.
#
# Additionally, a certificate and a key file are needed.
tls_server_config:
  cert_file: server.crt
  key_file: server.key

# Usernames and passwords required to connect.
# Passwords are hashed with bcrypt: https://github.com/prometheus/exporter-toolkit/blob/master/docs/web-configuration.md#about-bcrypt.
basic_auth_users:
  alice: $2y$10$mDwo.lAisC94iLAyP81MCesa29IzH37oigHC/42V2pdJlUprsJPze
  bob: $2y$10$hLqFl9jSjoAAy95Z/zw8Ye8wkdMBM8c5Bn1ptYqP/AXyV0.oy0S8m

# Rate limiting requests on the endpoint using a token bucket
rate_limit:
  interval: "1s" # time interval between two requests, set to 0 to disable rate limiter
  burst: 20 # and permits a burst of up to 20 requests.
"#,
    )
    .unwrap();
    let e = exporter("http://127.0.0.1:9", &web, false).await;
    let c = e.running.web.as_ref().unwrap().current();
    assert!(c.tls_enabled());
    assert_eq!(c.users.keys().collect::<Vec<_>>(), ["alice", "bob"]);
    assert_eq!(c.rate_limit.map(|r| r.burst), Some(20));
    let r = curl(with(
        tls_args(&pki, None, None),
        &[&main_url(&e, "/metrics")],
    ))
    .await;
    assert_eq!((r.exit, r.status), (0, 401), "{r:?}");
    let r = curl(with(
        tls_args(&pki, None, Some("alice:not-her-password")),
        &[&main_url(&e, "/metrics")],
    ))
    .await;
    assert_eq!((r.exit, r.status), (0, 401), "{r:?}");
}

/// The whole story on one exporter: a real Prometheus scrapes through mTLS
/// and basic auth; curl is refused the right way for each missing piece;
/// the probe listener answers plain; `POST /-/reload` is 403 without
/// lifecycle; the server certificate is rotated in place under the live
/// scrape (the new certificate is served, scrapes keep succeeding); a
/// broken new file keeps the last good configuration and says so.
// Long because: one Prometheus scraping through mTLS and basic auth across a rotation: before and after are the scenario.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn prometheus_scrapes_through_mtls_and_basic_auth_across_a_certificate_rotation() {
    let cluster = EtcdCluster::builder(1).start();
    let pki = pki::make_pki();
    let web = pki.path("web.yml");
    std::fs::write(&web, mtls_web_config(&pki, PASSWORD)).unwrap();
    let e = exporter(&cluster.endpoint(0), &web, false).await;
    let probe = e.running.probe_addr.expect("probe listener");
    let good = format!("prometheus:{PASSWORD}");
    // Both listeners' accept loops and the web config watcher run under the
    // supervisor, like every other long-running task.
    let mut tasks: Vec<String> = e
        .running
        .runtime
        .supervisor
        .tasks()
        .into_iter()
        .map(|t| t.name)
        .collect();
    tasks.sort();
    for t in ["http:main", "http:probe", "web-config-watcher"] {
        assert!(tasks.iter().any(|n| n == t), "{t} not in {tasks:?}");
    }

    // The probe listener: plain HTTP, probes only, no credentials — the
    // kubelet's way (a plain GET; 200 is success).
    let ready = until_some("/readyz 200 on the probe listener", WAIT, || async {
        let r = curl(vec![format!("http://{probe}/readyz")]).await;
        (r.status == 200).then_some(r)
    })
    .await;
    assert_eq!(ready.body, "ok");
    let r = curl(vec![format!("http://{probe}/livez")]).await;
    assert_eq!((r.status, r.body.as_str()), (200, "ok"), "{r:?}");
    let r = curl(vec![format!("http://{probe}/readyz/no_such_check")]).await;
    assert_eq!(r.status, 404, "{r:?}");
    for path in ["/metrics", "/signals", "/policy", "/"] {
        let r = curl(vec![format!("http://{probe}{path}")]).await;
        assert_eq!(r.status, 404, "{path} on the probe listener: {r:?}");
    }

    // The main listener: mTLS + basic auth, each piece checked.
    let metrics = main_url(&e, "/metrics");
    let ok = curl(with(
        tls_args(&pki, Some("client"), Some(&good)),
        &["-D", "-", &metrics],
    ))
    .await;
    assert_eq!((ok.exit, ok.status), (0, 200), "{ok:?}");
    assert!(ok.body.contains("x-frame-options: deny"), "{}", ok.body);
    assert!(
        ok.body
            .contains("etcd_readiness_web_config_last_reload_successful 1")
    );
    let r = curl(with(
        tls_args(&pki, Some("client"), Some("prometheus:wrong")),
        &["-D", "-", &metrics],
    ))
    .await;
    assert_eq!((r.exit, r.status), (0, 401), "wrong password: {r:?}");
    assert!(r.body.contains("www-authenticate: Basic"), "{}", r.body);
    let r = curl(with(tls_args(&pki, Some("client"), None), &[&metrics])).await;
    assert_eq!((r.exit, r.status), (0, 401), "no password: {r:?}");
    let r = curl(with(tls_args(&pki, None, Some(&good)), &[&metrics])).await;
    assert!(
        r.exit != 0 && r.status == 0,
        "no client certificate must fail the handshake: {r:?}"
    );
    let r = curl(with(
        tls_args(&pki, Some("other-client"), Some(&good)),
        &[&metrics],
    ))
    .await;
    assert!(
        r.exit != 0 && r.status == 0,
        "a client certificate of another CA must fail the handshake: {r:?}"
    );
    let r = curl(vec![format!("http://{}/metrics", e.addr())]).await;
    assert_eq!(r.status, 400, "plain HTTP to the TLS port: {r:?}");
    assert!(
        r.body
            .contains("Client sent an HTTP request to an HTTPS server"),
        "{r:?}"
    );
    let r = curl(with(
        tls_args(&pki, Some("client"), Some(&good)),
        &["-X", "POST", &main_url(&e, "/-/reload")],
    ))
    .await;
    assert_eq!(r.status, 403, "POST /-/reload without lifecycle: {r:?}");
    assert!(r.body.contains("Lifecycle API is not enabled"), "{r:?}");

    // A real Prometheus, scraping with tls_config (client cert) and basic_auth.
    let prom = Prom::start(&format!(
        "global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\n\
         scrape_configs:\n  - job_name: ere\n    scheme: https\n    tls_config:\n      \
         ca_file: {}\n      cert_file: {}\n      key_file: {}\n    basic_auth:\n      \
         username: prometheus\n      password: '{PASSWORD}'\n    static_configs:\n      \
         - targets: ['{}']\n",
        s(&pki.path("ca.pem")),
        s(&pki.path("client.pem")),
        s(&pki.path("client-key.pem")),
        e.addr()
    ));
    prom.wait_scrapes("ere", 3).await;
    let first_up = Instant::now();
    let up = prom.query("up{job=\"ere\"}").await;
    assert_eq!(up, Some(1.0));

    // Rotate the server certificate in place (key, then certificate, as a
    // Secret update lands) under the live scrape.
    let before = served_certificate(e.addr(), &pki.path("ca.pem"))
        .await
        .expect("a TLS handshake");
    assert_eq!(
        before,
        pem_der(&std::fs::read_to_string(pki.path("server.pem")).unwrap())
    );
    let (cert, key) = pki.server_cert(2000);
    replace(&pki.path("server-key.pem"), &key);
    replace(&pki.path("server.pem"), &cert);
    let want = pem_der(&cert);
    until_some("the rotated certificate to be served", WAIT, || async {
        (served_certificate(e.addr(), &pki.path("ca.pem")).await? == want).then_some(())
    })
    .await;
    let serial = {
        let der = served_certificate(e.addr(), &pki.path("ca.pem"))
            .await
            .unwrap();
        let (_, c) = x509_parser::parse_x509_certificate(&der).unwrap();
        c.raw_serial_as_string()
    };
    assert_eq!(serial, "07:d0", "serial 2000 of the new certificate");
    // Scrapes keep succeeding after the rotation: more successful scrapes,
    // and not one failed since the target first came up.
    prom.wait_scrapes("ere", 3).await;
    let window = first_up.elapsed().as_secs().max(1);
    assert_eq!(
        prom.query(&format!("min_over_time(up{{job=\"ere\"}}[{window}s])"))
            .await,
        Some(1.0),
        "a scrape failed around the rotation: {:?}",
        prom.target("ere").await
    );
    // New connections (curl) get the new certificate and still need the
    // client certificate and password.
    let r = curl(with(
        tls_args(&pki, Some("client"), Some(&good)),
        &[&metrics],
    ))
    .await;
    assert_eq!((r.exit, r.status), (0, 200), "{r:?}");

    // A broken new file (a typo in a key) keeps the last good configuration,
    // and the metrics and logs say so.
    let web_state = e.running.web.clone().unwrap();
    let (reloads_ok, failures) = (
        web_state.metrics().reloads(true),
        web_state.metrics().reloads(false),
    );
    replace(&web, "tls_server_config:\n  cert_filse: server.pem\n");
    until_some("last_reload_successful 0", WAIT, || async {
        let r = curl(with(
            tls_args(&pki, Some("client"), Some(&good)),
            &[&metrics],
        ))
        .await;
        (r.status == 200
            && r.body
                .contains("etcd_readiness_web_config_last_reload_successful 0"))
        .then_some(())
    })
    .await;
    assert!(web_state.metrics().reloads(false) > failures);
    assert_eq!(
        web_state.current().users.len(),
        1,
        "the last good config stays"
    );
    let r = curl(with(tls_args(&pki, None, Some(&good)), &[&metrics])).await;
    assert!(r.exit != 0, "still mTLS: {r:?}");
    prom.wait_scrapes("ere", 2).await;
    // A good file again is applied.
    replace(&web, &mtls_web_config(&pki, PASSWORD));
    until_some("last_reload_successful 1", WAIT, || async {
        let r = curl(with(
            tls_args(&pki, Some("client"), Some(&good)),
            &[&metrics],
        ))
        .await;
        r.body
            .contains("etcd_readiness_web_config_last_reload_successful 1")
            .then_some(())
    })
    .await;
    assert!(web_state.metrics().reloads(true) > reloads_ok);
    drop(prom);
    e.running.shutdown().await;
}

/// `--web.enable-lifecycle`: without it `POST /-/reload` is 403 (plain
/// listener, no web config); with it the web configuration is re-read on
/// POST and a changed password takes effect without a restart.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn post_reload_needs_lifecycle_and_then_reloads_the_web_config() {
    let off = Exporter::start("http://127.0.0.1:9", |a| {
        a.web_enable_lifecycle = false;
    })
    .await;
    let (status, body) = exporter::post(off.addr(), "/-/reload").await;
    assert_eq!(status, 403, "{body}");
    assert!(body.contains("Lifecycle API is not enabled"), "{body}");
    off.running.shutdown().await;

    // Basic auth over plain HTTP (no tls_server_config), lifecycle on.
    let dir = tempfile::tempdir().unwrap();
    let web = dir.path().join("web.yml");
    let users = |pw: &str| {
        format!(
            "basic_auth_users:\n  admin: '{}'\n",
            bcrypt::hash(pw, 4).unwrap()
        )
    };
    std::fs::write(&web, users("first")).unwrap();
    let e = exporter("http://127.0.0.1:9", &web, true).await;
    let url = format!("http://{}/livez", e.addr());
    let r = curl(vec!["-u".into(), "admin:first".into(), url.clone()]).await;
    assert_eq!(r.status, 200, "{r:?}");
    let r = curl(vec![
        "-u".into(),
        "admin:first".into(),
        "-X".into(),
        "POST".into(),
        format!("http://{}/-/reload", e.addr()),
    ])
    .await;
    assert_eq!(r.status, 200, "{r:?}");
    assert!(r.body.contains("web config unchanged"), "{r:?}");
    replace(&web, &users("second"));
    let r = curl(vec![
        "-u".into(),
        "admin:first".into(),
        "-X".into(),
        "POST".into(),
        format!("http://{}/-/reload", e.addr()),
    ])
    .await;
    // The watcher may have applied the change first; either way the POST
    // is now refused with the old password, or it reloaded.
    assert!(
        r.status == 401 || (r.status == 200 && r.body.contains("web config reloaded")),
        "{r:?}"
    );
    let r = curl(vec!["-u".into(), "admin:second".into(), url.clone()]).await;
    assert_eq!(r.status, 200, "{r:?}");
    let r = curl(vec!["-u".into(), "admin:first".into(), url]).await;
    assert_eq!(r.status, 401, "{r:?}");
    // The probe listener never asks for credentials.
    let probe = e.running.probe_addr.unwrap();
    let r = curl(vec![format!("http://{probe}/livez")]).await;
    assert_eq!(r.status, 200, "{r:?}");
    // After shutdown both listening sockets are closed: refused, not hung.
    let main = e.addr();
    e.running.shutdown().await;
    for addr in [main, probe] {
        assert!(
            tokio::net::TcpStream::connect(addr).await.is_err(),
            "{addr} still accepts after shutdown"
        );
    }
}

/// Start-up refuses a web config that cannot work, naming the problem.
#[test]
fn broken_web_configs_fail_the_start_with_the_reason() {
    let pki = pki::make_pki();
    let cases: [(&str, &str); 5] = [
        (
            "tls_server_config:\n  cert_file: server.pem\n  key_file: server-key.pem\n  min_version: TLS10\n",
            "TLS 1.2 and 1.3 only",
        ),
        (
            "tls_server_config:\n  cert_file: server.pem\n  key_file: server-key.pem\n  cipher_suites: [TLS_RSA_WITH_AES_128_CBC_SHA]\n",
            "is not supported",
        ),
        (
            "tls_server_config:\n  cert_file: server.pem\n  key_file: client-key.pem\n",
            "cert_file and key_file",
        ),
        (
            "tls_server_config:\n  cert_file: server.pem\n  key_file: server-key.pem\n  client_ca_file: ca.pem\n",
            "without a Client Auth Policy",
        ),
        (
            "tls_server_config:\n  cert_file: missing.pem\n  key_file: server-key.pem\n",
            "missing.pem",
        ),
    ];
    // Not a regular file: refused at once, never read (a FIFO would block).
    let fifo = pki.path("fifo.yml");
    assert!(
        Command::new("mkfifo")
            .arg(&fifo)
            .status()
            .unwrap()
            .success()
    );
    let mut a = etcd_readiness_exporter::config::ServeArgs::for_endpoint("http://127.0.0.1:9");
    a.web_config_file = Some(fifo);
    let e = etcd_readiness_exporter::config::ServeConfig::from_args(&a)
        .unwrap_err()
        .to_string();
    assert!(e.contains("FIFO"), "{e}");
    for (text, want) in cases {
        let web = pki.path("bad.yml");
        std::fs::write(&web, text).unwrap();
        let mut a = etcd_readiness_exporter::config::ServeArgs::for_endpoint("http://127.0.0.1:9");
        a.web_config_file = Some(web);
        let e = etcd_readiness_exporter::config::ServeConfig::from_args(&a)
            .unwrap_err()
            .to_string();
        assert!(e.starts_with("--web.config.file: "), "{e}");
        assert!(e.contains(want), "{want:?} not in {e}");
    }
}

/// The flood's TLS client: trusts `ca`, no client certificate.
fn flood_tls(ca: &Path) -> tokio_rustls::TlsConnector {
    use tokio_rustls::rustls::pki_types::CertificateDer;
    use tokio_rustls::rustls::pki_types::pem::PemObject;
    use tokio_rustls::rustls::{ClientConfig, RootCertStore, crypto};
    let mut roots = RootCertStore::empty();
    for c in CertificateDer::pem_file_iter(ca).unwrap() {
        roots.add(c.unwrap()).unwrap();
    }
    let mut config =
        ClientConfig::builder_with_provider(Arc::new(crypto::ring::default_provider()))
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_root_certificates(roots)
            .with_no_client_auth();
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    tokio_rustls::TlsConnector::from(Arc::new(config))
}

/// What the flood's connections got back, by status.
#[derive(Debug, Default)]
struct FloodCount {
    unauthorized: std::sync::atomic::AtomicU64,
    busy: std::sync::atomic::AtomicU64,
    other: std::sync::atomic::AtomicU64,
    reconnects: std::sync::atomic::AtomicU64,
}

/// One keep-alive TLS connection from `source` to `target` sending GET
/// /metrics with a new wrong password for `user` each time, until `stop`.
async fn flood_connection(
    n: usize,
    source: std::net::IpAddr,
    target: SocketAddr,
    tls: tokio_rustls::TlsConnector,
    count: Arc<FloodCount>,
    stop: Arc<std::sync::atomic::AtomicBool>,
) {
    use base64::Engine;
    use std::sync::atomic::Ordering::Relaxed;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut i = 0u64;
    while !stop.load(Relaxed) {
        let conn = async {
            let sock = tokio::net::TcpSocket::new_v4().ok()?;
            sock.bind(SocketAddr::new(source, 0)).ok()?;
            let tcp = sock.connect(target).await.ok()?;
            let name = tokio_rustls::rustls::pki_types::ServerName::try_from("127.0.0.1").ok()?;
            tls.connect(name, tcp).await.ok()
        };
        let Some(mut s) = tokio::time::timeout(Duration::from_secs(10), conn)
            .await
            .ok()
            .flatten()
        else {
            count.reconnects.fetch_add(1, Relaxed);
            tokio::time::sleep(Duration::from_millis(50)).await;
            continue;
        };
        let mut buf = Vec::new();
        'requests: while !stop.load(Relaxed) {
            i += 1;
            let cred = base64::engine::general_purpose::STANDARD.encode(format!(
                "prometheus:wrong-{n}-{i}-{}",
                i.wrapping_mul(2654435761)
            ));
            let req = format!(
                "GET /metrics HTTP/1.1\r\nHost: {target}\r\nAuthorization: Basic {cred}\r\n\r\n"
            );
            if s.write_all(req.as_bytes()).await.is_err() {
                break;
            }
            // Read one response: the head, then Content-Length bytes.
            buf.clear();
            let mut chunk = [0u8; 4096];
            let (head_end, len) = loop {
                if let Some(p) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
                    let head = String::from_utf8_lossy(&buf[..p]).to_ascii_lowercase();
                    let len: usize = head
                        .lines()
                        .find_map(|l| l.strip_prefix("content-length:"))
                        .and_then(|v| v.trim().parse().ok())
                        .unwrap_or(0);
                    break (p + 4, len);
                }
                match tokio::time::timeout(Duration::from_secs(30), s.read(&mut chunk)).await {
                    Ok(Ok(n)) if n > 0 => buf.extend_from_slice(&chunk[..n]),
                    _ => break 'requests,
                }
            };
            while buf.len() < head_end + len {
                match s.read(&mut chunk).await {
                    Ok(n) if n > 0 => buf.extend_from_slice(&chunk[..n]),
                    _ => break 'requests,
                }
            }
            let status = &buf[9..12.min(buf.len())];
            let c = match status {
                b"401" => &count.unauthorized,
                b"429" => &count.busy,
                _ => &count.other,
            };
            c.fetch_add(1, Relaxed);
        }
        count.reconnects.fetch_add(1, Relaxed);
    }
}

/// Issue 21: with TLS and one bcrypt cost-10 user, 200 keep-alive
/// connections sending random wrong passwords made a real Prometheus's
/// `up` go to 0 in 11 of 12 scrapes: wrong attempts evicted the good entry
/// from the one FIFO cache, and the next good request queued behind every
/// waiting bcrypt. Now 120 connections (half from Prometheus's own address
/// 127.0.0.1, half from 127.0.0.2) flood with a new wrong password each
/// time while Prometheus scrapes through TLS + basic auth, and every scrape
/// in the window is up — the flood demonstrably reached the bcrypt queue
/// (401s) and was refused beyond its share (429s).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wrong_password_flood_leaves_prometheus_up() {
    use std::sync::atomic::Ordering::Relaxed;
    let pki = pki::make_pki();
    let web = pki.path("web.yml");
    std::fs::write(
        &web,
        format!(
            "tls_server_config:\n  cert_file: server.pem\n  key_file: server-key.pem\n\
             basic_auth_users:\n  prometheus: '{}'\n",
            bcrypt::hash(PASSWORD, 10).unwrap()
        ),
    )
    .unwrap();
    let e = exporter("http://127.0.0.1:9", &web, false).await;
    let prom = Prom::start(&format!(
        "global:\n  scrape_interval: 2s\n  scrape_timeout: 2s\n\
         scrape_configs:\n  - job_name: ere\n    scheme: https\n    tls_config:\n      \
         ca_file: {}\n    basic_auth:\n      username: prometheus\n      \
         password: '{PASSWORD}'\n    static_configs:\n      - targets: ['{}']\n",
        s(&pki.path("ca.pem")),
        e.addr()
    ));
    prom.wait_scrapes("ere", 2).await;

    let count = Arc::new(FloodCount::default());
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let tls = flood_tls(&pki.path("ca.pem"));
    let mut flood = Vec::new();
    for n in 0..120 {
        let source: std::net::IpAddr = if n % 2 == 0 { "127.0.0.1" } else { "127.0.0.2" }
            .parse()
            .unwrap();
        flood.push(tokio::spawn(flood_connection(
            n,
            source,
            e.addr(),
            tls.clone(),
            count.clone(),
            stop.clone(),
        )));
    }
    // The flood is on once wrong passwords are being refused both ways.
    until_some("the flood to get 401s and 429s", WAIT, || async {
        (count.unauthorized.load(Relaxed) > 0 && count.busy.load(Relaxed) > 0).then_some(())
    })
    .await;
    let flood_on = Instant::now();
    // The server tells the two source addresses apart: each holds its own
    // share (2) of the bcrypt queue, so more than one share is taken.
    let web_state = e.running.web.clone().unwrap();
    until_some(
        "both addresses' shares of the bcrypt queue in use",
        WAIT,
        || async {
            (web_state.auth().pending()
                > etcd_readiness_exporter::web::auth::MAX_PENDING_PER_CLIENT)
                .then_some(())
        },
    )
    .await;
    prom.wait_scrapes("ere", 10).await;
    let window = flood_on.elapsed().as_secs() + 1;
    let (unauthorized, busy) = (count.unauthorized.load(Relaxed), count.busy.load(Relaxed));
    let scrapes = prom
        .query(&format!("count_over_time(up{{job=\"ere\"}}[{window}s])"))
        .await;
    let lowest = prom
        .query(&format!("min_over_time(up{{job=\"ere\"}}[{window}s])"))
        .await;
    stop.store(true, Relaxed);
    for f in flood {
        let _ = tokio::time::timeout(Duration::from_secs(40), f).await;
    }
    assert!(
        scrapes.is_some_and(|n| n >= 10.0),
        "scrapes in the window: {scrapes:?}"
    );
    assert_eq!(
        lowest,
        Some(1.0),
        "a scrape failed under the flood ({window} s, {scrapes:?} scrapes; flood got \
         {unauthorized} 401s, {busy} 429s; {count:?}): {:?}",
        prom.target("ere").await
    );
    // The wrong passwords did cost bcrypts (401s after a check; a debug
    // build's cost-10 bcrypt takes over a second), and the queue refused
    // what was beyond the flood's share (429s, checked before the window).
    assert!(unauthorized >= 3, "{count:?}");
    assert_eq!(count.other.load(Relaxed), 0, "{count:?}");
    assert_eq!(web_state.auth().cached().0, 1, "the one good credential");
    eprintln!(
        "flood of 120 connections for {window} s: up=1 in all {scrapes:?} scrapes; \
         {unauthorized} 401s, {busy} 429s"
    );
    drop(prom);
    e.running.shutdown().await;
}
