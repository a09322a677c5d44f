//! etcd with its own authentication on (`etcdctl auth enable`, as the
//! Bitnami chart does): the exporter is ready given a user whose role only
//! reads the probe key, through a password file (re-read when it changes);
//! without a user the explanation says that authentication is on.

use std::process::Command;
use std::time::Duration;

use etcd_readiness_testkit::atomic_writer::AtomicWriterVolume;
use etcd_readiness_testkit::etcd::EtcdCluster;
use etcd_readiness_testkit::exporter::Exporter;

const READY: Duration = Duration::from_secs(30);
const ROOT: &str = "root:R00tPassw0rd";
const PASSWORD: &str = "Pr0bePassw0rd";

/// `etcdctl` against `endpoint`, as `user` (`name:password`) when given.
fn etcdctl(endpoint: &str, user: Option<&str>, args: &[&str]) {
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
    // etcd 3.5 answers Maintenance.Status only to the root role: the
    // explanation says so, and the role is granted (3.4 needs no more).
    let r = e
        .wait_until("/readyz?verbose", READY, |r| {
            r.status == 200 || r.body.contains("only to a user with the root role")
        })
        .await;
    if r.status != 200 {
        println!("etcd 3.5, Status refused to a read-only user: {}", r.body);
        etcdctl(
            &endpoint,
            Some(ROOT),
            &["user", "grant-role", "probe", "root"],
        );
    }
    let r = e.wait_for("/readyz?verbose", 200, READY).await;
    assert_eq!(r.status, 200, "{}\n{}", r.body, cluster.log(0));
    // Status, both reads, the Watch and the member list (the identity) are
    // all this role needs.
    let m = e
        .wait_until("/metrics", READY, |r| {
            r.body.contains("etcd_readiness_member_info{")
        })
        .await;
    assert!(
        m.body.contains("etcd_readiness_member_info{"),
        "no member identity"
    );
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
