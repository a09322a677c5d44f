//! Both address families: with the component's listen flags (`:PORT`, here
//! `:0`), the exporter answers `/readyz`, `/livez` and the metrics on
//! 127.0.0.1 and on [::1], pointed at a real etcd that listens on [::1]
//! only (`http://[::1]:PORT`), and becomes ready.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::time::Duration;

use etcd_readiness_exporter::cmd::localcluster::http_get;
use etcd_readiness_testkit::etcd::Etcd;
use etcd_readiness_testkit::exporter::Exporter;
use etcd_readiness_testkit::wait::poll;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bare_ports_answer_on_ipv4_and_ipv6_and_an_ipv6_etcd_makes_it_ready() {
    let etcd = Etcd::start_with(|b| b.ipv6()).await;
    assert!(
        etcd.client_url.starts_with("http://[::1]:"),
        "{}",
        etcd.client_url
    );
    let metrics_url = etcd.metrics_url.clone();
    let e = Exporter::start(&etcd.client_url, move |a| {
        // The sidecar component's flags, on free ports.
        a.web_listen_address = ":0".into();
        a.web_probe_listen_address = Some(":0".into());
        a.etcd_metrics_url = Some(metrics_url.into());
    })
    .await;
    let main = e.addr().port();
    let probe = e.running.probe_addr.expect("probe listener").port();
    let v4 = IpAddr::V4(Ipv4Addr::LOCALHOST);
    let v6 = IpAddr::V6(Ipv6Addr::LOCALHOST);
    let ready = poll(
        Duration::from_secs(20),
        Duration::from_millis(100),
        || async {
            match http_get(SocketAddr::new(v6, probe), "/readyz?verbose", None).await {
                Ok((200, _, body)) => Ok(body),
                other => Err(format!("{other:?}")),
            }
        },
    )
    .await;
    if let Err(last) = &ready {
        e.explain("the exporter never became ready against etcd on [::1]")
            .await;
        panic!("not ready on [::1]:{probe}: {last}");
    }
    for ip in [v4, v6] {
        for (port, path, want) in [
            (main, "/readyz", 200),
            (main, "/livez", 200),
            (main, "/metrics", 200),
            (probe, "/readyz", 200),
            (probe, "/livez", 200),
        ] {
            let addr = SocketAddr::new(ip, port);
            let (status, _, body) = http_get(addr, path, None)
                .await
                .unwrap_or_else(|err| panic!("GET {path} on {addr}: {err}"));
            assert_eq!(status, want, "GET {path} on {addr}: {body}");
            if path == "/metrics" {
                assert!(body.contains("etcd_readiness_ready 1"), "{body}");
            }
        }
    }
    drop(e);
    drop(etcd);
}
