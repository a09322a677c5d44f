//! The candidate policy (`--policy.candidate`) through the real `serve`
//! pipeline next to a real etcd member, mounted like ConfigMap keys
//! (kubelet AtomicWriter swaps): a candidate that would fail while the live
//! policy passes, and one that would pass while it fails, never change
//! `/readyz`; the disagreement counters are the seconds between the two
//! candidate swaps the test made, as the engine timed them; a broken
//! candidate file is kept out with the diagnostics and metrics of a broken
//! policy and the live policy does not notice.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use etcd_readiness_testkit::atomic_writer::AtomicWriterVolume;
use etcd_readiness_testkit::etcd::EtcdCluster;
use etcd_readiness_testkit::exporter;
use etcd_readiness_testkit::exporter::Exporter;

const WAIT: Duration = Duration::from_secs(20);
const LIVE: &str = "check leader: leader\n";
/// Agrees with LIVE on a healthy single member.
const AGREE: &str = "check leader: leader\n";
/// Would fail on a healthy single member, which is its cluster's leader.
const WOULD_FAIL: &str = "check leader: leader\ncheck not_leader: !leader\n";
const BAD: &str = "check leader: leader\ncheck linearizable_read: qget_mss < 1000\n";

fn json(body: &str) -> serde_json::Value {
    serde_json::from_str(body).unwrap_or_else(|e| panic!("not JSON ({e}): {body}"))
}

/// Probe `path` every 20 ms until stopped; counts answers other than `want`.
struct Prober {
    stop: Arc<AtomicBool>,
    wrong: Arc<AtomicUsize>,
    probes: Arc<AtomicUsize>,
    task: tokio::task::JoinHandle<()>,
}

impl Prober {
    fn start(e: &Arc<Exporter>, path: &'static str, want: u16) -> Prober {
        let (stop, wrong, probes) = (
            Arc::new(AtomicBool::new(false)),
            Arc::new(AtomicUsize::new(0)),
            Arc::new(AtomicUsize::new(0)),
        );
        let task = {
            let (e, stop, wrong, probes) = (e.clone(), stop.clone(), wrong.clone(), probes.clone());
            tokio::spawn(async move {
                while !stop.load(Ordering::Relaxed) {
                    let r = e.get(path).await;
                    if r.status != want {
                        eprintln!("{path} answered {}: {}", r.status, r.body);
                        wrong.fetch_add(1, Ordering::Relaxed);
                    }
                    probes.fetch_add(1, Ordering::Relaxed);
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
            })
        };
        Prober {
            stop,
            wrong,
            probes,
            task,
        }
    }

    /// Stop; (probes, wrong answers).
    async fn finish(self) -> (usize, usize) {
        self.stop.store(true, Ordering::Relaxed);
        self.task.await.unwrap();
        (
            self.probes.load(Ordering::Relaxed),
            self.wrong.load(Ordering::Relaxed),
        )
    }
}

async fn candidate_json(e: &Exporter) -> serde_json::Value {
    let r = e.get("/readyz?policy=candidate&format=json").await;
    assert_eq!(r.status, 409, "the candidate's constant status: {}", r.body);
    json(&r.body)
}

/// Wait until the candidate in force has the content `text`; its `/policy` entry.
async fn wait_candidate(e: &Exporter, what: &str, text: &str) -> serde_json::Value {
    let p = e
        .wait_policy(what, WAIT, |p| p["candidate"]["text"] == text)
        .await;
    p["candidate"].clone()
}

fn loaded_at(c: &serde_json::Value) -> f64 {
    c["loaded_at"].as_f64().expect("loaded_at")
}

fn counter(scrape: &str, name: &str) -> f64 {
    exporter::metric_line(scrape, &format!("{name} "))
        .rsplit(' ')
        .next()
        .unwrap()
        .parse()
        .unwrap()
}

// Long because: the seconds counted between two swaps are the scenario: split, neither half has both swaps.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_candidate_that_would_fail_changes_nothing_and_counts_the_seconds_between_the_swaps() {
    let cluster = EtcdCluster::builder(1).start();
    let dir = tempfile::tempdir().unwrap();
    let cand_dir = dir.path().join("candidate");
    std::fs::create_dir_all(dir.path().join("live")).unwrap();
    std::fs::create_dir_all(&cand_dir).unwrap();
    let live = AtomicWriterVolume::create(&dir.path().join("live"), "policy", LIVE).unwrap();
    let mut cand = AtomicWriterVolume::create(&cand_dir, "candidate", AGREE).unwrap();
    let (lp, cp) = (live.path(), cand.path());
    let e = Arc::new(
        Exporter::start(&cluster.endpoint(0), move |a| {
            a.policy = Some(lp);
            a.policy_candidate = Some(cp);
        })
        .await,
    );
    let r = e.wait_for("/readyz", 200, WAIT).await;
    assert_eq!(r.status, 200, "{}", r.body);
    let c = candidate_json(&e).await;
    assert_eq!(c["ready"], true, "{c}");
    assert_eq!(c["policy"], "candidate", "{c}");
    let live_before = json(&e.get("/readyz?format=json").await.body);

    let prober = Prober::start(&e, "/readyz", 200);
    // Disagree, then agree again: the engine times both swaps.
    cand.update(WOULD_FAIL).unwrap();
    let c1 = wait_candidate(&e, "the candidate that would fail", WOULD_FAIL).await;
    let r = e
        .wait_until("/readyz?policy=candidate&format=json", WAIT, |r| {
            json(&r.body)["would_fail_while_ready_seconds"]
                .as_f64()
                .is_some_and(|s| s >= 1.0)
        })
        .await;
    let during = json(&r.body);
    assert_eq!(r.status, 409, "{}", r.body);
    assert_eq!(during["ready"], false, "{during}");
    assert_eq!(during["live_ready"], true, "{during}");
    assert_eq!(
        during["disagreeing"]["direction"], "would fail while ready",
        "{during}"
    );
    let not_leader = during["checks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["name"] == "not_leader")
        .expect("the candidate's own check");
    assert_eq!(not_leader["state"], "fail", "{during}");
    // The plain answer says what it is before anything else.
    let plain = e.get("/readyz?policy=candidate").await;
    assert_eq!(plain.status, 409);
    assert!(
        plain.body.starts_with(
            "candidate policy: it would answer not ready (it decides nothing; the member's readiness, ready, is /readyz)\n"
        ),
        "{}",
        plain.body
    );
    assert!(
        plain.body.contains("[-]not_leader failed: "),
        "{}",
        plain.body
    );
    let one = e.get("/readyz/not_leader?policy=candidate").await;
    assert_eq!(one.status, 409, "{}", one.body);
    // The live policy has no such check.
    assert_eq!(e.get("/readyz/not_leader").await.status, 404);

    cand.update(AGREE).unwrap();
    let c2 = wait_candidate(&e, "the agreeing candidate again", AGREE).await;
    let arranged = loaded_at(&c2) - loaded_at(&c1);
    let after = candidate_json(&e).await;
    let counted = after["would_fail_while_ready_seconds"].as_f64().unwrap();
    // The counter is the sum of the evaluation intervals between the two
    // swaps, each of which evaluated at the instant it was put in force:
    // what is left is the monotonic and the wall clock read microseconds
    // apart at each end (and rounding to ms).
    assert!(
        (counted - arranged).abs() <= 0.01,
        "counted {counted}s, swaps {arranged}s apart: {after}"
    );
    assert_eq!(after["would_pass_while_unready_seconds"], 0.0, "{after}");
    assert!(after["disagreeing"].is_null(), "{after}");
    // It stays put while the two agree, and the metrics say the same.
    let scrape = e.get("/metrics").await.body;
    let exported = counter(
        &scrape,
        "etcd_readiness_candidate_would_fail_while_ready_seconds_total",
    );
    assert!(
        (exported - counted).abs() <= 0.001,
        "{exported} vs {counted}\n{scrape}"
    );
    assert_eq!(
        counter(
            &scrape,
            "etcd_readiness_candidate_would_pass_while_unready_seconds_total"
        ),
        0.0
    );
    assert_eq!(
        exporter::metric_line(&scrape, "etcd_readiness_candidate_ready "),
        "etcd_readiness_candidate_ready 1"
    );
    assert!(
        !scrape.contains("check=\"not_leader\""),
        "a check the candidate dropped is gone: {scrape}"
    );

    let (probes, wrong) = prober.finish().await;
    assert!(probes > 5, "the background prober ran");
    assert_eq!(wrong, 0, "/readyz left 200 while the candidate disagreed");
    // The live checks kept their state throughout: `since` is where it was
    // before the swaps. It is each evaluation's wall time less the
    // monotonic time in the state, two clocks read one after the other,
    // on a loaded machine milliseconds apart (CI saw 7 ms): compared within
    // 50 ms, and before the first swap (which came after `live_before`
    // and the watcher's 100 ms debounce), where a reset would have put it.
    let live_after = json(&e.get("/readyz?format=json").await.body);
    let since = |v: &serde_json::Value| v["checks"][0]["since"].as_f64().unwrap();
    assert!(
        (since(&live_after) - since(&live_before)).abs() <= 0.05
            && since(&live_after) < loaded_at(&c1),
        "{live_before} {live_after}"
    );
    drop(live);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_candidate_that_would_pass_while_unready_changes_nothing() {
    let cluster = EtcdCluster::builder(1).start();
    let dir = tempfile::tempdir().unwrap();
    // The live policy fails on a voting member; the candidate does not.
    let live = dir.path().join("policy");
    std::fs::write(&live, "check leader: leader\ncheck learner: learner\n").unwrap();
    let cand = dir.path().join("candidate");
    std::fs::write(&cand, AGREE).unwrap();
    let (lp, cp) = (live.clone(), cand.clone());
    let e = Arc::new(
        Exporter::start(&cluster.endpoint(0), move |a| {
            a.policy = Some(lp);
            a.policy_candidate = Some(cp);
        })
        .await,
    );
    let r = e
        .wait_until("/readyz?policy=candidate&format=json", WAIT, |r| {
            json(&r.body)["would_pass_while_unready_seconds"]
                .as_f64()
                .is_some_and(|s| s >= 0.5)
        })
        .await;
    let c = json(&r.body);
    assert_eq!(r.status, 409, "{c}");
    assert_eq!(c["ready"], true, "{c}");
    assert_eq!(c["live_ready"], false, "{c}");
    assert_eq!(
        c["disagreeing"]["direction"], "would pass while unready",
        "{c}"
    );
    // /readyz, /readyz/NAME and /livez answer as without a candidate.
    let prober = Prober::start(&e, "/readyz", 503);
    let r = e.get("/readyz?verbose").await;
    assert_eq!(r.status, 503, "{}", r.body);
    assert!(r.body.contains("[-]learner failed: "), "{}", r.body);
    assert_eq!(e.get("/readyz/learner").await.status, 503);
    assert_eq!(e.get("/livez").await.status, 200);
    let scrape = e.get("/metrics").await.body;
    assert_eq!(
        exporter::metric_line(&scrape, "etcd_readiness_ready "),
        "etcd_readiness_ready 0"
    );
    assert_eq!(
        exporter::metric_line(&scrape, "etcd_readiness_candidate_ready "),
        "etcd_readiness_candidate_ready 1"
    );
    assert!(
        counter(
            &scrape,
            "etcd_readiness_candidate_would_pass_while_unready_seconds_total"
        ) >= 0.5,
        "{scrape}"
    );
    tokio::time::sleep(Duration::from_millis(300)).await;
    let (probes, wrong) = prober.finish().await;
    assert!(probes > 3, "the background prober ran");
    assert_eq!(wrong, 0, "/readyz left 503 while the candidate would pass");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_broken_candidate_is_kept_out_like_a_broken_policy_and_the_live_one_does_not_notice() {
    let cluster = EtcdCluster::builder(1).start();
    let dir = tempfile::tempdir().unwrap();
    // Broken from the start: the exporter starts and serves all the same.
    let mut cand = AtomicWriterVolume::create(dir.path(), "candidate", BAD).unwrap();
    let cp = cand.path();
    let e = Arc::new(
        Exporter::start(&cluster.endpoint(0), move |a| a.policy_candidate = Some(cp)).await,
    );
    let r = e.wait_for("/readyz", 200, WAIT).await;
    assert_eq!(r.status, 200, "{}", r.body);
    let r = e.get("/readyz?policy=candidate").await;
    assert_eq!(r.status, 404, "{}", r.body);
    assert!(
        r.body.contains(":2:26: unknown signal `qget_mss`"),
        "{}",
        r.body
    );
    let p = e.policy_json().await;
    assert!(p["candidate"]["sha256"].is_null(), "{p}");
    // No policy loaded: the path shown is the one its reloader reads.
    let shown = cand.path().display().to_string();
    assert_eq!(p["candidate"]["path"], shown.as_str(), "{p}");
    let scrape = e.get("/metrics").await.body;
    assert!(
        !scrape.contains("etcd_readiness_candidate_ready"),
        "no candidate verdict before a candidate is in force: {scrape}"
    );
    assert_eq!(
        exporter::metric_line(
            &scrape,
            "etcd_readiness_candidate_policy_last_reload_successful "
        ),
        "etcd_readiness_candidate_policy_last_reload_successful 0"
    );

    // Fixed: in force.
    cand.update(AGREE).unwrap();
    let good = wait_candidate(&e, "the fixed candidate", AGREE).await;
    assert!(good["last_reload_error"].is_null(), "{good}");

    // Broken again: the last good candidate stays, with the diagnostics and
    // metrics a broken policy has, under the candidate's names.
    let prober = Prober::start(&e, "/readyz", 200);
    cand.update(BAD).unwrap();
    let p = e
        .wait_policy("the candidate's reload error", WAIT, |p| {
            p["candidate"]["last_reload_error"].is_string()
        })
        .await;
    let err = p["candidate"]["last_reload_error"].as_str().unwrap();
    assert!(err.contains(":2:26: unknown signal `qget_mss`"), "{err}");
    assert_eq!(p["candidate"]["sha256"], good["sha256"], "{p}");
    assert!(
        p["last_reload_error"].is_null(),
        "the live policy is not touched: {p}"
    );
    let scrape = e.get("/metrics").await.body;
    for (name, want) in [
        (
            "etcd_readiness_candidate_policy_last_reload_successful ",
            "0",
        ),
        (
            "etcd_readiness_candidate_policy_reloads_total{result=\"failure\"} ",
            "2",
        ),
        (
            "etcd_readiness_candidate_policy_reloads_total{result=\"success\"} ",
            "1",
        ),
        ("etcd_readiness_policy_last_reload_successful ", "1"),
        (
            "etcd_readiness_policy_reloads_total{result=\"failure\"} ",
            "0",
        ),
    ] {
        assert_eq!(
            exporter::metric_line(&scrape, name),
            format!("{name}{want}"),
            "{scrape}"
        );
    }
    assert_eq!(
        exporter::metric_line(&scrape, "etcd_readiness_candidate_policy_info"),
        format!(
            "etcd_readiness_candidate_policy_info{{sha256=\"{}\"}} 1",
            good["sha256"].as_str().unwrap()
        )
    );
    let c = candidate_json(&e).await;
    assert_eq!(
        c["ready"], true,
        "the last good candidate still evaluates: {c}"
    );
    // POST /-/reload reloads both and says which failed, with the carets.
    let (status, body) = exporter::post(e.addr(), "/-/reload").await;
    assert_eq!(status, 500, "{body}");
    assert!(
        body.starts_with(
            "candidate policy reload failed; the previous candidate stays (the policy in force is not affected)\n"
        ),
        "{body}"
    );
    assert!(body.contains("^^^^^^^^ not a signal or a `let`"), "{body}");
    let (probes, wrong) = prober.finish().await;
    assert!(probes > 3, "the background prober ran");
    assert_eq!(wrong, 0, "/readyz left 200 while the candidate was broken");
}
