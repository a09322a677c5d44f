//! The status page in a real browser: headless Chromium (Debian `chromium`)
//! loads `/` from the real `serve` pipeline on a real single-member etcd,
//! once healthy and once after the member was killed, takes screenshots at
//! 1280×800 and at a phone's width (kept in `target/tmp/status-page/`), and
//! the DOM it built is checked: every check of the policy in the checks
//! table and in the timeline, the failing checks with their explanations,
//! every configured signal of the catalogue in the signals table, the
//! script's refresh swapping in `?part=live`, and the page without
//! JavaScript; and, with a candidate policy, its lanes beside the live ones
//! and its disagreement so far. Every wait has a deadline; Chromium runs
//! under one too.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use etcd_readiness_exporter::engine::history::LaneState;
use etcd_readiness_exporter::http::page::timeline::MIN_SPAN;
use etcd_readiness_testkit::etcd::EtcdCluster;
use etcd_readiness_testkit::exporter::Exporter;
use etcd_readiness_testkit::wait::{poll, poll_blocking};

/// The step of the waits for the lanes to settle.
const STEP: Duration = Duration::from_millis(200);
const WAIT: Duration = Duration::from_secs(20);
/// Longest a Chromium run may take (a loaded 2-core machine).
const BROWSER_DEADLINE: Duration = Duration::from_secs(90);

/// The default policy plus a warning that always fails (the database is
/// never under one byte), so the healthy page has a failing row with an
/// explanation and a `fail` span too.
const POLICY: &str = concat!(
    include_str!("../../policies/default.policy"),
    "\n# The status page test: a warning that never passes.\nwarn tiny_db: db_size_bytes < 1\n"
);

fn artifacts() -> PathBuf {
    let d = Path::new(env!("CARGO_TARGET_TMPDIR")).join("status-page");
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// Run Chromium headless with `args` on `url`; its stdout. Killed at the deadline.
async fn chromium(url: String, args: Vec<String>) -> String {
    tokio::task::spawn_blocking(move || {
        let profile = tempfile::tempdir().unwrap();
        let mut child = Command::new("chromium")
            .args([
                "--headless",
                "--no-sandbox",
                "--disable-gpu",
                "--disable-quic",
                "--no-first-run",
                "--disable-background-networking",
                "--disable-component-update",
                "--disable-sync",
                "--hide-scrollbars",
            ])
            .arg(format!("--user-data-dir={}", profile.path().display()))
            .args(&args)
            .arg(&url)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::from(
                std::fs::OpenOptions::new()
                    .create(true)
                    .append(true)
                    .open(artifacts().join("chromium.log"))
                    .unwrap(),
            ))
            .spawn()
            .expect("chromium (apt-get install chromium; see .ci/packages.sh)");
        let mut stdout = child.stdout.take().unwrap();
        let reader = std::thread::spawn(move || {
            let mut s = String::new();
            let _ = std::io::Read::read_to_string(&mut stdout, &mut s);
            s
        });
        let exited = poll_blocking(BROWSER_DEADLINE, Duration::from_millis(50), || {
            child.try_wait().unwrap().ok_or(())
        });
        match exited {
            Ok(st) => assert!(st.success(), "chromium {args:?} exited with {st}"),
            Err(()) => {
                let _ = child.kill();
                let _ = child.wait();
                panic!("chromium {args:?} did not finish within {BROWSER_DEADLINE:?}");
            }
        }
        reader.join().unwrap()
    })
    .await
    .unwrap()
}

/// The DOM after scripts ran for `virtual_ms` of virtual time.
async fn dom(url: &str, virtual_ms: u32) -> String {
    let args = vec![
        "--window-size=1280,800".to_string(),
        format!("--virtual-time-budget={virtual_ms}"),
        "--dump-dom".to_string(),
    ];
    let d = chromium(url.to_string(), args).await;
    assert!(d.contains("</html>"), "no DOM from chromium: {d:.500}");
    d
}

async fn screenshot(url: &str, name: &str, size: (u32, u32)) -> PathBuf {
    let path = artifacts().join(format!("{name}-{}x{}.png", size.0, size.1));
    let _ = std::fs::remove_file(&path);
    chromium(
        url.to_string(),
        vec![
            format!("--window-size={},{}", size.0, size.1),
            "--virtual-time-budget=2000".to_string(),
            format!("--screenshot={}", path.display()),
        ],
    )
    .await;
    let png = std::fs::read(&path).expect("chromium wrote the screenshot");
    assert!(
        png.starts_with(b"\x89PNG"),
        "{} is not a PNG",
        path.display()
    );
    // A blank page compresses to a few kB; a rendered one does not.
    assert!(
        png.len() > 20_000,
        "{} is only {} bytes",
        path.display(),
        png.len()
    );
    path
}

/// The part of `dom` from the element with `id` to the end of its table.
fn table<'a>(dom: &'a str, id: &str) -> &'a str {
    let start = dom
        .find(&format!("id=\"{id}\""))
        .unwrap_or_else(|| panic!("no #{id} in the DOM"));
    let rest = &dom[start..];
    &rest[..rest.find("</table>").unwrap_or(rest.len())]
}

/// The `<tr>` of a table whose attribute `attr` is `value`.
fn row<'a>(table: &'a str, attr: &str, value: &str) -> &'a str {
    let start = table
        .find(&format!("{attr}=\"{value}\""))
        .unwrap_or_else(|| panic!("no row {attr}={value}"));
    let rest = &table[start..];
    &rest[..rest.find("</tr>").unwrap_or(rest.len())]
}

/// Text with tags removed (entities kept).
fn text(html: &str) -> String {
    let mut out = String::new();
    let mut in_tag = false;
    for c in html.chars() {
        match c {
            '<' => in_tag = true,
            '>' => in_tag = false,
            c if !in_tag => out.push(c),
            _ => {}
        }
    }
    out
}

/// Wait until every lane named in `want` has been in its state for longer
/// than [`MIN_SPAN`], so the timeline draws it as its own labelled span
/// rather than as part of a "flapping" run.
async fn wait_settled(e: &Exporter, want: &[(&str, LaneState)]) {
    let settled = poll(MIN_SPAN + WAIT, STEP, || async move {
        let h = e.running.engine.history().snapshot();
        let now = std::time::SystemTime::now();
        let settled = want.iter().all(|(name, state)| {
            h.current.iter().any(|(l, s, since)| {
                l.name() == *name
                    && s == state
                    && now.duration_since(*since).unwrap_or_default()
                        > MIN_SPAN + Duration::from_secs(1)
            })
        });
        if settled {
            Ok(())
        } else {
            Err(h.current.clone())
        }
    })
    .await;
    if let Err(current) = settled {
        panic!("lanes not settled in {want:?}: {current:?}");
    }
}

/// Every check of the policy in the table and in the timeline; every
/// enabled signal in the signals table.
async fn assert_complete(dom: &str, e: &Exporter) {
    let policy = e.running.engine.policy_status();
    let checks = table(dom, "checks-table");
    let timeline = table(dom, "timeline-table");
    assert!(!policy.policy.checks().is_empty());
    for c in policy.policy.checks() {
        row(checks, "data-check", &c.name);
        let lane = row(timeline, "data-lane", &format!("check:{}", c.name));
        assert!(
            lane.contains("<svg x="),
            "lane {} has no span: {lane}",
            c.name
        );
    }
    let lane = row(timeline, "data-lane", "readiness");
    assert!(lane.contains("<text"), "readiness spans carry text labels");
    let signals = table(dom, "signals-table");
    let cat = e.running.engine.catalogue();
    let mut configured = 0;
    for (id, def) in cat.iter() {
        if cat.is_enabled(id) {
            configured += 1;
            row(signals, "data-signal", &def.name);
        } else {
            assert!(
                !signals.contains(&format!("data-signal=\"{}\"", def.name)),
                "{} is not configured but listed",
                def.name
            );
        }
    }
    assert!(configured >= 10, "only {configured} signals configured");
    assert_eq!(signals.matches("data-signal=").count(), configured);
    // The policy in force, escaped, and its hash.
    assert!(dom.contains(policy.policy.sha256()));
    assert!(dom.contains("warn tiny_db: db_size_bytes &lt; 1"));
    for link in [
        "./readyz?verbose",
        "./livez?verbose",
        "./signals",
        "./policy",
        "./history",
        "./metrics",
    ] {
        assert!(dom.contains(&format!("href=\"{link}\"")), "no link {link}");
    }
}

// Long because: one member and one headless Chromium, healthy then faulty: the fault phase reads what the healthy one rendered.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_status_page_in_headless_chromium_healthy_and_after_a_fault() {
    let mut cluster = EtcdCluster::builder(1).start();
    let dir = tempfile::tempdir().unwrap();
    let policy = dir.path().join("status.policy");
    std::fs::write(&policy, POLICY).unwrap();
    let e = Exporter::start(&cluster.endpoint(0), |a| a.policy = Some(policy)).await;
    let r = e.wait_for("/readyz", 200, WAIT).await;
    assert_eq!(r.status, 200, "{}", r.body);
    // The warning has been evaluated with a value (db_size_bytes known).
    e.wait_until("/readyz?format=json", WAIT, |r| {
        r.body.contains("db_size_bytes < 1 is false")
    })
    .await;
    let url = format!("{}/", e.url());
    wait_settled(
        &e,
        &[("readiness", LaneState::Ready), ("leader", LaneState::Pass)],
    )
    .await;

    // Healthy, with JavaScript: the script swapped in `?part=live` at least
    // once within 12 s of virtual time.
    let healthy = dom(&url, 12_000).await;
    assert_complete(&healthy, &e).await;
    assert!(
        healthy.contains("data-verdict=\"ready\""),
        "banner: {}",
        table(&healthy, "verdict")
    );
    assert!(text(table(&healthy, "verdict")).contains("This member is READY since"));
    let tiny = row(table(&healthy, "checks-table"), "data-check", "tiny_db");
    assert!(tiny.contains("data-state=\"fail\""), "{tiny}");
    assert!(
        text(tiny).contains("db_size_bytes &lt; 1 is false (db_size_bytes = "),
        "the failing warning shows its explanation: {tiny}"
    );
    let upd = &healthy[healthy.find("id=\"upd\"").unwrap()..];
    assert!(
        upd[..200].contains("live: updated"),
        "the script did not refresh: {:.200}",
        upd
    );
    for size in [(1280, 800), (390, 844)] {
        screenshot(&url, "healthy", size).await;
    }

    // Without JavaScript the page is what the server sent (headless
    // Chromium cannot dump a DOM with scripts off): the same content, and
    // the meta refresh that only applies then.
    let nojs = e.get("/").await.body;
    assert_complete(&nojs, &e).await;
    assert!(nojs.contains("<noscript><meta http-equiv=\"refresh\""));
    assert!(nojs.contains("id=\"upd\">refreshes every"));

    // The fault: the member is killed; every etcd signal turns unknown and
    // the checks on them say why.
    cluster.kill(0);
    let r = e.wait_for("/readyz", 503, WAIT).await;
    assert_eq!(r.status, 503, "{}", r.body);
    wait_settled(
        &e,
        &[
            ("readiness", LaneState::NotReady),
            ("leader", LaneState::Unknown),
        ],
    )
    .await;
    let faulty = dom(&url, 1_000).await;
    assert_complete(&faulty, &e).await;
    assert!(faulty.contains("data-verdict=\"notready\""));
    let banner = text(table(&faulty, "verdict"));
    assert!(
        banner.contains("This member is NOT READY since"),
        "{banner}"
    );
    assert!(
        banner.contains("leader"),
        "the banner names failing checks: {banner}"
    );
    let checks = table(&faulty, "checks-table");
    let leader = row(checks, "data-check", "leader");
    assert!(leader.contains("data-state=\"unknown\""), "{leader}");
    assert!(
        text(leader).contains("leader unknown: "),
        "the failing check shows its explanation: {}",
        text(leader)
    );
    // The timeline shows both states of readiness, labelled in text.
    let lane = row(table(&faulty, "timeline-table"), "data-lane", "readiness");
    assert!(
        lane.contains(">ready</text>") && lane.contains(">not ready</text>"),
        "{lane}"
    );
    let leader_lane = row(
        table(&faulty, "timeline-table"),
        "data-lane",
        "check:leader",
    );
    assert!(
        leader_lane.contains(">pass</text>") && leader_lane.contains(">unknown</text>"),
        "{leader_lane}"
    );
    // The signals table has the error.
    let up = row(table(&faulty, "signals-table"), "data-signal", "leader");
    assert!(text(up).contains("unknown"), "{up}");
    for size in [(1280, 800), (390, 844)] {
        screenshot(&url, "fault", size).await;
    }

    // `/history` is the same buffer as JSON.
    let h: serde_json::Value = serde_json::from_str(&e.get("/history").await.body).unwrap();
    assert_eq!(h["capacity"], 4096);
    let states: Vec<&str> = h["transitions"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|t| t["kind"] == "readiness")
        .map(|t| t["state"].as_str().unwrap())
        .collect();
    // Starting (unless the first etcd round landed before the first
    // evaluation), possibly not ready while the first samples come in, then
    // ready, and not ready after the kill.
    let allowed: &[&[&str]] = &[
        &["starting", "ready", "not_ready"],
        &["starting", "not_ready", "ready", "not_ready"],
        &["not_ready", "ready", "not_ready"],
        // The first etcd round landed before the first evaluation (CI saw
        // the member ready 53 ms after the exporter started).
        &["ready", "not_ready"],
    ];
    assert!(allowed.contains(&states.as_slice()), "{states:?} in {h}");
    e.running.shutdown().await;
}

/// With `--policy.candidate`: the candidate's lanes under the live ones and
/// its disagreement so far, in the browser, while the member is ready.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_candidates_lanes_and_disagreement_in_headless_chromium() {
    let cluster = EtcdCluster::builder(1).start();
    let dir = tempfile::tempdir().unwrap();
    let (policy, candidate) = (dir.path().join("policy"), dir.path().join("candidate"));
    std::fs::write(&policy, "check leader: leader\n").unwrap();
    // Would fail on the single member, which leads its cluster.
    std::fs::write(
        &candidate,
        "check leader: leader\ncheck not_leader: !leader\n",
    )
    .unwrap();
    let e = Exporter::start(&cluster.endpoint(0), |a| {
        a.policy = Some(policy);
        a.policy_candidate = Some(candidate);
    })
    .await;
    let r = e.wait_for("/readyz", 200, WAIT).await;
    assert_eq!(r.status, 200, "{}", r.body);
    wait_settled(&e, &[("readiness", LaneState::Ready)]).await;
    // The candidate's lanes are recorded by the same engine, from the same evaluations.
    let exporter = &e;
    let settled = poll(WAIT, STEP, || async move {
        let h = exporter.running.engine.candidate_history().snapshot();
        let now = std::time::SystemTime::now();
        let settled = [
            ("readiness", LaneState::NotReady),
            ("not_leader", LaneState::Fail),
        ]
        .iter()
        .all(|(name, state)| {
            h.current.iter().any(|(l, s, since)| {
                l.name() == *name
                    && s == state
                    && now.duration_since(*since).unwrap_or_default() > MIN_SPAN
            })
        });
        if settled {
            Ok(())
        } else {
            Err(h.current.clone())
        }
    })
    .await;
    if let Err(current) = settled {
        panic!("candidate lanes: {current:?}");
    }
    let url = format!("{}/", e.url());
    let page = dom(&url, 1_000).await;
    let timeline = table(&page, "timeline-table");
    let live = row(timeline, "data-lane", "readiness");
    assert!(live.contains(">ready</text>"), "{live}");
    let cand = row(timeline, "data-lane", "candidate:readiness");
    assert!(cand.contains(">not ready</text>"), "{cand}");
    let own = row(timeline, "data-lane", "candidate:check:not_leader");
    assert!(own.contains(">fail</text>"), "{own}");
    row(timeline, "data-lane", "candidate:check:leader");
    assert!(
        !timeline.contains("data-lane=\"check:not_leader\""),
        "the live lanes are the live policy's: {timeline}"
    );
    assert!(
        page.contains("data-verdict=\"ready\""),
        "the banner is the live verdict"
    );
    let meta = table(&page, "candidate-meta");
    assert!(meta.contains("data-verdict=\"notready\""), "{meta}");
    // The disagreement so far: at least the settled span above.
    let said = text(meta);
    assert!(
        said.contains("disagreement so farwould fail while ready ")
            && !said.contains("would fail while ready 0ms"),
        "{said}"
    );
    assert!(said.contains("would pass while unready 0ms"), "{said}");
    for size in [(1280, 800), (390, 844)] {
        screenshot(&url, "candidate", size).await;
    }
    e.running.shutdown().await;
}
