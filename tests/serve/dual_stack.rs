//! Both address families: with the component's listen flags (`:PORT`, here
//! `:0`), the exporter answers `/readyz`, `/livez` and the metrics on
//! 127.0.0.1 and on [::1], pointed at a real etcd that listens on [::1]
//! only (`http://[::1]:PORT`), and becomes ready.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::time::Duration;

use etcd_readiness_exporter::outside::http_client;
use etcd_readiness_testkit::etcd::Etcd;
use etcd_readiness_testkit::exporter::Exporter;
use etcd_readiness_testkit::wait::poll;

/// How long one GET may take: the exporter answers from its last verdict.
const ANSWER_WITHIN: Duration = Duration::from_secs(5);

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
            let addr = SocketAddr::new(v6, probe);
            match http_client::get_at(addr, "/readyz?verbose", None, ANSWER_WITHIN).await {
                Ok(a) if a.status == 200 => Ok(a.body),
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
            let answer = http_client::get_at(addr, path, None, ANSWER_WITHIN)
                .await
                .unwrap_or_else(|err| panic!("GET {path} on {addr}: {err}"));
            let (status, body) = (answer.status.as_u16(), answer.body);
            assert_eq!(status, want, "GET {path} on {addr}: {body}");
            if path == "/metrics" {
                assert!(body.contains("etcd_readiness_ready 1"), "{body}");
            }
        }
    }
    drop(e);
    drop(etcd);
}
