//! Hot reload of the policy file on real files and real inotify: the kubelet's
//! AtomicWriter symlink swap (hundreds of times), editor-style and in-place
//! writes, invalid and missing files (last good policy stays), state kept
//! across a reload, SIGHUP, the periodic re-read and `POST /-/reload`.
//!
//! Every wait polls a condition with a deadline; no fixed sleep synchronises.

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use axum::Router;
use axum::body::Body;
use axum::http::{Request, StatusCode, header};
use axum::routing::post;
use etcd_readiness_exporter::engine::{EngineHandle, EngineMetrics, Timing};
use etcd_readiness_exporter::reload::{
    self, PolicySink, ReloadError, ReloadMetrics, ReloadOutcome, ReloadTrigger, Reloader,
    WatchOptions, WatcherHandle, spawn_watcher,
};
use etcd_readiness_exporter::sources::RoundNotifier;
use etcd_readiness_policy::policy::Policy;
use etcd_readiness_policy::signals::{Catalogue, SignalStore, Source, Value};
use etcd_readiness_policy::verdict::{CheckState, Verdict};
use etcd_readiness_testkit::atomic_writer::AtomicWriterVolume as ConfigMapVolume;
use etcd_readiness_testkit::wait::poll;
use prometheus_client::registry::Registry;
use sha2::{Digest, Sha256};
use tower::ServiceExt;

const DEADLINE: Duration = Duration::from_secs(10);

fn sha(text: &str) -> String {
    hex::encode(Sha256::digest(text.as_bytes()))
}

/// A valid policy; `n` varies the content.
fn policy(n: u32) -> String {
    format!(
        "check leader: leader\ncheck linearizable_read: qget_ms < {}\n",
        1000 + n
    )
}

/// The unknown signal `qgett_ms` is on line 2, column 26.
const INVALID: &str = "check leader: leader\ncheck linearizable_read: qgett_ms < 1000\n";

// ---------------------------------------------------------------- the sink

/// Records what the reloader hands over and, when the test needs the state a
/// reload must keep, passes it on to a real engine ([`EngineHandle`], the
/// sink `serve` uses) fed with healthy readings through its signal store.
struct Sink {
    applied: Mutex<Vec<String>>,
    /// Every `reload_failed` call, in order.
    errors: Mutex<Vec<Option<String>>>,
    engine: Option<EngineHandle>,
}

impl Sink {
    fn new(initial: &Arc<Policy>, catalogue: &Arc<Catalogue>, with_engine: bool) -> Arc<Sink> {
        let engine = with_engine.then(|| healthy_engine(initial, catalogue));
        Arc::new(Sink {
            applied: Mutex::new(Vec::new()),
            errors: Mutex::new(Vec::new()),
            engine,
        })
    }

    fn applied(&self) -> Vec<String> {
        self.applied.lock().unwrap().clone()
    }

    fn last_error(&self) -> Option<Option<String>> {
        self.errors.lock().unwrap().last().cloned()
    }

    fn engine(&self) -> &EngineHandle {
        self.engine.as_ref().expect("sink has an engine")
    }

    /// Evaluate now and return the verdict the engine published.
    fn evaluate(&self) -> Verdict {
        let engine = self.engine();
        engine.evaluate_now();
        engine.verdict().verdict.clone()
    }

    /// [`evaluate`](Self::evaluate) with the wall clock derived from the
    /// monotonic one (`wall = wall0 + (now - t0)`), so the `since` times of
    /// two verdicts compare exactly: a check's start shows as the same wall
    /// time whenever it is reported.
    fn evaluate_on_one_clock(&self, (t0, wall0): (Instant, SystemTime)) -> Verdict {
        let engine = self.engine();
        let now = Instant::now();
        engine.evaluate_at(now, wall0 + (now - t0));
        engine.verdict().verdict.clone()
    }
}

impl PolicySink for Sink {
    fn apply(&self, policy: Arc<Policy>) {
        let sha = policy.sha256().to_string();
        if let Some(engine) = &self.engine {
            engine.set_policy(policy);
        }
        self.applied.lock().unwrap().push(sha);
    }

    fn reload_failed(&self, error: Option<String>) {
        if let Some(engine) = &self.engine {
            engine.set_reload_error(error.clone());
        }
        self.errors.lock().unwrap().push(error);
    }
}

/// An engine (not spawned: the test evaluates) whose store holds a healthy
/// member's readings, after a finished etcd round.
fn healthy_engine(policy: &Arc<Policy>, catalogue: &Arc<Catalogue>) -> EngineHandle {
    let store = Arc::new(SignalStore::new(catalogue));
    let now = Instant::now();
    let healthy = [
        ("leader", Value::Bool(true)),
        ("qget_ms", Value::Num(5.0)),
        ("sget_ms", Value::Num(5.0)),
        ("learner", Value::Bool(false)),
        ("alarm_corrupt", Value::Bool(false)),
        ("apply_lag", Value::Num(10.0)),
    ];
    for (name, value) in healthy {
        // Never stale within a test: only the policy changes here.
        store.set_staleness(catalogue.id(name), Duration::from_secs(3600));
        store.record_ok(catalogue.id(name), value, now);
    }
    let notifier = RoundNotifier::new();
    notifier.round_finished(
        &Source::Etcd,
        Duration::from_secs(1),
        std::time::Instant::now(),
    );
    let engine = EngineHandle::new(
        policy.clone(),
        catalogue.clone(),
        store,
        notifier,
        EngineMetrics::register(&mut Registry::default()),
        Timing {
            sample_interval: Duration::from_secs(1),
            sample_timeout: Duration::from_millis(500),
        },
        etcd_readiness_exporter::runtime::Runtime::new(
            etcd_readiness_exporter::runtime::clock::Clock::node(),
        ),
    );
    engine.evaluate_now();
    engine
}

// ----------------------------------------------------------- the fixture

struct Fixture {
    _dir: tempfile::TempDir,
    path: PathBuf,
    catalogue: Arc<Catalogue>,
    registry: Registry,
    reloader: Arc<Reloader>,
    sink: Arc<Sink>,
}

impl Fixture {
    /// A reloader for `path`, whose current content is the policy in force.
    fn new(dir: tempfile::TempDir, path: PathBuf, with_evaluator: bool) -> Fixture {
        let catalogue = Arc::new(Catalogue::builtin());
        let initial = Arc::new(reload::load(&path, &catalogue).expect("initial policy"));
        let sink = Sink::new(&initial, &catalogue, with_evaluator);
        let mut registry = Registry::default();
        let metrics = ReloadMetrics::register(&mut registry);
        let reloader = Arc::new(Reloader::policy(
            &path,
            catalogue.clone(),
            sink.clone(),
            metrics,
            Some(&initial),
            etcd_readiness_exporter::runtime::clock::Clock::node(),
        ));
        Fixture {
            _dir: dir,
            path,
            catalogue,
            registry,
            reloader,
            sink,
        }
    }

    fn watch(&self, opts: WatchOptions) -> WatcherHandle {
        let supervisor = etcd_readiness_exporter::runtime::supervise::Supervisor::new(
            etcd_readiness_exporter::runtime::clock::Clock::node(),
        );
        spawn_watcher("policy-watcher", self.reloader.clone(), opts, &supervisor)
    }

    /// Sample lines of the reload metrics, success timestamp masked.
    fn metrics(&self) -> Vec<String> {
        let mut out = String::new();
        prometheus_client::encoding::text::encode(&mut out, &self.registry).unwrap();
        let mut lines = out
            .lines()
            .filter(|l| !l.starts_with('#'))
            .map(|l| match l.split_once(' ') {
                Some(("etcd_readiness_policy_last_reload_success_timestamp_seconds", _)) => {
                    "etcd_readiness_policy_last_reload_success_timestamp_seconds T".to_string()
                }
                _ => l.to_string(),
            })
            .collect::<Vec<_>>();
        // Series within a family come in no fixed order.
        lines.sort();
        lines
    }

    async fn wait_in_force(&self, content: &str) {
        let want = sha(content);
        wait_for(&format!("policy {want} in force"), || {
            self.reloader.sha256_in_force().as_deref() == Some(want.as_str())
                && self.sink.applied().last() == Some(&want)
        })
        .await;
    }
}

fn expected_metrics(successful: bool, ok: u64, failed: u64, in_force: &str) -> Vec<String> {
    let mut lines = vec![
        format!(
            "etcd_readiness_policy_last_reload_successful {}",
            u8::from(successful)
        ),
        "etcd_readiness_policy_last_reload_success_timestamp_seconds T".to_string(),
        format!("etcd_readiness_policy_reloads_total{{result=\"success\"}} {ok}"),
        format!("etcd_readiness_policy_reloads_total{{result=\"failure\"}} {failed}"),
        format!(
            "etcd_readiness_policy_info{{sha256=\"{}\"}} 1",
            sha(in_force)
        ),
    ];
    lines.sort();
    lines
}

async fn wait_for(what: &str, mut cond: impl FnMut() -> bool) {
    let waited = poll(DEADLINE, Duration::from_millis(2), || {
        let held = cond();
        async move { if held { Ok(()) } else { Err(()) } }
    })
    .await;
    if waited.is_err() {
        panic!("timed out after {DEADLINE:?} waiting for {what}");
    }
}

fn configmap_fixture(content: &str, with_evaluator: bool) -> (Fixture, ConfigMapVolume) {
    let dir = tempfile::tempdir().unwrap();
    let volume = ConfigMapVolume::create(dir.path(), "policy", content).unwrap();
    let path = dir.path().join("policy");
    (Fixture::new(dir, path, with_evaluator), volume)
}

fn plain_fixture(content: &str, with_evaluator: bool) -> Fixture {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("policy");
    std::fs::write(&path, content).unwrap();
    Fixture::new(dir, path, with_evaluator)
}

/// Only inotify can trigger a reload: a dead watch fails the test.
fn inotify_only() -> WatchOptions {
    WatchOptions {
        debounce: Duration::from_millis(20),
        resync_interval: Duration::from_secs(3600),
        inotify: true,
        sighup: false,
        ..WatchOptions::default()
    }
}

// ------------------------------------------------------------------ tests

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_differing_configmap_swap_is_applied_over_200_swaps() {
    let contents: Vec<String> = (0..5).map(policy).collect();
    let (f, mut volume) = configmap_fixture(&contents[0], false);
    let _watcher = f.watch(inotify_only());

    let mut previous = contents[0].clone();
    let mut expected = Vec::new();
    let mut unchanged_swaps = 0;
    for i in 1..=220usize {
        // Mostly a different policy, every seventh swap the same content again.
        let next = if i % 7 == 0 {
            previous.clone()
        } else {
            contents[(i * 3 + i / 5) % contents.len()].clone()
        };
        volume.update(&next).unwrap();
        if next == previous {
            unchanged_swaps += 1;
        } else {
            expected.push(sha(&next));
            f.wait_in_force(&next).await;
        }
        previous = next;
    }
    assert!(
        unchanged_swaps >= 20,
        "the sequence re-swaps the same content"
    );
    // Exactly the differing swaps, in order: a same-content swap never
    // re-applied, no swap was missed.
    assert_eq!(f.sink.applied(), expected);
    assert_eq!(
        f.metrics(),
        expected_metrics(true, expected.len() as u64, 0, &previous)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fast_burst_of_configmap_swaps_ends_with_the_last_content_in_force() {
    let contents: Vec<String> = (0..4).map(policy).collect();
    let (f, mut volume) = configmap_fixture(&contents[0], false);
    let _watcher = f.watch(inotify_only());
    for i in 1..=300usize {
        volume.update(&contents[i % contents.len()]).unwrap();
    }
    // The last content differs from the start, so it must be applied even if
    // the whole burst coalesces into one re-read.
    let last = policy(99);
    volume.update(&last).unwrap();
    f.wait_in_force(&last).await;
    // Swaps may coalesce, but nothing outside the burst was applied and the
    // last application is the final content.
    let applied = f.sink.applied();
    let shas: Vec<String> = contents.iter().chain([&last]).map(|c| sha(c)).collect();
    assert!(applied.iter().all(|a| shas.contains(a)));
    assert_eq!(applied.last(), Some(&sha(&last)));
    // The watch still works after the burst.
    volume.update(&policy(42)).unwrap();
    f.wait_in_force(&policy(42)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn editor_rename_and_in_place_rewrite_are_picked_up() {
    let f = plain_fixture(&policy(0), false);
    let _watcher = f.watch(inotify_only());

    // Editor-style: write a temporary file, rename it over the path.
    let tmp = f.path.with_file_name(".policy.swp");
    std::fs::write(&tmp, policy(1)).unwrap();
    std::fs::rename(&tmp, &f.path).unwrap();
    f.wait_in_force(&policy(1)).await;

    // In place: truncate and write the same inode.
    std::fs::write(&f.path, policy(2)).unwrap();
    f.wait_in_force(&policy(2)).await;

    // Again, both ways, to show the watch survived the rename.
    std::fs::write(&tmp, policy(3)).unwrap();
    std::fs::rename(&tmp, &f.path).unwrap();
    f.wait_in_force(&policy(3)).await;
    std::fs::write(&f.path, policy(4)).unwrap();
    f.wait_in_force(&policy(4)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn invalid_policy_keeps_the_last_good_one_until_a_valid_one_arrives() {
    let good = policy(0);
    let (f, mut volume) = configmap_fixture(&good, true);
    let _watcher = f.watch(inotify_only());
    assert!(f.sink.evaluate().ready);
    assert_eq!(f.metrics(), expected_metrics(true, 0, 0, &good));

    volume.update(INVALID).unwrap();
    wait_for("the reload failure", || {
        matches!(f.sink.last_error(), Some(Some(_)))
    })
    .await;
    let error = f.sink.last_error().unwrap().unwrap();
    let location = format!("{}:2:26:", f.path.display());
    assert!(
        error.starts_with(&location),
        "{error:?} starts with {location}"
    );
    assert!(error.contains("qgett_ms"), "{error}");
    // Nothing applied, the old policy and readiness stay.
    assert!(f.sink.applied().is_empty());
    assert_eq!(f.reloader.sha256_in_force(), Some(sha(&good)));
    assert!(f.sink.evaluate().ready);
    let status = f.sink.engine().policy_status();
    assert_eq!(status.policy.sha256(), sha(&good));
    assert!(
        status.last_reload_error.is_some(),
        "the engine knows of the failure"
    );
    assert_eq!(f.metrics(), expected_metrics(false, 0, 1, &good));

    let fixed = policy(1);
    volume.update(&fixed).unwrap();
    f.wait_in_force(&fixed).await;
    assert_eq!(
        f.sink.last_error(),
        Some(None),
        "a success clears the error"
    );
    assert!(f.sink.evaluate().ready);
    assert_eq!(f.sink.engine().policy_status().policy.sha256(), sha(&fixed));
    assert_eq!(f.metrics(), expected_metrics(true, 1, 1, &fixed));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn going_back_to_the_policy_in_force_after_a_bad_edit_clears_the_failure() {
    let good = policy(0);
    let (f, mut volume) = configmap_fixture(&good, false);
    let _watcher = f.watch(inotify_only());
    volume.update(INVALID).unwrap();
    wait_for("the failure", || {
        matches!(f.sink.last_error(), Some(Some(_)))
    })
    .await;
    volume.update(&good).unwrap();
    wait_for("the failure to clear", || f.sink.last_error() == Some(None)).await;
    assert!(
        f.sink.applied().is_empty(),
        "the same policy is not re-applied"
    );
    assert_eq!(f.metrics(), expected_metrics(true, 1, 1, &good));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_watchers_own_reads_do_not_trigger_more_reads() {
    // A plain file in the watched directory: opening it to read it raises
    // inotify events on the directory, which must not cause another read.
    // Counted, not timed: inotify delivers a directory's events in order, so
    // once the watcher has counted the events of a read as ignored, every
    // event raised before that read has been counted too.
    let f = plain_fixture(&policy(0), false);
    let watcher = f.watch(inotify_only());
    std::fs::write(&f.path, policy(1)).unwrap();
    f.wait_in_force(&policy(1)).await;
    let own_read = || f.reloader.reload_now(ReloadTrigger::Manual).unwrap();

    // A barrier: once one read's events are counted, so are the write's.
    let ignored = watcher.events().ignored();
    own_read();
    wait_for("the events of one read", || {
        watcher.events().ignored() > ignored
    })
    .await;
    let relevant = watcher.events().relevant();
    assert!(relevant >= 1, "the write raised no relevant event");

    // One read at a time: inotify merges an event with an identical one still
    // queued, so back-to-back reads may raise a single event between them.
    for n in 0..20 {
        let ignored = watcher.events().ignored();
        own_read();
        wait_for(&format!("the events of our read {n}"), || {
            watcher.events().ignored() > ignored
        })
        .await;
    }
    assert_eq!(
        watcher.events().relevant(),
        relevant,
        "reading the file raised an event that schedules another read"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deleted_then_recreated_file_is_reported_then_reloaded() {
    let f = plain_fixture(&policy(0), false);
    let _watcher = f.watch(inotify_only());
    std::fs::remove_file(&f.path).unwrap();
    wait_for("the read failure", || {
        matches!(f.sink.last_error(), Some(Some(_)))
    })
    .await;
    let error = f.sink.last_error().unwrap().unwrap();
    assert!(
        error.contains("cannot read policy file") && error.contains(&*f.path.to_string_lossy()),
        "{error}"
    );
    assert_eq!(f.reloader.sha256_in_force(), Some(sha(&policy(0))));
    assert_eq!(f.metrics(), expected_metrics(false, 0, 1, &policy(0)));

    std::fs::write(&f.path, policy(1)).unwrap();
    f.wait_in_force(&policy(1)).await;
    assert_eq!(f.sink.last_error(), Some(None));
    assert_eq!(f.metrics(), expected_metrics(true, 1, 1, &policy(1)));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reload_changing_one_check_keeps_the_state_and_hold_down_of_the_others() {
    let a = "check leader: leader\n\
             check linearizable_read: qget_ms < 1000 for 5m\n\
             check serializable_read: sget_ms < 1000\n";
    let b = "check leader: leader\n\
             check linearizable_read: qget_ms < 1000 for 5m\n\
             check serializable_read: sget_ms < 1500\n";
    let (f, mut volume) = configmap_fixture(a, true);
    // The quorum read gets slow: the check is held passing by its `for 5m`.
    let engine = f.sink.engine().clone();
    engine.store().record_ok(
        f.catalogue.id("qget_ms"),
        Value::Num(2500.0),
        Instant::now(),
    );
    let clock = (Instant::now(), SystemTime::now());
    let before = f.sink.evaluate_on_one_clock(clock);
    assert!(before.ready);
    assert!(before.checks[1].held, "linearizable_read is held passing");

    // Evaluate continuously while reloading, as the engine's loop does.
    let stop = Arc::new(AtomicBool::new(false));
    let unready = Arc::new(AtomicUsize::new(0));
    let monitor = {
        let (sink, stop, unready) = (f.sink.clone(), stop.clone(), unready.clone());
        std::thread::spawn(move || {
            let mut rounds = 0u64;
            while !stop.load(Ordering::Relaxed) && rounds < 10_000_000 {
                if !sink.evaluate().ready {
                    unready.fetch_add(1, Ordering::Relaxed);
                }
                rounds += 1;
                std::thread::yield_now();
            }
            rounds
        })
    };

    let _watcher = f.watch(inotify_only());
    volume.update(b).unwrap();
    f.wait_in_force(b).await;
    volume.update(a).unwrap();
    f.wait_in_force(a).await;
    stop.store(true, Ordering::Relaxed);
    let rounds = monitor.join().unwrap();
    assert!(rounds > 0);
    assert_eq!(unready.load(Ordering::Relaxed), 0, "ready throughout");

    let after = f.sink.evaluate_on_one_clock(clock);
    let states: Vec<(&str, CheckState)> = after
        .checks
        .iter()
        .map(|c| (c.name.as_str(), c.state))
        .collect();
    assert_eq!(
        states,
        [
            ("leader", CheckState::Pass),
            ("linearizable_read", CheckState::Pass),
            ("serializable_read", CheckState::Pass),
        ]
    );
    // Unchanged checks keep since-when and the running hold-down.
    assert_eq!(after.checks[0].since, before.checks[0].since);
    assert_eq!(after.checks[1].since, before.checks[1].since);
    assert!(after.checks[1].held, "hold-down still running");
    // The changed check (changed twice) started afresh.
    assert!(after.checks[2].since > before.checks[2].since);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn post_reload_handler_reports_unchanged_reloaded_and_invalid() {
    let f = plain_fixture(&policy(0), false);
    let app = Router::new()
        .route(
            "/-/reload",
            post(reload::reload_handler::<reload::PolicyFile>),
        )
        .with_state(f.reloader.clone());
    let call = || async {
        let resp = app
            .clone()
            .oneshot(Request::post("/-/reload").body(Body::empty()).unwrap())
            .await
            .unwrap();
        let status = resp.status();
        let ctype = resp.headers()[header::CONTENT_TYPE]
            .to_str()
            .unwrap()
            .to_string();
        let body = axum::body::to_bytes(resp.into_body(), 1 << 20)
            .await
            .unwrap();
        (status, ctype, String::from_utf8(body.to_vec()).unwrap())
    };

    let (status, ctype, body) = call().await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(ctype, "text/plain; charset=utf-8");
    assert_eq!(
        body,
        format!("policy unchanged (sha256 {})\n", sha(&policy(0)))
    );

    std::fs::write(&f.path, policy(1)).unwrap();
    let (status, _, body) = call().await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(
        body,
        format!("policy reloaded (sha256 {})\n", sha(&policy(1)))
    );
    assert_eq!(f.sink.applied(), [sha(&policy(1))]);

    std::fs::write(&f.path, INVALID).unwrap();
    let (status, ctype, body) = call().await;
    assert_eq!(status, StatusCode::INTERNAL_SERVER_ERROR);
    assert_eq!(ctype, "text/plain; charset=utf-8");
    assert!(body.starts_with("policy reload failed; the previous policy stays in force\n"));
    assert!(
        body.contains(&format!("--> {}:2:26", f.path.display())),
        "{body}"
    );
    assert!(
        body.contains("^^^^^^^^"),
        "carets under the bad name: {body}"
    );
    assert_eq!(f.reloader.sha256_in_force(), Some(sha(&policy(1))));

    // An explicit request counts every failure, even of the same content.
    let (status, _, _) = call().await;
    assert_eq!(status, StatusCode::INTERNAL_SERVER_ERROR);
    assert_eq!(f.metrics(), expected_metrics(false, 1, 2, &policy(1)));
}

#[test]
fn the_watcher_counts_a_failure_once_while_the_file_stays_bad() {
    let f = plain_fixture(&policy(0), false);
    std::fs::write(&f.path, INVALID).unwrap();
    for trigger in [
        ReloadTrigger::Watch,
        ReloadTrigger::Resync,
        ReloadTrigger::Watch,
    ] {
        let err = f.reloader.reload_now(trigger).unwrap_err();
        assert!(matches!(err, ReloadError::Invalid(_)), "{err}");
    }
    assert_eq!(f.metrics(), expected_metrics(false, 0, 1, &policy(0)));
    // A different bad content is a new failure.
    std::fs::write(&f.path, format!("{INVALID}\n")).unwrap();
    f.reloader.reload_now(ReloadTrigger::Resync).unwrap_err();
    assert_eq!(f.metrics(), expected_metrics(false, 0, 2, &policy(0)));
    std::fs::write(&f.path, policy(1)).unwrap();
    assert_eq!(
        f.reloader.reload_now(ReloadTrigger::Resync).unwrap(),
        ReloadOutcome::Applied {
            sha256: sha(&policy(1))
        }
    );
    assert_eq!(
        f.reloader.reload_now(ReloadTrigger::Resync).unwrap(),
        ReloadOutcome::Unchanged {
            sha256: sha(&policy(1))
        }
    );
    assert_eq!(f.metrics(), expected_metrics(true, 1, 2, &policy(1)));
}

#[test]
fn non_utf8_content_is_rejected_with_its_offset() {
    let f = plain_fixture(&policy(0), false);
    std::fs::write(&f.path, b"check leader: leader\n\xff\n").unwrap();
    let err = f.reloader.reload_now(ReloadTrigger::Manual).unwrap_err();
    assert!(
        matches!(err, ReloadError::NotUtf8 { offset: 21, .. }),
        "{err}"
    );
    assert_eq!(f.reloader.sha256_in_force(), Some(sha(&policy(0))));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sighup_triggers_a_reload() {
    let f = plain_fixture(&policy(0), false);
    // No inotify and no re-read within the test: only the signal can reload.
    let _watcher = f.watch(WatchOptions {
        debounce: Duration::from_millis(20),
        resync_interval: Duration::from_secs(3600),
        inotify: false,
        sighup: true,
        ..WatchOptions::default()
    });
    std::fs::write(&f.path, policy(1)).unwrap();
    let status = std::process::Command::new("kill")
        .args(["-HUP", &std::process::id().to_string()])
        .status()
        .unwrap();
    assert!(status.success());
    f.wait_in_force(&policy(1)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_periodic_reread_picks_up_changes_without_inotify() {
    let f = plain_fixture(&policy(0), false);
    let _watcher = f.watch(WatchOptions {
        debounce: Duration::from_millis(20),
        resync_interval: Duration::from_millis(100),
        inotify: false,
        sighup: false,
        ..WatchOptions::default()
    });
    std::fs::write(&f.path, policy(1)).unwrap();
    f.wait_in_force(&policy(1)).await;
    std::fs::write(&f.path, policy(2)).unwrap();
    f.wait_in_force(&policy(2)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_change_between_the_startup_load_and_the_watch_is_not_missed() {
    let f = plain_fixture(&policy(0), false);
    std::fs::write(&f.path, policy(1)).unwrap();
    // No trigger but the watcher's first re-read can apply it.
    let _watcher = f.watch(WatchOptions {
        debounce: Duration::from_millis(20),
        resync_interval: Duration::from_secs(3600),
        inotify: false,
        sighup: false,
        ..WatchOptions::default()
    });
    f.wait_in_force(&policy(1)).await;
}
