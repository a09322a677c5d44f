//! Hot reload through the real `serve` pipeline: the policy is mounted like a
//! ConfigMap volume (kubelet AtomicWriter swaps) next to a real etcd member.
//! A bad edit never replaces the good policy, `/readyz` stays 200 throughout,
//! `/policy` and the metrics say failed then succeeded, and `POST /-/reload`
//! answers as documented. The `--config` scrape sources reload the same way:
//! a swap moves a source to another real HTTP endpoint, a broken file or one
//! that needs a restart is kept out.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use etcd_readiness_testkit::atomic_writer::AtomicWriterVolume;
use etcd_readiness_testkit::etcd::EtcdCluster;
use etcd_readiness_testkit::exporter;
use etcd_readiness_testkit::exporter::Exporter;
use etcd_readiness_testkit::wait::poll;

const WAIT: Duration = Duration::from_secs(20);
const V1: &str = "check leader: leader\ncheck linearizable_read: qget_ms < 1000\n";
const BAD: &str = "check leader: leader\ncheck linearizable_read: qget_mss < 1000\n";
const V2: &str =
    "check leader: leader\ncheck linearizable_read: qget_ms < 2000\nwarn nospace: !alarm_nospace\n";

// Long because: one exporter through a sequence of ConfigMap swaps; the absence of a blip is judged over the whole sequence.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn configmap_swaps_bad_then_good_without_a_readiness_blip() {
    let cluster = EtcdCluster::builder(1).start();
    let dir = tempfile::tempdir().unwrap();
    let mut volume = AtomicWriterVolume::create(dir.path(), "policy", V1).unwrap();
    let path = volume.path();
    let e = Arc::new(Exporter::start(&cluster.endpoint(0), move |a| a.policy = Some(path)).await);
    let r = e.wait_for("/readyz", 200, WAIT).await;
    assert_eq!(r.status, 200, "{}", r.body);
    let since = |rep: &serde_json::Value, name: &str| {
        rep["checks"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["name"] == name)
            .unwrap()["since"]
            .as_f64()
            .unwrap()
    };
    let before =
        serde_json::from_str::<serde_json::Value>(&e.get("/readyz?format=json").await.body)
            .unwrap();

    // Watch /readyz in the background for the whole reload sequence.
    let stop = Arc::new(AtomicBool::new(false));
    let not_ok = Arc::new(AtomicUsize::new(0));
    let probes = Arc::new(AtomicUsize::new(0));
    let watcher = {
        let (e, stop, not_ok, probes) = (e.clone(), stop.clone(), not_ok.clone(), probes.clone());
        tokio::spawn(async move {
            while !stop.load(Ordering::Relaxed) {
                if e.get("/readyz").await.status != 200 {
                    not_ok.fetch_add(1, Ordering::Relaxed);
                }
                probes.fetch_add(1, Ordering::Relaxed);
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        })
    };

    // A typo: the old policy stays; /policy and the metrics say why.
    let good_sha = e.policy_json().await["sha256"]
        .as_str()
        .unwrap()
        .to_string();
    volume.update(BAD).unwrap();
    let p = e
        .wait_policy("the reload error", WAIT, |p| {
            p["last_reload_error"].is_string()
        })
        .await;
    let err = p["last_reload_error"].as_str().unwrap();
    assert!(err.contains(":2:26: unknown signal `qget_mss`"), "{err}");
    assert_eq!(
        p["sha256"],
        good_sha.as_str(),
        "the bad policy must not be in force"
    );
    let scrape = e.get("/metrics").await.body;
    assert_eq!(
        exporter::metric_line(&scrape, "etcd_readiness_policy_last_reload_successful "),
        "etcd_readiness_policy_last_reload_successful 0"
    );
    assert!(
        scrape.contains("etcd_readiness_policy_reloads_total{result=\"failure\"} 1"),
        "{scrape}"
    );
    let post = exporter::post(e.addr(), "/-/reload").await;
    assert_eq!(post.0, 500);
    assert!(
        post.1.contains("^^^^^^^^ not a signal or a `let`"),
        "{}",
        post.1
    );

    // The fix, which also changes one check: applied, error cleared, and the
    // unchanged check keeps its since-when.
    volume.update(V2).unwrap();
    let p = e
        .wait_policy("the new policy", WAIT, |p| {
            p["sha256"] != good_sha.as_str() && p["last_reload_error"].is_null()
        })
        .await;
    assert!(p["text"].as_str().unwrap().contains("qget_ms < 2000"));
    let scrape = e.get("/metrics").await.body;
    assert_eq!(
        exporter::metric_line(&scrape, "etcd_readiness_policy_last_reload_successful "),
        "etcd_readiness_policy_last_reload_successful 1"
    );
    assert!(
        scrape.contains("etcd_readiness_policy_reloads_total{result=\"success\"} 1"),
        "{scrape}"
    );
    let after = serde_json::from_str::<serde_json::Value>(&e.get("/readyz?format=json").await.body)
        .unwrap();
    // `since` is each evaluation's wall time less the monotonic time in the
    // state: two clocks read one after the other, milliseconds apart on a
    // loaded machine. A reset would have moved it to the reload, two
    // debounces (200 ms) and more after `before`, and past its loaded_at.
    let (was, is) = (since(&before, "leader"), since(&after, "leader"));
    let reloaded = p["loaded_at"].as_f64().unwrap();
    assert!(
        (is - was).abs() <= 0.05 && is < reloaded,
        "unchanged check kept its state: since {was} then {is}, policy loaded at {reloaded}"
    );
    let post = exporter::post(e.addr(), "/-/reload").await;
    assert_eq!(
        post,
        (
            200,
            format!(
                "policy unchanged (sha256 {})\n",
                p["sha256"].as_str().unwrap()
            )
        )
    );

    stop.store(true, Ordering::Relaxed);
    watcher.await.unwrap();
    assert!(
        probes.load(Ordering::Relaxed) > 5,
        "the background prober ran"
    );
    assert_eq!(
        not_ok.load(Ordering::Relaxed),
        0,
        "/readyz left 200 during the reloads"
    );
}

/// A Prometheus endpoint on loopback serving `probe_value VALUE`.
async fn endpoint(value: u32) -> (std::net::SocketAddr, tokio::task::JoinHandle<()>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let app = axum::Router::new().route(
        "/metrics",
        axum::routing::get(move || async move {
            format!("# TYPE probe_value gauge\nprobe_value {value}\n")
        }),
    );
    let task = tokio::spawn(async move {
        axum::serve(listener, app).await.unwrap();
    });
    (addr, task)
}

/// The exporter's metrics once they contain `line` (the test fails, with
/// the last scrape, if they do not within `WAIT`).
async fn wait_scrape(e: &Exporter, line: &str) -> String {
    let r = e
        .wait_until("/metrics", WAIT, |r| r.body.contains(line))
        .await;
    assert!(
        r.body.contains(line),
        "no `{line}` within {WAIT:?}: {}",
        r.body
    );
    r.body
}

fn scrape_config(addr: std::net::SocketAddr, extra_signal: bool) -> String {
    let extra = if extra_signal {
        "      other: {metric: probe_value}\n"
    } else {
        ""
    };
    format!(
        "sources:\n  - name: target\n    url: http://{addr}/metrics\n    interval: 100ms\n    timeout: 100ms\n    signals:\n      probe_value: {{metric: probe_value}}\n{extra}"
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_configmap_swap_of_config_moves_a_scrape_source_and_bad_files_are_kept_out() {
    let (a, _a) = endpoint(1).await;
    let (b, _b) = endpoint(2).await;
    let dir = tempfile::tempdir().unwrap();
    let mut volume =
        AtomicWriterVolume::create(dir.path(), "config", &scrape_config(a, false)).unwrap();
    let path = volume.path();
    // No etcd: only the scrape source matters here.
    let e = Exporter::start("http://127.0.0.1:9", move |args| {
        args.config = Some(path);
    })
    .await;
    let wait_value = |want: f64, what: &'static str| {
        let e = &e;
        async move {
            poll(WAIT, Duration::from_millis(50), || async move {
                let s = e.signal("probe_value").await;
                if s["value"] == want { Ok(s) } else { Err(s) }
            })
            .await
            .unwrap_or_else(|s| panic!("timed out waiting for {what}: {s}"))
        }
    };
    let metric = |scrape: &str, name: &str| exporter::metric_line(scrape, name);
    wait_value(1.0, "the first endpoint's value").await;
    let scrape = e.get("/metrics").await.body;
    assert_eq!(
        metric(
            &scrape,
            "etcd_readiness_scrape_config_last_reload_successful "
        ),
        "etcd_readiness_scrape_config_last_reload_successful 1"
    );

    // A broken file: refused, the source keeps sampling the first endpoint.
    volume
        .update("sources:\n  - name: target\n    url: [\n")
        .unwrap();
    let scrape = wait_scrape(&e, "etcd_readiness_scrape_config_last_reload_successful 0").await;
    assert!(
        scrape.contains("etcd_readiness_scrape_config_reloads_total{result=\"failure\"} 1"),
        "{scrape}"
    );
    let post = exporter::post(e.addr(), "/-/reload").await;
    assert_eq!(post.0, 500, "{}", post.1);
    assert!(
        post.1.starts_with(
            "scrape config reload failed; the previous scrape sources stay in force\n"
        ),
        "{}",
        post.1
    );
    assert_eq!(e.signal("probe_value").await["value"], 1.0);

    // A new signal needs a restart (the catalogue is fixed): refused, named.
    volume.update(&scrape_config(b, true)).unwrap();
    wait_scrape(
        &e,
        "etcd_readiness_scrape_config_reloads_total{result=\"failure\"} 3",
    )
    .await;
    let post = exporter::post(e.addr(), "/-/reload").await;
    assert_eq!(post.0, 500, "{}", post.1);
    assert!(
        post.1
            .contains("adding signal `other` to source `target` needs a restart"),
        "{}",
        post.1
    );
    assert_eq!(e.signal("probe_value").await["value"], 1.0);

    // The fix moves the source to the second endpoint.
    volume.update(&scrape_config(b, false)).unwrap();
    wait_value(2.0, "the second endpoint's value").await;
    let scrape = wait_scrape(&e, "etcd_readiness_scrape_config_last_reload_successful 1").await;
    assert!(
        scrape.contains("etcd_readiness_scrape_config_reloads_total{result=\"success\"} 1"),
        "{scrape}"
    );
    assert!(
        scrape.contains("etcd_readiness_scrape_config_reloads_total{result=\"failure\"} 4"),
        "{scrape}"
    );
    let post = exporter::post(e.addr(), "/-/reload").await;
    let sha = hex::encode(<sha2::Sha256 as sha2::Digest>::digest(
        scrape_config(b, false).as_bytes(),
    ));
    assert_eq!(
        post,
        (200, format!("scrape config unchanged (sha256 {sha})\n"))
    );
    e.running.shutdown().await;
}
