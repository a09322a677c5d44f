//! The wrong thing at `--etcd.endpoint` is named, not reported as "h2
//! protocol error" or "transport error": a real HTTP/1 server (Python's
//! http.server), a real etcd serving TLS spoken to in plain text, and a real
//! plain-text etcd spoken to over TLS. Each time the exporter stays alive,
//! `/readyz` answers 503 with the sentence in the explanation.

use std::process::{Command, Stdio};
use std::time::Duration;

use etcd_readiness_testkit::etcd::EtcdCluster;
use etcd_readiness_testkit::exporter::Exporter;
use etcd_readiness_testkit::pki;
use etcd_readiness_testkit::ports::free_tcp_port;
use etcd_readiness_testkit::process::ChildGuard;
use etcd_readiness_testkit::wait::{poll, wait_until};

const WAIT: Duration = Duration::from_secs(20);

/// Wait until the `leader` signal failed with an error containing `text`.
async fn leader_error(e: &Exporter, text: &str) -> String {
    poll(WAIT, Duration::from_millis(100), || async move {
        let s = e.signal("leader").await;
        let err = s["last_error"].as_str().unwrap_or_default().to_string();
        if err.contains(text) { Ok(err) } else { Err(s) }
    })
    .await
    .unwrap_or_else(|s| panic!("timed out waiting for `{text}`: {s}"))
}

async fn not_ready_saying(e: &Exporter, text: &str) {
    let r = e.wait_for("/readyz?verbose", 503, WAIT).await;
    assert_eq!(r.status, 503, "{}", r.body);
    let l = e.get("/livez").await;
    assert_eq!(l.status, 200, "{}", l.body);
    // The explanation may lag one round behind the signal; wait for it.
    let said = poll(WAIT, Duration::from_millis(100), || async move {
        let r = e.get("/readyz?verbose").await;
        if r.body.contains(text) {
            Ok(())
        } else {
            Err(r.body)
        }
    })
    .await;
    if let Err(body) = said {
        panic!("/readyz never said `{text}`:\n{body}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_http1_server_at_the_endpoint_is_named() {
    let port = free_tcp_port();
    let child = Command::new("python3")
        .args([
            "-m",
            "http.server",
            "--bind",
            "127.0.0.1",
            &port.to_string(),
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("python3");
    let _guard = ChildGuard::new(child, "python3 http.server");
    wait_until("http.server to listen", WAIT, || async move {
        tokio::net::TcpStream::connect(("127.0.0.1", port))
            .await
            .is_ok()
    })
    .await;
    let endpoint = format!("http://127.0.0.1:{port}");
    let e = Exporter::start(&endpoint, |_| {}).await;
    let err = leader_error(&e, "the endpoint answered HTTP/1.x, not gRPC").await;
    println!("HTTP/1: {err}");
    assert!(
        err.contains(&format!("is {endpoint} etcd's client port?")),
        "{err}"
    );
    not_ready_saying(&e, "not gRPC").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn plain_text_to_a_tls_etcd_is_named() {
    let pki = pki::make_pki();
    let cluster = EtcdCluster::builder(1).tls(pki.etcd_server_tls()).start();
    let endpoint = cluster.endpoint(0).replace("https://", "http://");
    let e = Exporter::start(&endpoint, |_| {}).await;
    let err = leader_error(&e, "plain-text to a TLS port").await;
    println!("plain to TLS: {err}");
    assert!(err.contains("use https:// and --etcd.cacert"), "{err}");
    not_ready_saying(&e, "plain-text to a TLS port").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_to_a_plain_text_etcd_is_named() {
    let pki = pki::make_pki();
    let cluster = EtcdCluster::builder(1).start();
    let endpoint = cluster.endpoint(0).replace("http://", "https://");
    let ca = pki.path("ca.pem");
    let e = Exporter::start(&endpoint, move |a| a.etcd_cacert = Some(ca)).await;
    let err = leader_error(&e, "TLS handshake to a plain-text endpoint").await;
    println!("TLS to plain: {err}");
    assert!(err.contains("use http://"), "{err}");
    not_ready_saying(&e, "TLS handshake to a plain-text endpoint").await;
}
