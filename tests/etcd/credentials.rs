//! Credentials that rotate in place: the exporter's `--etcd.cacert`,
//! `--etcd.cert` and `--etcd.key` in a Secret-style volume (a `..data`
//! swap), etcd restarted trusting only the new CA. The exporter picks the
//! new files up for its next connection, without a restart, keeps the last
//! good pair while a pair does not match, and says "certificate" while etcd
//! refuses the old one.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use etcd_readiness_testkit::atomic_writer::AtomicWriterVolume;
use etcd_readiness_testkit::etcd::EtcdCluster;
use etcd_readiness_testkit::etcd::ServerTls;
use etcd_readiness_testkit::exporter::{Exporter, metric_line};
use etcd_readiness_testkit::pki::{self, Pki};
use etcd_readiness_testkit::wait::poll;

const READY: Duration = Duration::from_secs(30);
/// How long after etcd serves the new certificate the exporter may take.
const AFTER_ROTATION: Duration = Duration::from_secs(5);
const MISMATCH: &str = "etcd_readiness_tls_certificate_problems_total{files=\"etcd\",certificate=\"client\",problem=\"key_mismatch\"} 1";

fn pem(pki: &Pki, f: &str) -> String {
    std::fs::read_to_string(pki.path(f)).unwrap()
}

/// The client's Secret: `ca.crt`, `tls.crt`, `tls.key` of `pki`.
fn client_keys(pki: &Pki) -> [(&'static str, String); 3] {
    [
        ("ca.crt", pem(pki, "ca.pem")),
        ("tls.crt", pem(pki, "client.pem")),
        ("tls.key", pem(pki, "client-key.pem")),
    ]
}

fn update(volume: &mut AtomicWriterVolume, keys: &[(&'static str, String)]) {
    let keys: Vec<(&str, &str)> = keys.iter().map(|(k, v)| (*k, v.as_str())).collect();
    volume.update_keys(&keys).unwrap();
}

/// etcd's own files, rewritten in place from `pki` before a restart.
fn serve_from(dir: &Path, pki: &Pki) -> ServerTls {
    serve_trusting(dir, pki, pki)
}

/// etcd serving `pki`'s server certificate, trusting only `clients`' CA.
fn serve_trusting(dir: &Path, pki: &Pki, clients: &Pki) -> ServerTls {
    let tls = ServerTls {
        ca: dir.join("ca.pem"),
        cert: dir.join("server.pem"),
        key: dir.join("server-key.pem"),
    };
    std::fs::write(&tls.ca, pem(clients, "ca.pem")).unwrap();
    std::fs::write(&tls.cert, pem(pki, "server.pem")).unwrap();
    std::fs::write(&tls.key, pem(pki, "server-key.pem")).unwrap();
    tls
}

/// Wait until etcd answers a client holding `pki`'s certificate: the
/// moment it serves the new one.
async fn wait_served_with(endpoint: &str, pki: &Pki, cluster: &EtcdCluster) -> Instant {
    let tls = etcd_client::TlsOptions::new()
        .ca_certificate(etcd_client::Certificate::from_pem(pem(pki, "ca.pem")))
        .identity(etcd_client::Identity::from_pem(
            pem(pki, "client.pem"),
            pem(pki, "client-key.pem"),
        ));
    let opts = etcd_client::ConnectOptions::new()
        .with_timeout(Duration::from_secs(1))
        .with_tls(tls);
    let served = poll(READY, Duration::from_millis(50), || {
        let opts = opts.clone();
        async move {
            let mut c = etcd_client::Client::connect([endpoint], Some(opts))
                .await
                .map_err(|e| e.to_string())?;
            c.status().await.map(|_| ()).map_err(|e| e.to_string())
        }
    })
    .await;
    if let Err(e) = served {
        panic!(
            "etcd never served the new certificate: {e}\n{}",
            cluster.log(0)
        );
    }
    Instant::now()
}

async fn ready_within(e: &Exporter, since: Instant, what: &str) {
    let left = AFTER_ROTATION.saturating_sub(since.elapsed());
    let r = e.wait_for("/readyz", 200, left).await;
    assert_eq!(
        r.status, 200,
        "not ready within {AFTER_ROTATION:?} of {what}: {}",
        r.body
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rotated_client_certificate_and_ca_are_used_without_a_restart() {
    let (one, two, three) = (pki::make_pki(), pki::make_pki(), pki::make_pki());
    let etcd_dir = tempfile::tempdir().unwrap();
    let mut cluster = EtcdCluster::builder(1)
        .tls(serve_from(etcd_dir.path(), &one))
        .start();
    let endpoint = cluster.endpoint(0);
    let secret = tempfile::tempdir().unwrap();
    let keys = client_keys(&one);
    let initial: Vec<(&str, &str)> = keys.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let mut volume = AtomicWriterVolume::create_keys(secret.path(), &initial).unwrap();
    let path = |k: &str| -> PathBuf { volume.path_of(k) };
    let (ca, cert, key) = (path("ca.crt"), path("tls.crt"), path("tls.key"));
    let e = Exporter::start(&endpoint, |a| {
        a.etcd_cacert = Some(ca);
        a.etcd_cert = Some(cert);
        a.etcd_key = Some(key);
    })
    .await;
    let r = e.wait_for("/readyz", 200, READY).await;
    assert_eq!(r.status, 200, "{}\n{}", r.body, cluster.log(0));

    // The kubelet swaps the Secret first, then etcd restarts trusting only
    // the new CA.
    update(&mut volume, &client_keys(&two));
    serve_from(etcd_dir.path(), &two);
    cluster.restart(0);
    let served = wait_served_with(&endpoint, &two, &cluster).await;
    ready_within(&e, served, "etcd serving the new certificate").await;

    // A pair half-written (the new certificate, the old key) is not used:
    // the exporter stays ready on the last good pair, and counts it.
    let mut half = client_keys(&two);
    half[1].1 = pem(&three, "client.pem");
    update(&mut volume, &half);
    let counted = e
        .wait_until("/metrics", READY, |r| r.body.lines().any(|l| l == MISMATCH))
        .await;
    assert!(
        counted.body.lines().any(|l| l == MISMATCH),
        "{}",
        metric_line(
            &counted.body,
            "etcd_readiness_tls_certificate_problems_total"
        )
    );
    assert_eq!(e.get("/readyz").await.status, 200);

    // etcd trusts only the new CA for its clients, and still serves a
    // certificate the exporter trusts: it refuses the exporter's client
    // certificate after the handshake, which the explanation names.
    serve_trusting(etcd_dir.path(), &two, &three);
    cluster.restart(0);
    let refused = e
        .wait_until("/readyz?verbose", READY, |r| {
            r.status == 503 && r.body.contains("client certificate")
        })
        .await;
    println!("client certificate refused: {}", refused.body);
    assert!(
        refused.status == 503 && refused.body.contains("client certificate"),
        "a refused client certificate is not named: {}",
        refused.body
    );

    // etcd's new server certificate first this time: while the exporter
    // cannot verify it, the explanation says so; then the Secret follows.
    serve_from(etcd_dir.path(), &three);
    cluster.restart(0);
    let refused = e
        .wait_until("/readyz?verbose", READY, |r| {
            r.status == 503 && r.body.contains("certificate")
        })
        .await;
    assert!(
        refused.status == 503 && refused.body.contains("certificate"),
        "a refused certificate is not named: {}",
        refused.body
    );
    println!("refused: {}", refused.body);
    let served = wait_served_with(&endpoint, &three, &cluster).await;
    update(&mut volume, &client_keys(&three));
    ready_within(&e, served.max(Instant::now()), "the Secret's update").await;
}
