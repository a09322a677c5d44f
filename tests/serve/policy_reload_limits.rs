//! Issue 10, policy part, through the real `serve` pipeline: policies that
//! used to wedge or panic the exporter arrive by hot reload (kubelet
//! AtomicWriter swaps of a ConfigMap-style volume) next to a real etcd member.
//! A 40-deep `let` doubling chain is applied and evaluated without wedging
//! anything; a hold-down of `99999999999999999999h` is a failed reload with a
//! `file:line:col` error on `/policy` and `last_reload_successful 0`; a good
//! file written afterwards is still picked up.

use std::time::Duration;

use etcd_readiness_policy::policy::limits;
use etcd_readiness_testkit::atomic_writer::AtomicWriterVolume;
use etcd_readiness_testkit::etcd::EtcdCluster;
use etcd_readiness_testkit::exporter;
use etcd_readiness_testkit::exporter::Exporter;

const WAIT: Duration = Duration::from_secs(30);
const V1: &str = "check leader: leader\ncheck linearizable_read: qget_ms < 1000\n";
const HUGE_HOLD: &str =
    "check leader: leader\ncheck linearizable_read: qget_ms < 1000 for 99999999999999999999h\n";
const V2: &str = "check leader: leader\ncheck linearizable_read: qget_ms < 2000\n";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_40_deep_let_chain_then_a_huge_hold_down_arrive_by_hot_reload() {
    let cluster = EtcdCluster::builder(1).start();
    let dir = tempfile::tempdir().unwrap();
    let mut volume = AtomicWriterVolume::create(dir.path(), "policy", V1).unwrap();
    let path = volume.path();
    let e = Exporter::start(&cluster.endpoint(0), move |a| a.policy = Some(path)).await;
    let r = e.wait_for("/readyz", 200, WAIT).await;
    assert_eq!(r.status, 200, "{}", r.body);

    // The doubling chain: applied, evaluated (the single member is leader, so
    // `deep` passes), and the exporter stays live and answers reloads.
    let chain = limits::doubling_chain("leader", 40);
    volume.update(&chain).unwrap();
    let p = e
        .wait_policy("the 40-deep chain", WAIT, |p| {
            p["text"]
                .as_str()
                .is_some_and(|t| t.contains("let a40 = a39 && a39"))
        })
        .await;
    assert!(p["last_reload_error"].is_null(), "{p}");
    let r = e.wait_for("/readyz?verbose", 200, WAIT).await;
    assert!(r.body.contains("[+]deep ok"), "{}", r.body);
    assert_eq!(e.get("/livez").await.status, 200);
    let post = exporter::post(e.addr(), "/-/reload").await;
    assert_eq!(post.0, 200, "{}", post.1);
    assert!(post.1.starts_with("policy unchanged"), "{}", post.1);

    // The huge hold-down: a failed reload, the chain stays in force.
    let chain_sha = p["sha256"].as_str().unwrap().to_string();
    volume.update(HUGE_HOLD).unwrap();
    let p = e
        .wait_policy("the reload error", WAIT, |p| {
            p["last_reload_error"].is_string()
        })
        .await;
    let err = p["last_reload_error"].as_str().unwrap();
    assert!(
        err.contains(":2:45: hold-down `99999999999999999999h` is longer than the limit of 168h"),
        "{err}"
    );
    assert_eq!(
        p["sha256"],
        chain_sha.as_str(),
        "the bad policy is not in force"
    );
    assert_eq!(
        e.metric("etcd_readiness_policy_last_reload_successful ")
            .await,
        "etcd_readiness_policy_last_reload_successful 0"
    );
    let post = exporter::post(e.addr(), "/-/reload").await;
    assert_eq!(post.0, 500, "{}", post.1);
    assert!(post.1.contains("hold-down"), "{}", post.1);
    assert_eq!(e.get("/livez").await.status, 200);

    // A good file written afterwards is picked up.
    volume.update(V2).unwrap();
    let p = e
        .wait_policy("the good policy", WAIT, |p| {
            p["text"]
                .as_str()
                .is_some_and(|t| t.contains("qget_ms < 2000"))
                && p["last_reload_error"].is_null()
        })
        .await;
    assert!(p["text"].as_str().unwrap().contains("qget_ms < 2000"));
    assert_eq!(
        e.metric("etcd_readiness_policy_last_reload_successful ")
            .await,
        "etcd_readiness_policy_last_reload_successful 1"
    );
    let r = e.wait_for("/readyz", 200, WAIT).await;
    assert_eq!(r.status, 200, "{}", r.body);
}
