//! Supervision through the real `serve` pipeline next to a real etcd member:
//! the exporter's tasks are registered with its supervisor, and a task that
//! panics under that supervisor is logged, counted in
//! `etcd_readiness_task_restarts_total{task}`, shown on `/livez?verbose`
//! and runs again, while `/readyz` and `/livez` keep answering. (No input
//! reaches a panic in the samplers any more, see hostile_sources.rs; the
//! panicking task here is the test's own, run by the exporter's supervisor.)

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use etcd_readiness_testkit::etcd::Etcd;
use etcd_readiness_testkit::exporter::Exporter;
use etcd_readiness_testkit::wait::wait_until;

const WAIT: Duration = Duration::from_secs(20);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_panicking_task_is_restarted_counted_and_shown_on_livez() {
    let etcd = Etcd::start().await;
    let e = Exporter::start(&etcd.client_url, |_| {}).await;
    assert_eq!(e.wait_for("/readyz", 200, WAIT).await.status, 200);

    let supervisor = e.running.runtime.supervisor.clone();
    let mut names: Vec<String> = supervisor.tasks().into_iter().map(|t| t.name).collect();
    names.sort();
    // The member's own metrics are read by default (its client port's /metrics).
    assert_eq!(
        names,
        [
            "engine",
            "http:main",
            "sampler:etcd",
            "sampler:etcd_metrics"
        ]
    );

    // Panics on its first two runs, then keeps running.
    let runs = Arc::new(AtomicU32::new(0));
    let r = runs.clone();
    let _task = supervisor.spawn("sampler:hostile", move || {
        let n = r.fetch_add(1, Ordering::SeqCst);
        async move {
            if n < 2 {
                panic!("timestamp 1e19 out of range (run {n})");
            }
            std::future::pending::<()>().await;
        }
    });
    wait_until("the task to be restarted twice", WAIT, || {
        let n = runs.load(Ordering::SeqCst);
        async move { n >= 3 }
    })
    .await;

    let l = e.wait_for("/livez?verbose", 200, WAIT).await;
    assert_eq!(l.status, 200, "{}", l.body);
    let line = l
        .body
        .lines()
        .find(|l| l.starts_with("[+]task:sampler:hostile"))
        .unwrap_or_else(|| panic!("no task line:\n{}", l.body));
    assert!(line.contains("restarted 2 times"), "{line}");
    assert!(
        line.contains("panicked: timestamp 1e19 out of range (run 1)"),
        "{line}"
    );
    let m = e.get("/metrics").await.body;
    assert!(
        m.contains("etcd_readiness_task_restarts_total{task=\"sampler:hostile\"} 2"),
        "{m}"
    );
    assert_eq!(e.get("/readyz").await.status, 200);
}
