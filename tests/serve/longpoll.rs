//! Long-poll readiness as the kubelet meets it: a sequential prober (one
//! request at a time, a new connection each, the client timeout and period
//! of the stanza the kustomize component ships, read from it) against the
//! exporter's probe listener, a real etcd, and policy reloads that flip the
//! verdict. It sees each change while its request is held (both
//! directions), a change made just before a probe arrives is answered at
//! once, and held requests are answered at the shutdown signal. A head
//! trickled in behind a held request is cut at the header timeout.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use etcd_readiness_exporter::outside::http_client;
use etcd_readiness_testkit::etcd::Etcd;
use etcd_readiness_testkit::exporter::{Exporter, metric_line, post};
use etcd_readiness_testkit::wait::poll;

const READY: &str = "check leader: leader\n";
/// How long a GET of a long poll may take: past the longest wait these
/// tests ask for (30 s), so that the server, not the client, ends each one
/// (whether it was answered at once shows in the exporter's counters).
const LONG_POLL: Duration = Duration::from_secs(40);
const NOT_READY: &str = "check not_leader: !leader\n";

/// The readinessProbe the sidecar component gives etcd's container.
#[derive(Debug)]
struct Stanza {
    path: String,
    period: Duration,
    timeout: Duration,
    failure_threshold: u32,
    success_threshold: u32,
}

fn shipped_stanza() -> Stanza {
    let file = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/deploy/kustomize/components/sidecar/etcd-probe.yaml"
    );
    let text = std::fs::read_to_string(file).expect("the component's probe patch");
    let field = |name: &str| -> String {
        text.lines()
            .filter(|l| !l.trim_start().starts_with('#'))
            .find_map(|l| l.trim().strip_prefix(&format!("{name}:")))
            .unwrap_or_else(|| panic!("{name} not in {file}"))
            .trim()
            .to_string()
    };
    let secs = |name: &str| Duration::from_secs(field(name).parse().expect(name));
    Stanza {
        path: field("path"),
        period: secs("periodSeconds"),
        timeout: secs("timeoutSeconds"),
        failure_threshold: field("failureThreshold").parse().unwrap(),
        success_threshold: field("successThreshold").parse().unwrap(),
    }
}

/// One probe as the prober saw it.
#[derive(Clone, Debug)]
struct Probe {
    sent: Instant,
    answered: Instant,
    /// `None`: the client timeout or a transport error (a failure).
    status: Option<u16>,
}

/// The kubelet's prober loop (pkg/kubelet/prober/worker.go): probe, then
/// wait for the ticker of `periodSeconds`, which keeps one missed tick (a
/// probe that outlived the period is followed at once by the next). Each
/// probe is a new connection under the client timeout (pkg/probe/http).
fn spawn_prober(
    addr: SocketAddr,
    stanza: &Stanza,
    log: Arc<Mutex<Vec<Probe>>>,
) -> tokio::task::JoinHandle<()> {
    let (path, period, timeout) = (stanza.path.clone(), stanza.period, stanza.timeout);
    tokio::spawn(async move {
        let mut ticker = tokio::time::interval(period);
        // Go's ticker: the tick due during a long probe fires at once, the
        // next on the original phase.
        ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
        loop {
            ticker.tick().await;
            let sent = Instant::now();
            let answer = http_client::get_at(addr, &path, None, timeout).await;
            let status = answer.ok().map(|a| a.status.as_u16());
            let answered = Instant::now();
            log.lock().unwrap().push(Probe {
                sent,
                answered,
                status,
            });
        }
    })
}

/// `GET path` within `within`: (status, body); panics naming the path
/// when it is not answered (cut off, or not within `within`).
async fn get(addr: SocketAddr, path: &str, within: Duration) -> (u16, String) {
    let answer = http_client::get_at(addr, path, None, within).await;
    let answer = answer.unwrap_or_else(|e| panic!("GET {path} not answered: {e}"));
    (answer.status.as_u16(), answer.body)
}

async fn long_polls(e: &Exporter, ended: &str) -> u64 {
    let line = e
        .metric(&format!(
            "etcd_readiness_http_long_polls_total{{listener=\"probe\",ended=\"{ended}\"}}"
        ))
        .await;
    line.rsplit(' ').next().unwrap().parse().unwrap()
}

async fn wait_held(e: &Exporter, n: u64, why: &str) {
    let name = "etcd_readiness_http_held_requests{listener=\"probe\"}";
    let held = poll(
        Duration::from_secs(20),
        Duration::from_millis(20),
        || async {
            let line = metric_line(&e.get("/metrics").await.body, name);
            if line.ends_with(&format!(" {n}")) {
                Ok(())
            } else {
                Err(line)
            }
        },
    )
    .await;
    if let Err(line) = held {
        e.explain(why).await;
        panic!("{why}: {line}");
    }
}

/// Write the policy and reload it, then wait until the main listener's
/// `/readyz` (a request of its own, never held) says `status`.
async fn set_policy(e: &Exporter, file: &std::path::Path, text: &str, status: u16) -> Instant {
    std::fs::write(file, text).unwrap();
    let at = Instant::now();
    let (code, body) = post(e.addr(), "/-/reload").await;
    assert_eq!(code, 200, "{body}");
    let r = e.wait_for("/readyz", status, Duration::from_secs(10)).await;
    assert_eq!(r.status, status, "{}", r.body);
    at
}

/// The first probe sent before `flip` whose answer is `status`.
fn held_through(log: &Arc<Mutex<Vec<Probe>>>, flip: Instant, status: u16) -> Option<Probe> {
    log.lock()
        .unwrap()
        .iter()
        .find(|p| p.sent < flip && p.answered >= flip && p.status == Some(status))
        .cloned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sequential_prober_with_the_shipped_stanza_sees_each_change_while_held() {
    let stanza = shipped_stanza();
    assert_eq!(
        (
            stanza.period,
            stanza.failure_threshold,
            stanza.success_threshold
        ),
        (Duration::from_secs(1), 1, 1),
        "the shipped stanza passes the verdict through: {stanza:?}"
    );
    let wait = stanza
        .path
        .split_once("wait=")
        .map(|(_, w)| w.trim_end_matches('s').parse::<u64>().expect("wait=Ns"))
        .map(Duration::from_secs)
        .expect("the shipped path asks to wait");
    assert!(stanza.timeout > wait, "{stanza:?}");

    let etcd = Etcd::start().await;
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("policy");
    std::fs::write(&file, READY).unwrap();
    let path = file.clone();
    let e = Exporter::start(&etcd.client_url, move |a| {
        a.policy = Some(path);
        a.web_probe_listen_address = Some("127.0.0.1:0".into());
    })
    .await;
    let probe_addr = e.running.probe_addr.expect("probe listener");
    e.wait_for("/readyz", 200, Duration::from_secs(20)).await;

    let log = Arc::new(Mutex::new(Vec::new()));
    let prober = spawn_prober(probe_addr, &stanza, log.clone());

    // Ready -> not ready while the prober's request is held.
    wait_held(&e, 1, "the prober's second probe is held").await;
    let flip = set_policy(&e, &file, NOT_READY, 503).await;
    let seen = poll(
        Duration::from_secs(10),
        Duration::from_millis(20),
        || async { held_through(&log, flip, 503).ok_or(()) },
    )
    .await;
    assert!(
        seen.is_ok(),
        "no held probe answered 503: {:?}",
        log.lock().unwrap()
    );

    // And back, again while held.
    wait_held(&e, 1, "a probe is held while not ready").await;
    let flip = set_policy(&e, &file, READY, 200).await;
    let seen = poll(
        Duration::from_secs(10),
        Duration::from_millis(20),
        || async { held_through(&log, flip, 200).ok_or(()) },
    )
    .await;
    assert!(
        seen.is_ok(),
        "no held probe answered 200: {:?}",
        log.lock().unwrap()
    );
    assert!(long_polls(&e, "changed").await >= 2);
    prober.abort();
    let failures: Vec<Probe> = log
        .lock()
        .unwrap()
        .iter()
        .filter(|p| p.status.is_none())
        .cloned()
        .collect();
    assert!(
        failures.is_empty(),
        "probes past the client timeout: {failures:?}"
    );

    // A change made just before a probe arrives is answered at once: the
    // same request was last answered "ready", the verdict is now "not ready".
    // (Wait for the aborted prober's held request to be let go first.)
    wait_held(&e, 0, "the aborted prober's request ended").await;
    let status = get(probe_addr, &stanza.path, LONG_POLL).await.0;
    assert_eq!(status, 200);
    set_policy(&e, &file, NOT_READY, 503).await;
    let (unseen, changed, waited) = (
        long_polls(&e, "unseen").await,
        long_polls(&e, "changed").await,
        long_polls(&e, "waited").await,
    );
    let (status, body) = get(probe_addr, &stanza.path, LONG_POLL).await;
    assert_eq!(status, 503, "{body}");
    assert_eq!(
        long_polls(&e, "unseen").await,
        unseen + 1,
        "answered at once"
    );
    assert_eq!(long_polls(&e, "changed").await, changed);
    assert_eq!(long_polls(&e, "waited").await, waited);

    // The next one has the answer it would get: held, until the shutdown
    // signal answers it (its wait is the longest allowed, far beyond the
    // shutdown timeout: an answer proves the signal, not the wait, ended it).
    let long = stanza
        .path
        .replace(&format!("wait={}s", wait.as_secs()), "wait=30s");
    assert_eq!(get(probe_addr, &long, LONG_POLL).await.0, 503);
    let held = tokio::spawn(async move { get(probe_addr, &long, LONG_POLL).await });
    wait_held(&e, 1, "a 30 s long poll is held").await;
    // Bounded by the shutdown timeout (5 s) plus slack, far below the wait.
    tokio::time::timeout(Duration::from_secs(10), e.running.shutdown())
        .await
        .expect("shutdown within its timeout");
    let (status, body) = held.await.unwrap();
    assert_eq!(
        status, 503,
        "the held request gets the verdict at shutdown: {body}"
    );
    drop(etcd);
}

/// Held requests never starve the others: on the probe listener (16
/// connections) at most 4 are held, one more is answered at once, idle
/// connections filling the cap are evicted for a new probe while the held
/// ones stay, and the shutdown signal answers every held one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn held_requests_are_capped_never_evicted_and_starve_no_probe() {
    // No etcd: the verdict settles on "not ready" (every check unknown) and
    // stays there, so nothing releases the held requests but the shutdown.
    let e = Exporter::start("http://127.0.0.1:1", |a| {
        a.web_probe_listen_address = Some("127.0.0.1:0".into());
    })
    .await;
    let probe = e.running.probe_addr.expect("probe listener");
    e.wait_until("/readyz?verbose", Duration::from_secs(20), |r| {
        r.status == 503 && !r.body.contains("starting")
    })
    .await;
    let path = "/readyz?wait=30s";
    assert_eq!(get(probe, path, LONG_POLL).await.0, 503);
    let held: Vec<_> = (0..4)
        .map(|_| tokio::spawn(async move { get(probe, path, LONG_POLL).await }))
        .collect();
    wait_held(&e, 4, "the probe listener's cap of held requests").await;
    // Over the cap: answered at once.
    let over = long_polls(&e, "over_cap").await;
    assert_eq!(get(probe, path, LONG_POLL).await.0, 503);
    assert_eq!(long_polls(&e, "over_cap").await, over + 1);
    // Idle connections to the rest of the cap and beyond: each new one
    // evicts the longest idle, never a held one, and a probe gets in.
    let mut idle = Vec::new();
    for _ in 0..16 {
        idle.push(tokio::net::TcpStream::connect(probe).await.unwrap());
    }
    let (status, body) = get(probe, "/livez", Duration::from_secs(10)).await;
    assert_eq!(status, 200, "{body}");
    wait_held(&e, 4, "held requests survive the evictions").await;
    drop(idle);
    tokio::time::timeout(Duration::from_secs(10), e.running.shutdown())
        .await
        .expect("shutdown within its timeout");
    for h in held {
        let (status, body) = h.await.unwrap();
        assert_eq!(status, 503, "{body}");
    }
}

/// Issue 45: a request head trickled in behind a held long poll kept its
/// connection open for the idle timeout after the answer (65 s behind
/// `wait=5s`) instead of being closed at the header timeout. Here the
/// header timeout is 1 s and the idle timeout an hour: a connection closed
/// within 20 s of the answer was closed by the header timeout.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_head_trickled_in_behind_a_held_long_poll_is_cut_at_the_header_timeout() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    // No etcd: the verdict stays "not ready", and a held request ends
    // when its wait runs out.
    let e = Exporter::start("http://127.0.0.1:1", |a| {
        a.web_probe_listen_address = Some("127.0.0.1:0".into());
        a.web_read_header_timeout = Duration::from_secs(1);
        a.web_idle_timeout = Duration::from_secs(3600);
    })
    .await;
    let probe = e.running.probe_addr.expect("probe listener");
    e.wait_until("/readyz?verbose", Duration::from_secs(20), |r| {
        r.status == 503 && !r.body.contains("starting")
    })
    .await;
    let path = "/readyz?wait=2s";
    // Answered at once; the same request next is held.
    assert_eq!(get(probe, path, LONG_POLL).await.0, 503);
    let mut s = tokio::net::TcpStream::connect(probe).await.unwrap();
    let head = format!("GET {path} HTTP/1.1\r\nHost: x\r\n\r\n");
    s.write_all(head.as_bytes()).await.unwrap();
    wait_held(&e, 1, "the second long poll is held").await;
    s.write_all(b"GET /livez HTTP/1.1\r\nHo").await.unwrap();
    let mut got = Vec::new();
    let closed =
        tokio::time::timeout(Duration::from_secs(20) + LONG_POLL, s.read_to_end(&mut got)).await;
    let got = String::from_utf8_lossy(&got);
    assert!(got.starts_with("HTTP/1.1 503"), "{got}");
    assert!(
        matches!(closed, Ok(Ok(_))),
        "still open 20 s after the held answer, under a 1 s header timeout: {got}"
    );
}
