//! The backup sidecar's TLS files rotate in place: `--backup.cacert`,
//! `--backup.cert` and `--backup.key` in a Secret-style volume (a `..data`
//! swap), the sidecar restarted on its port with certificates of a new CA
//! that trusts only the new client certificate. The exporter reads the
//! sidecar again with the new files, without a restart; meanwhile the
//! refusal names the certificate.

use std::time::{Duration, Instant, SystemTime};

use etcd_readiness_testkit::atomic_writer::AtomicWriterVolume;
use etcd_readiness_testkit::backup::Sidecar;
use etcd_readiness_testkit::etcd::Etcd;
use etcd_readiness_testkit::exporter::Exporter;
use etcd_readiness_testkit::pki::{self, Pki};

const READY: Duration = Duration::from_secs(30);
const AFTER_ROTATION: Duration = Duration::from_secs(5);

fn pem(pki: &Pki, f: &str) -> String {
    std::fs::read_to_string(pki.path(f)).unwrap()
}

fn keys(pki: &Pki) -> Vec<(&'static str, String)> {
    vec![
        ("ca.crt", pem(pki, "ca.pem")),
        ("tls.crt", pem(pki, "client.pem")),
        ("tls.key", pem(pki, "client-key.pem")),
    ]
}

fn as_refs<'a>(keys: &'a [(&'static str, String)]) -> Vec<(&'a str, &'a str)> {
    keys.iter().map(|(k, v)| (*k, v.as_str())).collect()
}

async fn sidecar(addr: std::net::SocketAddr, pki: &Pki) -> Sidecar {
    let s = Sidecar::start_tls_on(
        addr,
        &pki.path("server.pem"),
        &pki.path("server-key.pem"),
        &pki.path("ca.pem"),
    )
    .await
    .expect("the sidecar's port is free again");
    let now = SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .unwrap()
        .as_secs_f64();
    s.set(|s| {
        s.full_revision = 10;
        s.full_timestamp = now;
    });
    s
}

/// Wait until `backup_up` reads `up` (or the last error names `says`).
async fn backup_up(
    e: &Exporter,
    within: Duration,
    cond: impl Fn(&serde_json::Value) -> bool,
) -> serde_json::Value {
    let r = e
        .wait_until("/signals", within, |r| {
            let v: serde_json::Value = serde_json::from_str(&r.body).unwrap_or_default();
            v.as_array()
                .and_then(|a| a.iter().find(|s| s["name"] == "snapshot_revision"))
                .is_some_and(&cond)
        })
        .await;
    let v: serde_json::Value = serde_json::from_str(&r.body).unwrap();
    v.as_array()
        .unwrap()
        .iter()
        .find(|s| s["name"] == "snapshot_revision")
        .cloned()
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rotated_backup_tls_files_are_used_without_a_restart() {
    let etcd = Etcd::start().await;
    let (one, two) = (pki::make_pki(), pki::make_pki());
    let first = sidecar("127.0.0.1:0".parse().unwrap(), &one).await;
    let addr: std::net::SocketAddr = first.url.trim_start_matches("https://").parse().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let initial = keys(&one);
    let mut volume = AtomicWriterVolume::create_keys(dir.path(), &as_refs(&initial)).unwrap();
    let (ca, cert, key) = (
        volume.path_of("ca.crt"),
        volume.path_of("tls.crt"),
        volume.path_of("tls.key"),
    );
    let url = first.url.clone();
    let e = Exporter::start(&etcd.client_url, |a| {
        a.backup_url = Some(url.into());
        a.backup_cacert = Some(ca);
        a.backup_cert = Some(cert);
        a.backup_key = Some(key);
    })
    .await;
    let known = |s: &serde_json::Value| s["value"] == 10.0;
    let s = backup_up(&e, READY, known).await;
    assert!(known(&s), "{s}");

    // The sidecar restarts first with a new CA: the refusal names the
    // certificate.
    first.stop().await;
    drop(first);
    let _second = sidecar(addr, &two).await;
    let named = |s: &serde_json::Value| {
        s["last_error"]
            .as_str()
            .is_some_and(|e| e.contains("certificate"))
    };
    let s = backup_up(&e, READY, named).await;
    assert!(named(&s), "{s}");
    println!("refused: {}", s["last_error"]);

    // Then the Secret: read again within 5 s.
    let rotated = keys(&two);
    volume.update_keys(&as_refs(&rotated)).unwrap();
    let since = Instant::now();
    let s = backup_up(&e, AFTER_ROTATION, known).await;
    assert!(
        known(&s),
        "not read again within {AFTER_ROTATION:?} ({:?}): {s}",
        since.elapsed()
    );
    let m = e.get("/metrics").await.body;
    assert!(
        m.contains("etcd_readiness_backup_tls_files_reloads_total{result=\"success\"} 1"),
        "{}",
        m.lines()
            .filter(|l| l.contains("tls"))
            .collect::<Vec<_>>()
            .join("\n")
    );
}

/// The same for a `--config` scrape source over mutual TLS: its `tls` files
/// are part of the scrape config, a change of their content restarts the
/// source with the new files.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_scrape_sources_rotated_tls_files_restart_it_with_them() {
    let etcd = Etcd::start().await;
    let (one, two) = (pki::make_pki(), pki::make_pki());
    let first = sidecar("127.0.0.1:0".parse().unwrap(), &one).await;
    let addr: std::net::SocketAddr = first.url.trim_start_matches("https://").parse().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let tls_dir = dir.path().join("tls");
    std::fs::create_dir(&tls_dir).unwrap();
    let initial = keys(&one);
    let mut volume = AtomicWriterVolume::create_keys(&tls_dir, &as_refs(&initial)).unwrap();
    let config = dir.path().join("config.yml");
    std::fs::write(
        &config,
        format!(
            "sources:\n  - name: sidecar\n    url: {}/metrics\n    interval: 100ms\n    timeout: 100ms\n    tls:\n      ca: {}\n      cert: {}\n      key: {}\n    signals:\n      full_rev: {{metric: etcdbr_snapshot_latest_revision, labels: {{kind: Full}}}}\n",
            first.url,
            volume.path_of("ca.crt").display(),
            volume.path_of("tls.crt").display(),
            volume.path_of("tls.key").display(),
        ),
    )
    .unwrap();
    let e = Exporter::start(&etcd.client_url, |a| a.config = Some(config)).await;
    let signal = |r: &etcd_readiness_testkit::exporter::Resp| -> serde_json::Value {
        let v: serde_json::Value = serde_json::from_str(&r.body).unwrap_or_default();
        v.as_array()
            .and_then(|a| a.iter().find(|s| s["name"] == "full_rev").cloned())
            .unwrap_or_default()
    };
    let r = e
        .wait_until("/signals", READY, |r| signal(r)["value"] == 10.0)
        .await;
    assert_eq!(signal(&r)["value"], 10.0, "{}", r.body);

    first.stop().await;
    drop(first);
    let _second = sidecar(addr, &two).await;
    let r = e
        .wait_until("/signals", READY, |r| {
            signal(r)["last_error"]
                .as_str()
                .is_some_and(|e| e.contains("certificate"))
        })
        .await;
    assert!(
        signal(&r)["last_error"]
            .as_str()
            .is_some_and(|e| e.contains("certificate")),
        "{}",
        r.body
    );

    let rotated = keys(&two);
    volume.update_keys(&as_refs(&rotated)).unwrap();
    let r = e
        .wait_until("/signals", AFTER_ROTATION, |r| {
            signal(r)["value"] == 10.0 && signal(r)["last_error"].is_null()
        })
        .await;
    assert!(
        signal(&r)["last_error"].is_null(),
        "not read again within {AFTER_ROTATION:?}: {}",
        r.body
    );
}
