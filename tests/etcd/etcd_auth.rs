//! etcd with its own authentication on (`etcdctl auth enable`, as the
//! Bitnami chart does): the exporter is ready given a user whose role only
//! reads the probe key, through a password file (re-read when it changes),
//! on 3.4 (which answers Status to any user) and on 3.5 (which answers it
//! only to the root role: Status' stand-ins are read, and what none of them
//! gives is explained); without a user the explanation says that
//! authentication is on.

use std::process::Command;
use std::time::Duration;

use etcd_readiness_testkit::atomic_writer::AtomicWriterVolume;
use etcd_readiness_testkit::etcd::EtcdCluster;
use etcd_readiness_testkit::exporter::{Exporter, metric_value};

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
                && r.body.contains("only to the root role")
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
