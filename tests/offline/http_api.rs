//! The HTTP layer without a socket (`tower::ServiceExt::oneshot`), on a
//! hand-made verdict: the exact text users and the kubelet see is snapshotted.

use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use axum::body::Body;
use axum::http::{Request, StatusCode};
use http_body_util::BodyExt;
use tower::ServiceExt;

use etcd_readiness_exporter::config::DEFAULT_POLICY;
use etcd_readiness_exporter::engine::EngineMetrics;
use etcd_readiness_exporter::engine::{EngineHandle, Timing};
use etcd_readiness_exporter::http::HttpMetrics;
use etcd_readiness_exporter::http::longpoll::Holds;
use etcd_readiness_exporter::http::{AppState, app};
use etcd_readiness_exporter::runtime::Runtime;
use etcd_readiness_exporter::runtime::clock::Clock;
use etcd_readiness_exporter::sources::RoundNotifier;
use etcd_readiness_policy::policy::Policy;
use etcd_readiness_policy::signals::{Catalogue, SignalStore};
use etcd_readiness_policy::verdict::{CheckKind, CheckReport, CheckState, UsedSignal, Verdict};
use etcd_readiness_testkit::wait::poll;
use prometheus_client::registry::Registry;
use tokio_util::sync::CancellationToken;

fn at(secs: u64) -> SystemTime {
    SystemTime::UNIX_EPOCH + Duration::from_secs(secs)
}

fn report(
    name: &str,
    kind: CheckKind,
    state: CheckState,
    expr: &str,
    why: &str,
    value: Option<serde_json::Value>,
) -> CheckReport {
    CheckReport {
        in_state_for: Duration::from_secs(12),
        since: at(1_700_000_000),
        explanation: why.to_string(),
        signals: vec![UsedSignal {
            name: expr
                .trim_start_matches('!')
                .split(' ')
                .next()
                .unwrap()
                .to_string(),
            value,
        }],
        ..CheckReport::new(name, kind, state, expr)
    }
}

fn failing_verdict() -> Verdict {
    let checks = vec![
        report(
            "leader",
            CheckKind::Check,
            CheckState::Pass,
            "leader",
            "",
            Some(true.into()),
        ),
        report(
            "linearizable_read",
            CheckKind::Check,
            CheckState::Unknown,
            "qget_ms < 1000",
            "qget_ms unknown: last sample failed 1.2s ago: linearizable read: request timed out after 1s",
            None,
        ),
        report(
            "non_learner",
            CheckKind::Check,
            CheckState::Pass,
            "!learner",
            "",
            Some(false.into()),
        ),
        report(
            "nospace",
            CheckKind::Warn,
            CheckState::Fail,
            "!alarm_nospace",
            "!alarm_nospace is false (alarm_nospace = true)",
            Some(true.into()),
        ),
    ];
    Verdict {
        ready: Verdict::ready_from(&checks),
        reason: None,
        evaluated_at: at(1_700_000_012),
        checks,
    }
}

fn state() -> (AppState, EngineHandle) {
    state_with(Timing {
        sample_interval: Duration::from_secs(1),
        sample_timeout: Duration::from_millis(500),
    })
}

fn state_with(timing: Timing) -> (AppState, EngineHandle) {
    let catalogue = Arc::new(Catalogue::builtin());
    let policy = Policy::compile("<default>", DEFAULT_POLICY, &catalogue).unwrap();
    let store = Arc::new(SignalStore::new(&catalogue));
    let mut registry = Registry::default();
    let engine_metrics = EngineMetrics::register(&mut registry);
    let http_metrics = HttpMetrics::register(&mut registry);
    let registry = Arc::new(registry);
    let runtime = Runtime::new(Clock::node());
    let engine = EngineHandle::new(
        Arc::new(policy),
        catalogue.clone(),
        store.clone(),
        RoundNotifier::new(),
        engine_metrics,
        timing,
        runtime.clone(),
    );
    let holds = Holds::new(
        "main",
        4,
        CancellationToken::new(),
        http_metrics.long_polls(),
    );
    let st = AppState {
        holds,
        engine: engine.clone(),
        catalogue,
        store,
        registry,
        http_metrics,
        telemetry_path: "/metrics".to_string(),
        started: runtime.clock.now(),
        reloadables: Default::default(),
        candidate: None,
        runtime,
    };
    (st, engine)
}

async fn get(st: &AppState, uri: &str, accept: Option<&str>) -> (StatusCode, String, String) {
    let mut req = Request::get(uri);
    if let Some(a) = accept {
        req = req.header("accept", a);
    }
    let resp = app(st.clone())
        .oneshot(req.body(Body::empty()).unwrap())
        .await
        .unwrap();
    let status = resp.status();
    let ct = resp
        .headers()
        .get("content-type")
        .map(|v| v.to_str().unwrap().to_string())
        .unwrap_or_default();
    assert_eq!(
        resp.headers().get("x-content-type-options").unwrap(),
        "nosniff"
    );
    let body = resp.into_body().collect().await.unwrap().to_bytes();
    (status, ct, String::from_utf8(body.to_vec()).unwrap())
}

#[tokio::test]
async fn readyz_starting_is_503_with_the_reason() {
    let (st, _) = state();
    let (code, ct, body) = get(&st, "/readyz", None).await;
    assert_eq!(code, StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(ct, "text/plain; charset=utf-8");
    insta::assert_snapshot!(body, @r"
    [-]verdict failed: starting: the first sample round has not finished
    readyz check failed
    ");
}

#[tokio::test]
async fn readyz_failing_lists_every_check_and_warnings_never_fail() {
    let (st, engine) = state();
    engine.publish(failing_verdict());
    let (code, _, body) = get(&st, "/readyz", None).await;
    assert_eq!(code, StatusCode::SERVICE_UNAVAILABLE);
    insta::assert_snapshot!(body, @r"
    [+]leader ok
    [-]linearizable_read failed: qget_ms unknown: last sample failed 1.2s ago: linearizable read: request timed out after 1s
    [+]non_learner ok
    [+]nospace ok (warning: !alarm_nospace is false (alarm_nospace = true))
    readyz check failed
    ");
}

#[tokio::test]
async fn readyz_exclude_makes_it_pass_and_says_so() {
    let (st, engine) = state();
    engine.publish(failing_verdict());
    let (code, _, body) = get(&st, "/readyz?exclude=linearizable_read", None).await;
    assert_eq!(code, StatusCode::OK);
    assert_eq!(body, "ok");
    let (code, _, body) = get(
        &st,
        "/readyz?verbose&exclude=linearizable_read&exclude=nope",
        None,
    )
    .await;
    assert_eq!(code, StatusCode::OK);
    insta::assert_snapshot!(body, @r#"
    [+]leader ok
    [+]linearizable_read excluded: ok
    [+]non_learner ok
    [+]nospace ok (warning: !alarm_nospace is false (alarm_nospace = true))
    warn: some checks cannot be excluded: no matches for "nope"
    readyz check passed
    "#);
}

#[tokio::test]
async fn readyz_single_check_and_did_you_mean() {
    let (st, engine) = state();
    engine.publish(failing_verdict());
    let (code, _, body) = get(&st, "/readyz/leader", None).await;
    assert_eq!((code, body.as_str()), (StatusCode::OK, "ok"));
    let (code, _, body) = get(&st, "/readyz/nospace", None).await;
    assert_eq!(code, StatusCode::OK);
    assert!(body.starts_with("[+]nospace ok (warning:"), "{body}");
    let (code, _, body) = get(&st, "/readyz/linearizable_read", None).await;
    assert_eq!(code, StatusCode::SERVICE_UNAVAILABLE);
    assert!(body.starts_with("[-]linearizable_read failed: qget_ms unknown"));
    let (code, _, body) = get(&st, "/readyz/lineariable_read", None).await;
    assert_eq!(code, StatusCode::NOT_FOUND);
    insta::assert_snapshot!(body, @r#"no check named "lineariable_read"; did you mean "linearizable_read"? (checks: leader, linearizable_read, serializable_read, non_learner, data_corruption, nospace, apply_lag, not_defragmenting, db_quota)"#);
}

#[tokio::test]
async fn readyz_json_by_accept_header_and_format_param() {
    let (st, engine) = state();
    engine.publish(failing_verdict());
    let (code, ct, body) = get(&st, "/readyz", Some("application/json")).await;
    assert_eq!(code, StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(ct, "application/json");
    let (_, _, body2) = get(&st, "/readyz?format=json", None).await;
    assert_eq!(body, body2);
    let v: serde_json::Value = serde_json::from_str(&body).unwrap();
    // tests/snapshots/, named as when this file was its own test binary.
    insta::with_settings!(
        { snapshot_path => "../snapshots", prepend_module_to_snapshot => false },
        {
            insta::assert_snapshot!(
                "http_api__readyz_json_by_accept_header_and_format_param",
                serde_json::to_string_pretty(&v).unwrap()
            )
        }
    );
}

#[tokio::test]
async fn bodies_stay_under_10kb() {
    let (st, engine) = state();
    let mut v = failing_verdict();
    for i in 0..200 {
        let mut c = v.checks[1].clone();
        c.name = format!("check_{i}");
        c.explanation = "x".repeat(3000);
        v.checks.push(c);
    }
    engine.publish(v);
    let (_, _, text) = get(&st, "/readyz", None).await;
    assert!(text.len() <= 10_000, "{}", text.len());
    assert!(text.ends_with("readyz check failed\n"));
    let (_, _, json) = get(&st, "/readyz?format=json", None).await;
    assert!(json.len() <= 10_000, "{}", json.len());
    let parsed: serde_json::Value = serde_json::from_str(&json).unwrap();
    assert_eq!(parsed["ready"], false);
}

#[tokio::test]
async fn head_works_unknown_paths_404_and_metrics_negotiates() {
    let (st, engine) = state();
    engine.publish(failing_verdict());
    let resp = app(st.clone())
        .oneshot(Request::head("/readyz").body(Body::empty()).unwrap())
        .await
        .unwrap();
    assert_eq!(resp.status(), StatusCode::SERVICE_UNAVAILABLE);
    let (code, _, _) = get(&st, "/nope", None).await;
    assert_eq!(code, StatusCode::NOT_FOUND);
    let resp = app(st.clone())
        .oneshot(Request::post("/readyz").body(Body::empty()).unwrap())
        .await
        .unwrap();
    assert_eq!(resp.status(), StatusCode::METHOD_NOT_ALLOWED);
    let (_, ct, text) = get(&st, "/metrics", None).await;
    assert_eq!(ct, "text/plain; version=0.0.4; charset=utf-8");
    assert!(!text.contains("# EOF"));
    assert!(
        text.contains("# TYPE etcd_readiness_http_requests_total counter\n"),
        "{text}"
    );
    let (_, ct, om) = get(
        &st,
        "/metrics",
        Some("application/openmetrics-text; version=1.0.0"),
    )
    .await;
    assert_eq!(
        ct,
        "application/openmetrics-text; version=1.0.0; charset=utf-8"
    );
    assert!(om.ends_with("# EOF\n"));
    assert!(om.contains("# TYPE etcd_readiness_http_requests counter\n"));
}

#[tokio::test]
async fn a_verdict_older_than_three_intervals_plus_timeout_fails_readyz_and_livez() {
    // Stale after 3 * 500ms + 500ms = 2s; nothing re-evaluates in this test.
    // Verdicts are published with the age they should have, so nothing waits.
    let (st, engine) = state_with(Timing {
        sample_interval: Duration::from_millis(500),
        sample_timeout: Duration::from_millis(500),
    });
    let mut v = failing_verdict();
    v.checks.retain(|c| c.state == CheckState::Pass);
    v.ready = true;
    // A verdict from the future is as fresh as can be, whatever the machine's load.
    engine.publish_at(v.clone(), Instant::now() + Duration::from_secs(3600));
    let (code, _, _) = get(&st, "/readyz", None).await;
    assert_eq!(code, StatusCode::OK);
    // The same verdict, evaluated 3s ago: past the 2s bound.
    let three_s_ago = Instant::now()
        .checked_sub(Duration::from_secs(3))
        .expect("the monotonic clock is past 3s");
    engine.publish_at(v, three_s_ago);
    let (code, _, body) = get(&st, "/readyz", None).await;
    assert_eq!(code, StatusCode::SERVICE_UNAVAILABLE);
    assert!(
        body.starts_with("[-]verdict failed: verdict is stale: evaluator wedged"),
        "{body}"
    );
    let (code, _, body) = get(&st, "/livez?verbose", None).await;
    assert_eq!(code, StatusCode::SERVICE_UNAVAILABLE);
    assert!(body.starts_with("[-]evaluation failed"), "{body}");
}

/// The status page and `/history` render what the engine published (the
/// verdict, the history, the readings of its last evaluation), never the
/// signal store: a sample recorded after the last evaluation shows on
/// `/signals` (which reads the store) but not on the page until the engine
/// evaluates again.
#[tokio::test]
async fn the_status_page_renders_what_the_engine_published_not_the_store() {
    use etcd_readiness_policy::signals::{Source, Value};
    let (st, engine) = state();
    let learner = engine.catalogue().id("learner");
    engine
        .store()
        .record_ok(learner, Value::Bool(false), Instant::now());
    engine.notifier().round_finished(
        &Source::Etcd,
        Duration::from_secs(1),
        std::time::Instant::now(),
    );
    engine.evaluate_now();
    engine
        .store()
        .record_ok(learner, Value::Bool(true), Instant::now());
    let row = |page: &str| {
        let at = page.find("data-signal=\"learner\"").expect("learner row");
        let rest = &page[at..];
        rest[..rest.find("</tr>").unwrap()].to_string()
    };
    let (code, ct, page) = get(&st, "/", None).await;
    assert_eq!(code, StatusCode::OK);
    assert_eq!(ct, "text/html; charset=utf-8");
    assert!(
        row(&page).contains("data-l=\"value\">false<"),
        "{}",
        row(&page)
    );
    let (_, _, signals) = get(&st, "/signals", None).await;
    let v: serde_json::Value = serde_json::from_str(&signals).unwrap();
    let s = v
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["name"] == "learner")
        .unwrap();
    assert_eq!(s["value"], true, "/signals reads the store");
    engine.evaluate_now();
    let (_, _, live) = get(&st, "/?part=live", None).await;
    assert!(live.starts_with("<div id=\"live\""), "{live:.100}");
    assert!(!live.contains("<html"), "the fragment is not a whole page");
    assert!(
        row(&live).contains("data-l=\"value\">true<"),
        "{}",
        row(&live)
    );
    let (code, ct, history) = get(&st, "/history", None).await;
    assert_eq!((code, ct.as_str()), (StatusCode::OK, "application/json"));
    let h: serde_json::Value = serde_json::from_str(&history).unwrap();
    assert_eq!(h["transitions"][0]["state"], "not_ready", "{h}");
    assert_eq!(h["capacity"], 4096);
}

/// The values that once panicked the server at start (`/history`:
/// "Overlapping method route", `/{`, `/a}`, `/:x`, `/*x`), made it answer
/// every unknown path with the metrics (`/{x}`, `/{*x}`), made the metrics
/// unreachable (`/x/{a}/{a}`) or could never be requested (`/a b`,
/// `/metrics?x=1`). Each is refused by the check `serve` runs at start
/// (tests/hostile_sources.rs runs the binary); handed to `app` anyway, none
/// panics and unknown paths stay 404. A literal custom path serves the
/// metrics and nothing else.
#[tokio::test]
async fn telemetry_path_is_a_literal_path_never_a_pattern() {
    use etcd_readiness_exporter::http::telemetry_path_problem;
    let hostile = [
        "/history",
        "/{",
        "/a}",
        "/:x",
        "/*x",
        "/{x}",
        "/{*x}",
        "/x/{a}/{a}",
        "/a b",
        "/metrics?x=1",
        "/metrics#x",
        "/readyz/x",
        "/-/reload",
        "/",
        "metrics",
        "/a\u{1b}b",
        "/../metrics",
        "//",
        "/%2e%2e",
        "/a/./b",
    ];
    let (mut st, _) = state();
    for path in hostile {
        assert!(telemetry_path_problem(path).is_some(), "{path:?} accepted");
        st.telemetry_path = path.to_string();
        let (code, _, _) = get(&st, "/no/such/path", None).await;
        assert_eq!(code, StatusCode::NOT_FOUND, "{path:?}");
        let (code, _, _) = get(&st, "/x/1/2", None).await;
        assert_eq!(code, StatusCode::NOT_FOUND, "{path:?}");
    }
    for path in [
        "/metrics",
        "/x/metrics",
        "/metrics/",
        "/a:b",
        "/a*b",
        "/%7Bx%7D",
        "/a%20b",
        "/a.b/..c",
    ] {
        assert_eq!(telemetry_path_problem(path), None, "{path:?}");
    }
    st.telemetry_path = "/x/metrics".to_string();
    let (code, _, body) = get(&st, "/x/metrics", None).await;
    assert_eq!(code, StatusCode::OK);
    assert!(body.contains("etcd_readiness_"), "{body}");
    for other in ["/metrics", "/x/other", "/x"] {
        let (code, _, _) = get(&st, other, None).await;
        assert_eq!(code, StatusCode::NOT_FOUND, "{other}");
    }
}

/// Issue 21: 500 concurrent `POST /-/reload` spawned ~480 OS threads and
/// kept ~30 MB: each ran a reload of its own on the blocking pool. Now one
/// runs at a time and the requests arriving meanwhile wait for its answer.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_reloads_are_coalesced_into_one_in_flight() {
    use etcd_readiness_exporter::http::ReloadFlight;
    let flight = Arc::new(ReloadFlight::default());
    let gate = Arc::new(tokio::sync::Notify::new());
    let leader = {
        let (flight, gate) = (flight.clone(), gate.clone());
        tokio::spawn(async move {
            flight
                .run(move || async move {
                    gate.notified().await;
                    (StatusCode::OK, "policy reloaded once\n".to_string())
                })
                .await
        })
    };
    let within = Duration::from_secs(10);
    let flight_ref = &flight;
    poll(within, Duration::from_millis(5), || {
        let counts = flight_ref.counts();
        async move { if counts.0 >= 1 { Ok(()) } else { Err(counts) } }
    })
    .await
    .unwrap_or_else(|_| panic!("the first reload never started"));
    let mut followers = Vec::new();
    for _ in 0..500 {
        let flight = flight.clone();
        followers.push(tokio::spawn(async move {
            flight
                .run(|| async { (StatusCode::IM_A_TEAPOT, "a second reload ran\n".to_string()) })
                .await
        }));
    }
    let flight_ref = &flight;
    poll(within, Duration::from_millis(5), || {
        let counts = flight_ref.counts();
        async move { if counts.1 >= 500 { Ok(()) } else { Err(counts) } }
    })
    .await
    .unwrap_or_else(|counts| panic!("joined: {counts:?}"));
    gate.notify_one();
    let want = (StatusCode::OK, "policy reloaded once\n".to_string());
    assert_eq!(leader.await.unwrap(), want);
    for f in followers {
        assert_eq!(f.await.unwrap(), want);
    }
    assert_eq!(flight.counts(), (1, 500), "one reload for 501 requests");
    // Once it answered, the next request reloads anew.
    let again = flight
        .run(|| async { (StatusCode::OK, "policy unchanged\n".to_string()) })
        .await;
    assert_eq!(again.1, "policy unchanged\n");
    assert_eq!(flight.counts(), (2, 500));
}

#[tokio::test]
async fn readyz_says_where_a_recovery_hold_stands_in_text_and_json() {
    let (st, engine) = state();
    let mut v = failing_verdict();
    let mut lag = report(
        "apply_lag",
        CheckKind::Check,
        CheckState::Fail,
        "apply_lag < 5000",
        "recovering: true for 12s of 30s",
        Some(10.into()),
    );
    lag.recovering = true;
    lag.true_for = Some(Duration::from_secs(12));
    lag.recover_left = Some(Duration::from_secs(18));
    v.checks = vec![v.checks[0].clone(), lag];
    v.ready = Verdict::ready_from(&v.checks);
    engine.publish(v);
    let (code, _, body) = get(&st, "/readyz?verbose", None).await;
    assert_eq!(code, StatusCode::SERVICE_UNAVAILABLE);
    insta::assert_snapshot!(body, @r"
    [+]leader ok
    [-]apply_lag failed: recovering: true for 12s of 30s
    readyz check failed
    ");
    let (_, _, body) = get(&st, "/readyz/apply_lag", None).await;
    assert!(
        body.starts_with("[-]apply_lag failed: recovering: true for 12s of 30s\n"),
        "{body}"
    );
    let (_, _, body) = get(&st, "/readyz?format=json", None).await;
    let v: serde_json::Value = serde_json::from_str(&body).unwrap();
    let lag = &v["checks"][1];
    assert_eq!(lag["state"], "fail");
    assert_eq!(lag["recovering"], true);
    assert_eq!(lag["true_for"], 12.0);
    assert_eq!(lag["recover_left"], 18.0);
    assert_eq!(lag["explanation"], "recovering: true for 12s of 30s");
    assert_eq!(v["checks"][0]["recovering"], false);
    assert!(v["checks"][0].get("recover_left").is_none());
}

/// [`failing_verdict`] with every check passing (the warning still fails).
fn passing_verdict() -> Verdict {
    let mut v = failing_verdict();
    for c in v.checks.iter_mut().filter(|c| c.kind == CheckKind::Check) {
        c.state = CheckState::Pass;
        c.explanation.clear();
    }
    v.ready = true;
    v
}

/// A request `get` in a task of its own, answered within 10 s (a held
/// request's release is what the test waits for; the wait asked is longer).
fn spawn_get(
    st: &AppState,
    uri: &'static str,
) -> tokio::task::JoinHandle<(StatusCode, String, String)> {
    let st = st.clone();
    tokio::spawn(async move {
        tokio::time::timeout(Duration::from_secs(10), get(&st, uri, None))
            .await
            .unwrap_or_else(|_| panic!("{uri} was not answered within 10s"))
    })
}

async fn wait_held(st: &AppState, n: usize) {
    let holds = st.holds.clone();
    let held = poll(Duration::from_secs(5), Duration::from_millis(5), || {
        let holds = holds.clone();
        async move {
            if holds.held() == n {
                Ok(())
            } else {
                Err(holds.held())
            }
        }
    })
    .await;
    assert_eq!(held, Ok(()), "requests held");
}

/// `?wait=`: held only when the same request last got the answer it would
/// get now, released the moment a publication changes that answer (both
/// directions, whole verdict and one check), and a change published before
/// the request arrives is answered at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_long_poll_is_held_until_its_answer_changes_and_a_change_it_missed_is_answered_at_once() {
    let (st, engine) = state();
    engine.publish(passing_verdict());
    for uri in [
        "/readyz?wait=30s",
        "/readyz/linearizable_read?wait=30s&verbose",
    ] {
        // The first: nothing remembered, at once.
        assert_eq!(get(&st, uri, None).await.0, StatusCode::OK);
        // The second has the answer: held until it changes.
        let held = spawn_get(&st, uri);
        wait_held(&st, 1).await;
        engine.publish(failing_verdict());
        let (code, _, body) = held.await.unwrap();
        assert_eq!(code, StatusCode::SERVICE_UNAVAILABLE, "{body}");
        assert!(body.contains("linearizable_read failed"), "{body}");
        // And back, while held.
        let held = spawn_get(&st, uri);
        wait_held(&st, 1).await;
        engine.publish(passing_verdict());
        assert_eq!(held.await.unwrap().0, StatusCode::OK);
        // A change published before the request arrives: answered at once.
        engine.publish(failing_verdict());
        let (code, _, _) = get(&st, uri, None).await;
        assert_eq!(code, StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(st.holds.held(), 0);
        engine.publish(passing_verdict());
        assert_eq!(get(&st, uri, None).await.0, StatusCode::OK);
    }
    let (_, _, metrics) = get(&st, "/metrics", None).await;
    for line in [
        "etcd_readiness_http_long_polls_total{listener=\"main\",ended=\"changed\"} 4",
        "etcd_readiness_http_long_polls_total{listener=\"main\",ended=\"unseen\"} 6",
        "etcd_readiness_http_held_requests{listener=\"main\"} 0",
    ] {
        assert!(metrics.lines().any(|l| l == line), "{line} in\n{metrics}");
    }
}

/// A held request is answered when the verdict turns stale (a wedged engine
/// publishes nothing), and at once on the shutdown signal.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_held_long_poll_ends_when_the_verdict_turns_stale_and_at_the_shutdown_signal() {
    // Stale after 2 s (3 * 500ms + 500ms).
    let (st, engine) = state_with(Timing {
        sample_interval: Duration::from_millis(500),
        sample_timeout: Duration::from_millis(500),
    });
    let ago = Instant::now()
        .checked_sub(Duration::from_millis(1_000))
        .unwrap();
    engine.publish_at(passing_verdict(), ago);
    assert_eq!(get(&st, "/readyz?wait=30s", None).await.0, StatusCode::OK);
    let held = spawn_get(&st, "/readyz?wait=30s");
    let (code, _, body) = held.await.unwrap();
    assert_eq!(code, StatusCode::SERVICE_UNAVAILABLE);
    assert!(body.contains("verdict is stale"), "{body}");

    engine.publish(passing_verdict());
    assert_eq!(get(&st, "/readyz?wait=30s", None).await.0, StatusCode::OK);
    let held = spawn_get(&st, "/readyz?wait=30s");
    wait_held(&st, 1).await;
    st.holds.shutdown().cancel();
    let (code, _, _) = held.await.unwrap();
    assert_eq!(code, StatusCode::OK, "the verdict in force, at once");
}

/// `wait=` outside the duration grammar or over the maximum is a 400 that
/// says why; `/livez` is never held.
#[tokio::test]
async fn absurd_waits_are_a_400_and_livez_is_never_held() {
    let (st, engine) = state();
    engine.publish(passing_verdict());
    for (uri, says) in [
        ("/readyz?wait=1h", "longer than the limit of 30s"),
        ("/readyz/leader?wait=-1s", "is not a duration"),
        ("/readyz?wait=5", "is not a duration"),
        (
            "/readyz?wait=99999999999999999999999h",
            "longer than the limit",
        ),
    ] {
        let (code, _, body) = get(&st, uri, None).await;
        assert_eq!(code, StatusCode::BAD_REQUEST, "{uri}: {body}");
        assert!(body.starts_with("bad wait: "), "{uri}: {body}");
        assert!(body.contains(says), "{uri}: {body}");
    }
    assert_eq!(
        get(&st, "/readyz?wait=1h", None).await.2,
        "bad wait: `1h` is longer than the limit of 30s; wait=DURATION holds the answer until it changes, at most 30s (e.g. wait=5s)\n"
    );
    for _ in 0..2 {
        let livez = get(&st, "/livez?wait=30s", None);
        let (code, _, body) = tokio::time::timeout(Duration::from_secs(5), livez)
            .await
            .expect("/livez ignores wait=");
        assert_ne!(code, StatusCode::BAD_REQUEST, "{body}");
    }
    // wait=0s is no wait.
    assert_eq!(get(&st, "/readyz?wait=0s", None).await.0, StatusCode::OK);
    assert_eq!(get(&st, "/readyz?wait=0s", None).await.0, StatusCode::OK);
}

/// Issue 45: `wait=5%00s` echoed a raw NUL in its 400. A bad query value is
/// shown escaped (as Rust's `{:?}` escapes a string) and cut in every 400
/// of the query parameters, text and JSON: no control character reaches the
/// client raw, none forges a line, and no value grows the body unbounded.
#[tokio::test]
async fn a_bad_query_value_is_shown_escaped_in_every_400() {
    let (st, engine) = state();
    engine.publish(passing_verdict());
    let long = format!("/readyz?wait={}", "9".repeat(60_000));
    for (uri, shown) in [
        ("/readyz?wait=5%00s", r"bad wait: `5\0s` is not a duration"),
        (
            "/readyz/leader?wait=1%1b[31m%0d%0aforged",
            r"bad wait: `1\u{1b}[31m\r\nforged` is not a duration",
        ),
        (
            "/readyz?wait=%7f99h",
            r"bad wait: `\u{7f}99h` is not a duration",
        ),
        (
            "/readyz?policy=live%00%0a",
            r#"unknown policy "live\0\n": use policy=live"#,
        ),
        (long.as_str(), "… (59800 bytes cut)` is not a duration"),
    ] {
        for format in ["", "&format=json"] {
            let uri = format!("{uri}{format}");
            let (code, _, body) = get(&st, &uri, None).await;
            assert_eq!(code, StatusCode::BAD_REQUEST, "{uri}: {body}");
            let text = if format.is_empty() {
                body.clone()
            } else {
                let v: serde_json::Value = serde_json::from_str(&body).unwrap();
                v["error"].as_str().unwrap().to_string()
            };
            assert!(text.contains(shown), "{uri}: {text}");
            assert!(
                !text.trim_end().chars().any(|c| c.is_control()),
                "{uri}: {text:?}"
            );
            assert!(body.len() < 1000, "{uri}: {} bytes", body.len());
        }
    }
}

/// One answer as docs/http.md shows it: the `curl` that asks, the status
/// line and content type, a blank line, the body.
async fn example(st: &AppState, uri: &str, json: bool) -> String {
    let (code, ct, body) = get(st, uri, json.then_some("application/json")).await;
    let accept = if json {
        "-H 'Accept: application/json' "
    } else {
        ""
    };
    format!(
        "$ curl -si {accept}'http://localhost:9379{uri}'\nHTTP/1.1 {code}\ncontent-type: {ct}\n\n{body}"
    )
}

/// docs/http.md's `/readyz`, `/readyz/NAME`, `/livez` and long-poll
/// examples (`http_doc` compares the page with these snapshots).
#[tokio::test]
async fn doc_examples_of_readyz_and_livez() {
    use crate::http_doc::assert_example;
    let (st, engine) = state();
    engine.publish(passing_verdict());
    for (name, uri) in [
        ("http_doc__readyz_ready_verbose", "/readyz?verbose"),
        (
            "http_doc__readyz_unknown_check",
            "/readyz/linearizable_reed",
        ),
        ("http_doc__readyz_bad_wait", "/readyz?wait=1h"),
    ] {
        assert_example(name, example(&st, uri, false).await);
    }
    engine.publish(failing_verdict());
    for (name, uri, json) in [
        ("http_doc__readyz_failing", "/readyz", false),
        ("http_doc__readyz_failing_json", "/readyz", true),
        (
            "http_doc__readyz_exclude",
            "/readyz?verbose&exclude=linearizable_read",
            false,
        ),
        (
            "http_doc__readyz_check_failing",
            "/readyz/linearizable_read",
            false,
        ),
        (
            "http_doc__readyz_warn_check",
            "/readyz/nospace?verbose",
            false,
        ),
        ("http_doc__livez_verbose", "/livez?verbose", false),
    ] {
        assert_example(name, example(&st, uri, json).await);
    }
    // `linearizable_read` true again, held failing by a recovery hold.
    let mut v = failing_verdict();
    let read = &mut v.checks[1];
    read.state = CheckState::Fail;
    read.explanation = "recovering: true for 12s of 30s".to_string();
    read.signals[0].value = Some(0.9.into());
    (read.recovering, read.true_for) = (true, Some(Duration::from_secs(12)));
    read.recover_left = Some(Duration::from_secs(18));
    engine.publish(v);
    for (name, json) in [
        ("http_doc__readyz_check_recovering", false),
        ("http_doc__readyz_check_recovering_json", true),
    ] {
        assert_example(name, example(&st, "/readyz/linearizable_read", json).await);
    }
}

/// docs/http.md's `/signals`, `/policy` and `/history` examples: `/signals`
/// cut to three signals (one known, one failed, one with a read in flight),
/// `/policy`'s text to its first line, `/history` after one evaluation to
/// the readiness and `leader` lanes.
#[tokio::test]
async fn doc_examples_of_signals_policy_and_history() {
    use crate::http_doc::assert_example;
    use etcd_readiness_policy::signals::Value;
    let (st, engine) = state();
    let (store, cat) = (engine.store(), engine.catalogue());
    let now = Instant::now();
    let ago = |ms| now.checked_sub(Duration::from_millis(ms)).unwrap();
    store.record_ok(cat.id("leader"), Value::Bool(true), ago(400));
    let qget = cat.id("qget_ms");
    store.record_ok(qget, Value::Num(0.9), ago(4_800));
    store.record_err(
        qget,
        "linearizable read: request timed out after 1s".into(),
        ago(800),
    );
    let sget = cat.id("sget_ms");
    store.record_ok(sget, Value::Num(0.3), ago(300));
    store.record_pending(
        sget,
        ago(200),
        Some(1000.0),
        Duration::from_millis(100),
        "read",
    );
    engine.notifier().round_finished(
        &etcd_readiness_policy::signals::Source::Etcd,
        Duration::from_secs(1),
        Instant::now(),
    );
    engine.evaluate_now();
    let (_, _, body) = get(&st, "/signals", None).await;
    let all: Vec<serde_json::Value> = serde_json::from_str(&body).unwrap();
    let excerpt: Vec<&serde_json::Value> = all
        .iter()
        .filter(|s| ["leader", "qget_ms", "sget_ms"].contains(&s["name"].as_str().unwrap()))
        .collect();
    assert_example(
        "http_doc__signals",
        format!(
            "$ curl -s 'http://localhost:9379/signals'\n{}",
            serde_json::to_string_pretty(&excerpt).unwrap()
        ),
    );
    let (_, _, body) = get(&st, "/policy", None).await;
    let mut policy: serde_json::Value = serde_json::from_str(&body).unwrap();
    let first = policy["text"]
        .as_str()
        .unwrap()
        .lines()
        .next()
        .unwrap()
        .to_string();
    policy["text"] = format!("{first}\n…").into();
    assert_example(
        "http_doc__policy",
        format!(
            "$ curl -s 'http://localhost:9379/policy'\n{}",
            serde_json::to_string_pretty(&policy).unwrap()
        ),
    );
    let (_, _, body) = get(&st, "/history", None).await;
    let mut history: serde_json::Value = serde_json::from_str(&body).unwrap();
    for lanes in ["current", "transitions"] {
        history[lanes]
            .as_array_mut()
            .unwrap()
            .retain(|l| ["readiness", "leader"].contains(&l["name"].as_str().unwrap()));
    }
    assert_example(
        "http_doc__history",
        format!(
            "$ curl -s 'http://localhost:9379/history'\n{}",
            serde_json::to_string_pretty(&history).unwrap()
        ),
    );
}

/// `?wait=` on tokio's paused clock, through the router, with no socket and
/// no sleep: the HTTP layer reads the runtime's clock like the engine, so
/// the hold is virtual time. A request its client has seen the answer of is
/// held; it is released the moment the verdict changes, at the end of its
/// wait (to the millisecond), and at once on shutdown.
#[tokio::test(start_paused = true)]
async fn a_long_poll_on_virtual_time_is_held_then_released_on_change_at_its_wait_and_on_shutdown() {
    // A long interval: the verdict does not turn stale within these waits.
    let (st, engine) = state_with(Timing {
        sample_interval: Duration::from_secs(60),
        sample_timeout: Duration::from_secs(1),
    });
    let clock = st.runtime.clock.clone();
    let ask = |st: &AppState| {
        let st = st.clone();
        tokio::spawn(async move { get(&st, "/readyz?wait=5s", None).await.0 })
    };
    engine.publish(passing_verdict());
    // Unseen: answered at once.
    assert_eq!(ask(&st).await.unwrap(), StatusCode::OK);

    // Seen: held; released the moment the verdict changes.
    let t0 = clock.now();
    let held = ask(&st);
    tokio::time::sleep(Duration::from_millis(1_500)).await;
    assert!(!held.is_finished(), "held while the answer is the same");
    engine.publish(failing_verdict());
    assert_eq!(held.await.unwrap(), StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(clock.now() - t0, Duration::from_millis(1_500));

    // Seen again: held to the end of its wait, not a millisecond less.
    let t0 = clock.now();
    let held = ask(&st);
    tokio::time::sleep(Duration::from_millis(4_999)).await;
    assert!(!held.is_finished(), "held until the wait ends");
    assert_eq!(held.await.unwrap(), StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(clock.now() - t0, Duration::from_secs(5));

    // Held, then the shutdown: answered at once.
    let t0 = clock.now();
    let held = ask(&st);
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert!(!held.is_finished());
    st.holds.shutdown().cancel();
    assert_eq!(held.await.unwrap(), StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(clock.now() - t0, Duration::from_millis(100));
}
