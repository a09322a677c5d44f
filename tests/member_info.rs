//! `etcd_readiness_member_info{cluster_id, member_id, name}` against real
//! etcd 3.4 members: the IDs as etcdctl and etcd's own log print them, read
//! without quorum, kept while the member is frozen, and replaced when another
//! member answers at the endpoint. (That reading the identity costs no raft
//! proposal is pinned by `etcd_cluster::sampling_alone_does_not_grow_the_raft_index`,
//! whose exporter runs the same `serve` wiring and asks MemberList every round.)

mod support;

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use etcd_readiness_exporter::localcluster::{etcd_member_command, free_ports};
use support::{EtcdCluster, Exporter};

const DEADLINE: Duration = Duration::from_secs(30);

/// The `etcd_readiness_member_info` lines of a scrape.
async fn info_lines(e: &Exporter) -> Vec<String> {
    e.get("/metrics")
        .await
        .body
        .lines()
        .filter(|l| l.starts_with("etcd_readiness_member_info{"))
        .map(str::to_string)
        .collect()
}

/// Poll until the exporter exports exactly `want` as its member_info line.
async fn wait_info(e: &Exporter, want: &str) {
    let end = Instant::now() + DEADLINE;
    loop {
        let lines = info_lines(e).await;
        if lines == [want] {
            return;
        }
        assert!(
            Instant::now() < end,
            "timed out waiting for {want:?}; member_info lines: {lines:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// (member ID, cluster ID) as etcd's log at `path` prints them at start,
/// "starting member 6d164ebc40afd3d in cluster 5f5536148f58d498", once it has.
async fn logged_ids(path: &std::path::Path) -> (String, String) {
    let end = Instant::now() + DEADLINE;
    let log = loop {
        let text = std::fs::read_to_string(path).unwrap_or_default();
        if text.contains(" in cluster ") {
            break text;
        }
        assert!(Instant::now() < end, "etcd did not start:\n{text}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    let rest = log.split("starting member ").nth(1).unwrap();
    let mut words = rest.split_whitespace();
    let member = words.next().unwrap().to_string();
    assert_eq!(words.next(), Some("in"));
    assert_eq!(words.next(), Some("cluster"));
    (member, words.next().unwrap().to_string())
}

/// The member ID etcdctl prints for the member called `name`
/// (`etcdctl member list -w simple`: "ID, status, name, peers, clients, learner").
fn etcdctl_member_id(endpoint: &str, name: &str) -> String {
    let out = Command::new("etcdctl")
        .args(["--endpoints", endpoint, "--command-timeout=5s"])
        .args(["member", "list", "-w", "simple"])
        .output()
        .expect("etcdctl");
    assert!(out.status.success(), "etcdctl member list: {out:?}");
    let text = String::from_utf8(out.stdout).unwrap();
    text.lines()
        .map(|l| l.split(", ").collect::<Vec<_>>())
        .find(|f| f.get(2) == Some(&name))
        .map(|f| f[0].to_string())
        .unwrap_or_else(|| panic!("{name} not in etcdctl member list:\n{text}"))
}

fn info_line(cluster_id: &str, member_id: &str, name: &str) -> String {
    format!(
        "etcd_readiness_member_info{{cluster_id=\"{cluster_id}\",member_id=\"{member_id}\",name=\"{name}\"}} 1"
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_exporters_name_their_members_as_etcdctl_and_etcd_print_them() {
    let cluster = EtcdCluster::builder(3).start();
    let mut exporters = Vec::new();
    for i in 0..3 {
        exporters.push(Exporter::start(&cluster.endpoint(i), |_| {}).await);
    }
    let mut clusters = Vec::new();
    for (i, e) in exporters.iter().enumerate() {
        let name = &cluster.members[i].name;
        let (logged_member, logged_cluster) = logged_ids(&cluster.members[i].log).await;
        let member_id = etcdctl_member_id(&cluster.endpoint(i), name);
        assert_eq!(member_id, logged_member, "etcdctl and etcd's log agree");
        wait_info(e, &info_line(&logged_cluster, &member_id, name)).await;
        clusters.push(logged_cluster);
    }
    clusters.dedup();
    assert_eq!(clusters.len(), 1, "one cluster: {clusters:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_identity_is_read_without_quorum_and_kept_while_the_member_is_frozen() {
    let mut cluster = EtcdCluster::builder(3).start();
    let watching_m2 = Exporter::start(&cluster.endpoint(1), |_| {}).await;
    let (m2_id, cluster_id) = logged_ids(&cluster.members[1].log).await;
    let m2_line = info_line(&cluster_id, &m2_id, "m2");
    wait_info(&watching_m2, &m2_line).await;

    cluster.stop(1);
    cluster.stop(2);
    // m2 does not answer: known as down, and still the same member.
    let end = Instant::now() + DEADLINE;
    while watching_m2.signal("etcd_up").await["value"] != false {
        assert!(Instant::now() < end, "etcd_up never turned false");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(info_lines(&watching_m2).await, [m2_line]);

    // An exporter started now on m1, which has lost quorum, still learns
    // its identity and name: Status and MemberList are answered locally.
    let watching_m1 = Exporter::start(&cluster.endpoint(0), |_| {}).await;
    let (m1_id, _) = logged_ids(&cluster.members[0].log).await;
    wait_info(&watching_m1, &info_line(&cluster_id, &m1_id, "m1")).await;
    let readyz = watching_m1.get("/readyz").await;
    assert_eq!(
        readyz.status, 503,
        "m1 without quorum is not ready: {readyz:?}"
    );
    cluster.cont(1);
    cluster.cont(2);
}

/// Kills the etcd child on drop.
struct Killed(Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn another_member_at_the_endpoint_replaces_the_series() {
    let mut cluster = EtcdCluster::builder(1).start();
    let e = Exporter::start(&cluster.endpoint(0), |_| {}).await;
    let (old_member, old_cluster) = logged_ids(&cluster.members[0].log).await;
    wait_info(&e, &info_line(&old_cluster, &old_member, "m1")).await;

    // Another single-member cluster comes up at the same client port (as
    // when a pod's volume was replaced): new peer URL, new token, new IDs.
    cluster.kill(0);
    let client = cluster.endpoint(0);
    let peer = format!("http://127.0.0.1:{}", free_ports(1).unwrap()[0]);
    let dir = tempfile::tempdir().unwrap();
    let log = std::fs::File::create(dir.path().join("other.log")).unwrap();
    let mut cmd = etcd_member_command(
        &etcd_readiness_exporter::localcluster::default_etcd(),
        "other",
        &dir.path().join("other.etcd"),
        &client,
        &peer,
        &format!("other={peer}"),
    );
    cmd.args(["--initial-cluster-token", "another-cluster"])
        .stdin(Stdio::null())
        .stdout(log.try_clone().unwrap())
        .stderr(log);
    let _other = Killed(cmd.spawn().expect("etcd"));
    let (new_member, new_cluster) = logged_ids(&dir.path().join("other.log")).await;
    assert_ne!((&new_member, &new_cluster), (&old_member, &old_cluster));
    // One series, the new one: the old identity's series is gone.
    wait_info(&e, &info_line(&new_cluster, &new_member, "other")).await;
}
