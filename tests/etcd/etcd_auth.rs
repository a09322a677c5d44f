//! etcd with its own authentication on (`etcdctl auth enable`, as the
//! Bitnami chart does): the exporter is ready given a user whose role only
//! reads the probe key, through a password file (re-read when it changes),
//! on 3.4 (which answers Status to any user) and on 3.5 (which answers it
//! only to the root role: Status' stand-ins are read, and what none of them
//! gives is explained); without a user the explanation says that
//! authentication is on.

use std::process::Command;
use std::time::{Duration, Instant};

use etcd_readiness_exporter::outside::http_client::get_at;
use etcd_readiness_testkit::atomic_writer::AtomicWriterVolume;
use etcd_readiness_testkit::etcd::EtcdCluster;
use etcd_readiness_testkit::exporter::{Exporter, expect_metric, metric_line, metric_value};
use etcd_readiness_testkit::pki::{Pki, make_pki};

const READY: Duration = Duration::from_secs(30);
const ROOT: &str = "root:R00tPassw0rd";
const PASSWORD: &str = "Pr0bePassw0rd";

/// `etcdctl` against `endpoint`, as `user` (`name:password`) when given;
/// its standard output.
fn etcdctl(endpoint: &str, user: Option<&str>, args: &[&str]) -> String {
    let mut c = Command::new("etcdctl");
    c.env("ETCDCTL_API", "3")
        .arg(format!("--endpoints={endpoint}"));
    if let Some(u) = user {
        c.arg(format!("--user={u}"));
    }
    let out = c.args(args).output().expect("etcdctl runs");
    assert!(
        out.status.success(),
        "etcdctl {args:?}: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The member's version, as root sees it in Status.
fn version(endpoint: &str) -> String {
    let out = etcdctl(endpoint, Some(ROOT), &["endpoint", "status", "-w", "json"]);
    let v: serde_json::Value = serde_json::from_str(&out).expect("etcdctl's JSON");
    v[0]["Status"]["version"]
        .as_str()
        .expect("a version")
        .to_string()
}

/// root, a role `probe` with read on the key `health` only, a user
/// `probe` with it, then `auth enable`.
fn enable_auth(endpoint: &str) {
    etcdctl(endpoint, None, &["user", "add", ROOT]);
    etcdctl(endpoint, None, &["role", "add", "probe"]);
    etcdctl(
        endpoint,
        None,
        &["role", "grant-permission", "probe", "read", "health"],
    );
    etcdctl(
        endpoint,
        None,
        &["user", "add", &format!("probe:{PASSWORD}")],
    );
    etcdctl(endpoint, None, &["user", "grant-role", "probe", "probe"]);
    etcdctl(endpoint, None, &["auth", "enable"]);
}

// Long because: one authenticated member whose phases (anonymous, the user, without metrics, a restart, a new password) build on each other.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_read_only_user_from_a_password_file_makes_an_authenticated_etcd_ready() {
    let mut cluster = EtcdCluster::builder(1).start();
    let endpoint = cluster.endpoint(0);
    enable_auth(&endpoint);

    // No user: the explanation says authentication is on.
    let anonymous = Exporter::start(&endpoint, |_| {}).await;
    let r = anonymous
        .wait_until("/readyz?verbose", READY, |r| {
            r.status == 503 && r.body.contains("authentication on")
        })
        .await;
    assert!(
        r.body
            .contains("etcd has authentication on and the exporter has no user"),
        "{}",
        r.body
    );
    drop(anonymous);

    let dir = tempfile::tempdir().unwrap();
    let mut secret =
        AtomicWriterVolume::create_keys(dir.path(), &[("password", &format!("{PASSWORD}\n"))])
            .unwrap();
    let file = secret.path_of("password");
    let e = Exporter::start(&endpoint, |a| {
        a.etcd_user = Some("probe".into());
        a.etcd_password_file = Some(file);
    })
    .await;
    // The read-only role is all it needs: etcd 3.4 answers Status to any
    // user; etcd 3.5 only to the root role, and its stand-ins are read.
    let r = e.wait_for("/readyz?verbose", 200, READY).await;
    assert_eq!(r.status, 200, "{}\n{}", r.body, cluster.log(0));
    let refused = !version(&endpoint).starts_with("3.4.");
    // Status (or its stand-ins), both reads, the Watch and the member list
    // (the identity).
    let m = e
        .wait_until("/metrics", READY, |r| {
            r.body.contains("etcd_readiness_member_info{")
        })
        .await;
    assert!(
        m.body.contains("etcd_readiness_member_info{"),
        "no member identity"
    );
    let health = metric_value(
        &m.body,
        "etcd_readiness_source_requests_total{source=\"etcd\",call=\"health\"}",
    );
    assert_eq!(
        health.is_some(),
        refused,
        "stand-ins asked only where Status is refused"
    );
    // Every Status signal is known, from Status or its stand-ins.
    for name in [
        "leader",
        "is_leader",
        "learner",
        "revision",
        "raft_term",
        "raft_index",
        "applied_index",
        "apply_lag",
        "db_size_bytes",
        "db_in_use_bytes",
        "alarm_nospace",
        "alarm_corrupt",
        "leader_changes",
        "leaderless",
    ] {
        let s = e.signal(name).await;
        assert_eq!(s["known"], true, "{name}: {s}");
    }
    assert_eq!(e.signal("leader").await["value"], true);
    assert_eq!(e.signal("learner").await["value"], false);
    assert_eq!(e.signal("alarm_corrupt").await["value"], false);

    // Without the member's metrics, what only Status or they give is
    // unknown, and says that Status needs the root role.
    let blind = Exporter::start(&endpoint, |a| {
        a.etcd_user = Some("probe".into());
        a.etcd_password_file = Some(secret.path_of("password"));
        a.etcd_metrics_url = Some(String::new().into());
    })
    .await;
    if refused {
        let r = blind
            .wait_until("/readyz?verbose", READY, |r| r.body.contains("root role"))
            .await;
        assert_eq!(r.status, 503, "{}", r.body);
        assert!(
            r.body.contains("[-]leader failed: leader unknown")
                && r.body.contains("only the root role may call it")
                && r.body.contains("--etcd.metrics-url is off"),
            "{}",
            r.body
        );
        println!("etcd 3.5 without the member's metrics: {}", r.body);
    } else {
        let r = blind.wait_for("/readyz", 200, READY).await;
        assert_eq!(r.status, 200, "{}", r.body);
    }
    drop(blind);
    for path in ["/readyz?verbose", "/signals", "/metrics", "/policy", "/"] {
        let body = e.get(path).await.body;
        assert!(!body.contains(PASSWORD), "the password is in {path}");
    }

    // etcd forgets its simple tokens when it restarts: the exporter's is
    // refused as "invalid auth token", and it gets a new one by itself.
    cluster.restart(0);
    let r = e.wait_for("/readyz", 503, READY).await;
    assert_eq!(r.status, 503, "the restart was not seen: {}", r.body);
    let r = e.wait_for("/readyz", 200, READY).await;
    assert_eq!(r.status, 200, "{}\n{}", r.body, cluster.log(0));

    // A new password: etcd's user first, then the Secret; a restart of etcd
    // makes the exporter authenticate again, with the new one.
    let new = "N3wPr0bePassw0rd";
    change_password(&endpoint, new);
    secret.update_keys(&[("password", new)]).unwrap();
    e.wait_until("/metrics", READY, |r| {
        r.body
            .contains("etcd_readiness_etcd_password_file_reloads_total{result=\"success\"} 1")
    })
    .await;
    cluster.restart(0);
    let r = e.wait_until("/readyz", READY, |r| r.status == 200).await;
    assert_eq!(r.status, 200, "{}\n{}", r.body, cluster.log(0));
}

/// `etcdctl user passwd probe` as root, the new password on its stdin.
fn change_password(endpoint: &str, new: &str) {
    use std::io::Write;
    let mut child = Command::new("etcdctl")
        .env("ETCDCTL_API", "3")
        .arg(format!("--endpoints={endpoint}"))
        .arg(format!("--user={ROOT}"))
        .args(["user", "passwd", "probe", "--interactive=false"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("etcdctl runs");
    child
        .stdin
        .take()
        .unwrap()
        .write_all(format!("{new}\n").as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "etcdctl user passwd: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// etcd's own count of the Authenticate calls it refused (a wrong user or
/// password: `InvalidArgument`), read from its `/metrics`.
async fn refused_logins(cluster: &EtcdCluster) -> f64 {
    let addr = format!("127.0.0.1:{}", cluster.members[0].client_port)
        .parse()
        .unwrap();
    let m = get_at(addr, "/metrics", None, Duration::from_secs(5))
        .await
        .expect("etcd's /metrics");
    m.body
        .lines()
        .filter(|l| {
            l.starts_with("grpc_server_handled_total{")
                && l.contains("grpc_method=\"Authenticate\"")
                && !l.contains("grpc_code=\"OK\"")
        })
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

/// The CPU time etcd member 0 has used so far (user + system).
fn etcd_cpu(cluster: &EtcdCluster) -> Duration {
    let pid = cluster.members[0].pid().expect("etcd runs");
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    // After the command's closing parenthesis: state is field 3, utime 14.
    let fields: Vec<&str> = stat
        .rsplit_once(')')
        .unwrap()
        .1
        .split_whitespace()
        .collect();
    let ticks: u64 = fields[11].parse::<u64>().unwrap() + fields[12].parse::<u64>().unwrap();
    let hz = rustix::param::clock_ticks_per_second();
    Duration::from_secs_f64(ticks as f64 / hz as f64)
}

/// The readiness states `/history` recorded, oldest first.
async fn readiness_states(e: &Exporter) -> Vec<String> {
    let h: serde_json::Value = serde_json::from_str(&e.get("/history").await.body).unwrap();
    h["transitions"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|t| t["kind"] == "readiness")
        .map(|t| t["state"].as_str().unwrap().to_string())
        .collect()
}

/// Assert that the exporter has not left "ready" since it had `since`
/// readiness transitions, printing the history and etcd's log if it did.
async fn assert_stayed_ready(e: &Exporter, cluster: &EtcdCluster, since: usize, what: &str) {
    let states = readiness_states(e).await;
    assert!(
        states.len() == since && states.last().map(String::as_str) == Some("ready"),
        "{what}: readiness changed: {states:?}\n{}\n{}",
        e.get("/history").await.body,
        cluster.log(0)
    );
}

/// A typo in the Secret: the exporter logs in a few times, further and
/// further apart, instead of at its sampling pace (etcd hashes each try
/// with bcrypt, and a sidecar that retried at once kept a core busy); the
/// right password is used at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wrong_password_costs_etcd_a_few_logins_not_a_core() {
    const WINDOW: Duration = Duration::from_secs(30);
    let cluster = EtcdCluster::builder(1).start();
    let endpoint = cluster.endpoint(0);
    enable_auth(&endpoint);
    let dir = tempfile::tempdir().unwrap();
    let mut secret =
        AtomicWriterVolume::create_keys(dir.path(), &[("password", "Wr0ngPassw0rd\n")]).unwrap();
    let before = refused_logins(&cluster).await;
    let cpu_before = etcd_cpu(&cluster);
    let t0 = Instant::now();
    let e = Exporter::start(&endpoint, |a| {
        a.etcd_user = Some("probe".into());
        a.etcd_password_file = Some(secret.path_of("password"));
    })
    .await;
    let r = e
        .wait_until("/readyz?verbose", READY, |r| {
            r.body.contains("the next login in")
        })
        .await;
    assert_eq!(r.status, 503, "{}", r.body);
    assert!(
        r.body.contains("etcd refused user \"probe\"")
            && r.body.contains("authentication failed")
            && r.body.contains("check user \"probe\" (--etcd.user)"),
        "{}",
        r.body
    );
    println!("a wrong password: {}", r.body);
    tokio::time::sleep(WINDOW.saturating_sub(t0.elapsed())).await;
    let took = t0.elapsed();
    let refused = refused_logins(&cluster).await - before;
    let cpu = etcd_cpu(&cluster).saturating_sub(cpu_before);
    let counted = expect_metric(
        &e.get("/metrics").await.body,
        "etcd_readiness_etcd_logins_total{result=\"refused\"}",
    );
    println!(
        "in {took:?}: etcd refused {refused} logins (the exporter counts {counted}), used {cpu:?} of CPU"
    );
    assert!((1.0..=10.0).contains(&refused), "{refused} refused logins");
    assert_eq!(counted, refused, "the exporter counts what etcd refused");
    assert!(
        cpu.as_secs_f64() < 0.10 * took.as_secs_f64(),
        "etcd used {cpu:?} of CPU in {took:?}"
    );
    let m = e.get("/metrics").await.body;
    assert!(
        expect_metric(&m, "etcd_readiness_etcd_login_refusals") >= 1.0,
        "{m}"
    );
    assert!(
        expect_metric(
            &m,
            "etcd_readiness_etcd_login_next_attempt_timestamp_seconds"
        ) > 0.0
    );

    // The right password: tried as soon as it is read, whatever the backoff.
    secret.update_keys(&[("password", PASSWORD)]).unwrap();
    let r = e.wait_for("/readyz", 200, Duration::from_secs(10)).await;
    assert_eq!(r.status, 200, "{}\n{}", r.body, cluster.log(0));
    let m = e.get("/metrics").await.body;
    assert_eq!(expect_metric(&m, "etcd_readiness_etcd_login_refusals"), 0.0);
}

/// Both orders of a password rotation. The Secret first: the session that
/// works is kept, and when etcd's password changes (its tokens revoked)
/// the exporter logs in with the new one and sends the call again — no
/// not-ready answer at all. etcd first: nothing can log in until the file
/// follows; then it is used at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_password_rotated_in_the_secret_first_costs_no_not_ready_answer() {
    let cluster = EtcdCluster::builder(1).start();
    let endpoint = cluster.endpoint(0);
    enable_auth(&endpoint);
    let dir = tempfile::tempdir().unwrap();
    let mut secret =
        AtomicWriterVolume::create_keys(dir.path(), &[("password", &format!("{PASSWORD}\n"))])
            .unwrap();
    let e = Exporter::start(&endpoint, |a| {
        a.etcd_user = Some("probe".into());
        a.etcd_password_file = Some(secret.path_of("password"));
    })
    .await;
    let r = e.wait_for("/readyz", 200, READY).await;
    assert_eq!(r.status, 200, "{}\n{}", r.body, cluster.log(0));
    let since = readiness_states(&e).await.len();

    // The Secret first: read, and no login tried while the session works.
    let second = "Sec0ndPassw0rd";
    secret.update_keys(&[("password", second)]).unwrap();
    e.wait_until("/metrics", READY, |r| {
        r.body
            .contains("etcd_readiness_etcd_password_file_reloads_total{result=\"success\"} 1")
    })
    .await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let m = e.get("/metrics").await.body;
    assert_eq!(
        expect_metric(&m, "etcd_readiness_etcd_logins_total{result=\"accepted\"}"),
        1.0,
        "{m}"
    );
    assert_stayed_ready(&e, &cluster, since, "the Secret updated").await;

    // Then etcd: its tokens are revoked, the new password logs in.
    change_password(&endpoint, second);
    e.wait_until("/metrics", READY, |r| {
        metric_value(
            &r.body,
            "etcd_readiness_etcd_logins_total{result=\"accepted\"}",
        ) == Some(2.0)
    })
    .await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_stayed_ready(
        &e,
        &cluster,
        since,
        "etcd's password changed after the Secret",
    )
    .await;
    let m = e.get("/metrics").await.body;
    assert_eq!(
        metric_value(&m, "etcd_readiness_etcd_logins_total{result=\"refused\"}").unwrap_or(0.0),
        0.0,
        "the newest password is tried first: {m}"
    );

    // etcd first: not ready until the Secret follows, then ready at once.
    let third = "Th1rdPassw0rd";
    change_password(&endpoint, third);
    let r = e
        .wait_until("/readyz?verbose", READY, |r| r.status == 503)
        .await;
    assert!(r.body.contains("authentication failed"), "{}", r.body);
    secret.update_keys(&[("password", third)]).unwrap();
    let r = e.wait_for("/readyz", 200, Duration::from_secs(10)).await;
    assert_eq!(r.status, 200, "{}\n{}", r.body, cluster.log(0));
}

/// The documented procedure (docs/connecting.md, "Rotating the probe's
/// password"): the user name and the password in one Secret; a second user
/// is added in etcd, the Secret switched to it, the first user deleted —
/// and the exporter never answers not ready. Every step changes etcd's
/// auth revision, which refuses every token issued before it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn switching_the_secret_to_a_second_user_costs_no_not_ready_answer() {
    let cluster = EtcdCluster::builder(1).start();
    let endpoint = cluster.endpoint(0);
    enable_auth(&endpoint);
    let dir = tempfile::tempdir().unwrap();
    let mut secret = AtomicWriterVolume::create_keys(
        dir.path(),
        &[
            ("username", "probe\n"),
            ("password", &format!("{PASSWORD}\n")),
        ],
    )
    .unwrap();
    let e = Exporter::start(&endpoint, |a| {
        a.etcd_user_file = Some(secret.path_of("username"));
        a.etcd_password_file = Some(secret.path_of("password"));
    })
    .await;
    let r = e.wait_for("/readyz", 200, READY).await;
    assert_eq!(r.status, 200, "{}\n{}", r.body, cluster.log(0));
    let since = readiness_states(&e).await.len();

    let root = Some(ROOT);
    etcdctl(
        &endpoint,
        root,
        &["user", "add", "probe2:S3condUs3r", "--interactive=false"],
    );
    etcdctl(&endpoint, root, &["user", "grant-role", "probe2", "probe"]);
    secret
        .update_keys(&[("username", "probe2"), ("password", "S3condUs3r")])
        .unwrap();
    e.wait_until("/metrics", READY, |r| {
        r.body
            .contains("etcd_readiness_etcd_password_file_reloads_total{result=\"success\"} 1")
    })
    .await;
    etcdctl(&endpoint, root, &["user", "delete", "probe"]);
    // Deleting the first user revokes its token: the exporter logs in as
    // the second.
    let m = e
        .wait_until("/metrics", READY, |r| {
            metric_value(
                &r.body,
                "etcd_readiness_etcd_logins_total{result=\"accepted\"}",
            )
            .is_some_and(|n| n >= 2.0)
        })
        .await;
    println!(
        "{}",
        metric_line(&m.body, "etcd_readiness_etcd_logins_total")
    );
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_stayed_ready(&e, &cluster, since, "the Secret switched to a second user").await;
    let r = e.get("/readyz").await;
    assert_eq!(r.status, 200, "{}", r.body);
}

/// etcdctl over client TLS with `pki`'s client certificate, as `user`.
fn etcdctl_tls(endpoint: &str, pki: &Pki, user: Option<&str>, args: &[&str]) -> String {
    let tls = [
        format!("--cacert={}", pki.path("ca.pem").display()),
        format!("--cert={}", pki.path("client.pem").display()),
        format!("--key={}", pki.path("client-key.pem").display()),
    ];
    let mut all: Vec<&str> = tls.iter().map(String::as_str).collect();
    all.extend_from_slice(args);
    etcdctl(endpoint, user, &all)
}

/// etcd with `--client-cert-auth` and its authentication on takes a client
/// certificate's CN as the user when no user logs in (docs/connecting.md):
/// a certificate with CN=probe needs no password at all; one whose CN is
/// no user is explained by that CN, not as a missing permission.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_certificate_whose_cn_is_the_user_needs_no_password() {
    let pki = make_pki();
    let cluster = EtcdCluster::builder(1).tls(pki.etcd_server_tls()).start();
    let endpoint = cluster.endpoint(0);
    let tls = |args: &[&str]| etcdctl_tls(&endpoint, &pki, None, args);
    tls(&["user", "add", ROOT]);
    tls(&["role", "add", "probe"]);
    tls(&["role", "grant-permission", "probe", "read", "health"]);
    tls(&["user", "add", "probe", "--no-password"]);
    tls(&["user", "grant-role", "probe", "probe"]);
    tls(&["auth", "enable"]);
    let (cert, key) = pki.client_cert_with_cn("probe");
    let e = Exporter::start(&endpoint, |a| {
        a.etcd_cacert = Some(pki.path("ca.pem"));
        a.etcd_cert = Some(cert);
        a.etcd_key = Some(key);
    })
    .await;
    let r = e.wait_for("/readyz?verbose", 200, READY).await;
    assert_eq!(r.status, 200, "{}\n{}", r.body, cluster.log(0));
    let m = e.get("/metrics").await.body;
    assert_eq!(
        metric_value(&m, "etcd_readiness_etcd_logins_total{result=\"accepted\"}"),
        None,
        "no login: {m}"
    );

    // A certificate whose CN is no user of etcd: named, with what to do.
    let (cert, key) = pki.client_cert_with_cn("stranger");
    let stranger = Exporter::start(&endpoint, |a| {
        a.etcd_cacert = Some(pki.path("ca.pem"));
        a.etcd_cert = Some(cert);
        a.etcd_key = Some(key);
    })
    .await;
    let r = stranger
        .wait_until("/readyz?verbose", READY, |r| {
            r.body.contains("\"stranger\"")
        })
        .await;
    assert_eq!(r.status, 503, "{}", r.body);
    assert!(
        r.body.contains("the CN of the client certificate"),
        "{}",
        r.body
    );
    println!("a CN that is no user: {}", r.body);
}
