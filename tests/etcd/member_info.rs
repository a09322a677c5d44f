//! `etcd_readiness_member_info{cluster_id, member_id, name}` against real
//! etcd 3.4 members: the IDs as etcdctl and etcd's own log print them, read
//! without quorum, kept while the member is frozen, and replaced when another
//! member answers at the endpoint. (That reading the identity costs no raft
//! proposal is pinned by `etcd_cluster::sampling_alone_does_not_grow_the_raft_index`,
//! whose exporter runs the same `serve` wiring and asks MemberList every round.)

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use etcd_readiness_testkit::etcd::EtcdCluster;
use etcd_readiness_testkit::etcd::member_command;
use etcd_readiness_testkit::exporter::{Exporter, metric_value};
use etcd_readiness_testkit::ports::{free_ports, free_tcp_port};
use etcd_readiness_testkit::wait::poll;

const DEADLINE: Duration = Duration::from_secs(30);
/// The step of this file's polls.
const STEP: Duration = Duration::from_millis(100);

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
    let exported = poll(DEADLINE, STEP, || async move {
        let lines = info_lines(e).await;
        if lines == [want] { Ok(()) } else { Err(lines) }
    })
    .await;
    if let Err(lines) = exported {
        panic!("timed out waiting for {want:?}; member_info lines: {lines:?}");
    }
}

/// (member ID, cluster ID) as etcd's log at `path` prints them at start:
/// 3.4 in text, "starting member 6d164ebc40afd3d in cluster 5f5536148f58d498";
/// 3.5 in JSON, `"msg":"starting local member","local-member-id":"…",
/// "cluster-id":"…"`.
async fn logged_ids(path: &std::path::Path) -> (String, String) {
    poll(DEADLINE, STEP, || async move {
        let text = std::fs::read_to_string(path).unwrap_or_default();
        ids_in_etcd_log(&text).ok_or(text)
    })
    .await
    .unwrap_or_else(|text| panic!("etcd did not start:\n{text}"))
}

fn ids_in_etcd_log(log: &str) -> Option<(String, String)> {
    if let Some(rest) = log.split("starting member ").nth(1) {
        let mut words = rest.split_whitespace();
        let member = words.next()?.to_string();
        if words.next() == Some("in") && words.next() == Some("cluster") {
            return Some((member, words.next()?.to_string()));
        }
    }
    let line = log
        .lines()
        .find(|l| l.contains(r#""msg":"starting local member""#))?;
    let field = |name: &str| {
        let key = format!(r#""{name}":""#);
        let rest = &line[line.find(&key)? + key.len()..];
        Some(rest[..rest.find('"')?].to_string())
    };
    Some((field("local-member-id")?, field("cluster-id")?))
}

#[test]
fn etcd_ids_are_read_from_3_4_text_and_3_5_json_logs() {
    let v34 = "2026-12-01 10:00:00.000 I | etcdserver: starting member 6d164ebc40afd3d in cluster 5f5536148f58d498\n";
    assert_eq!(
        ids_in_etcd_log(v34),
        Some(("6d164ebc40afd3d".into(), "5f5536148f58d498".into()))
    );
    let v35 = r#"{"level":"info","caller":"etcdserver/raft.go:507","msg":"starting local member","local-member-id":"18f4b4fc3ad12d13","cluster-id":"a691eaf543d66225"}"#;
    assert_eq!(
        ids_in_etcd_log(v35),
        Some(("18f4b4fc3ad12d13".into(), "a691eaf543d66225".into()))
    );
    assert_eq!(ids_in_etcd_log("nothing yet"), None);
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
    let watching = &watching_m2;
    let down = poll(DEADLINE, STEP, || async move {
        let up = watching.signal("etcd_up").await;
        if up["value"] == false {
            Ok(())
        } else {
            Err(up)
        }
    })
    .await;
    if let Err(up) = down {
        panic!("etcd_up never turned false: {up}");
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
    let peer = format!("http://127.0.0.1:{}", free_tcp_port());
    let dir = tempfile::tempdir().unwrap();
    let log = std::fs::File::create(dir.path().join("other.log")).unwrap();
    let mut cmd = member_command(
        &etcd_readiness_testkit::etcd::default_etcd(),
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

/// `etcd_readiness_source_requests_total{source="etcd",call=CALL}` of a scrape.
async fn requests(e: &Exporter, call: &str) -> f64 {
    let series = format!("etcd_readiness_source_requests_total{{source=\"etcd\",call=\"{call}\"}}");
    metric_value(&e.get("/metrics").await.body, &series).unwrap_or(0.0)
}

/// etcdctl against `endpoint`, with a 5 s command timeout: its stdout.
fn etcdctl(endpoint: &str, args: &[&str]) -> Result<String, String> {
    let out = Command::new("etcdctl")
        .args(["--endpoints", endpoint, "--command-timeout=5s"])
        .args(args)
        .output()
        .expect("etcdctl");
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    } else {
        Err(format!("{out:?}"))
    }
}

/// Issue 21: on a learner, MemberList was asked on every Status (~10
/// calls/s, "rpc not supported for learner"), the calls were not counted in
/// `etcd_readiness_source_requests_total`, and the name was never learnt.
/// Against a real learner (`etcdctl member add --learner`) of `etcd`: the
/// identity is exported with an empty name (a learner answers nothing that
/// carries it), MemberList is asked at most once per 30 s and counted, and
/// once the learner is promoted the name appears at once.
async fn a_learner_is_asked_member_list_at_most_every_30s(etcd: std::path::PathBuf) {
    use etcd_readiness_testkit::etcd::LocalCluster;
    let cluster = LocalCluster::builder(1).etcd(&etcd).start().expect("etcd");
    let m1 = cluster.endpoint(0);
    // The learner: added, then started on the existing cluster.
    let ports = free_ports(2).unwrap();
    let (client, peer) = (
        format!("http://127.0.0.1:{}", ports[0]),
        format!("http://127.0.0.1:{}", ports[1]),
    );
    let (m1, peer) = (&m1, &peer);
    let added = poll(DEADLINE, Duration::from_millis(200), || async move {
        etcdctl(
            m1,
            &[
                "member",
                "add",
                "learner1",
                "--learner",
                "--peer-urls",
                peer,
            ],
        )
    })
    .await
    .unwrap_or_else(|e| panic!("member add --learner: {e}"));
    // "Member 8e9e05c52164694d added to cluster cdf818194e3a8c32"
    let mut words = added
        .split_whitespace()
        .skip_while(|w| *w != "Member")
        .skip(1);
    let learner_id = words.next().expect("member ID").to_string();
    let cluster_id = words.nth(3).expect("cluster ID").to_string();
    let dir = tempfile::tempdir().unwrap();
    let log = std::fs::File::create(dir.path().join("learner.log")).unwrap();
    let m1_peer = format!("http://127.0.0.1:{}", cluster.members[0].peer_port);
    let mut cmd = member_command(
        &etcd,
        "learner1",
        &dir.path().join("learner.etcd"),
        &client,
        peer,
        &format!("m1={m1_peer},learner1={peer}"),
    );
    cmd.args(["--initial-cluster-state", "existing"])
        .stdin(Stdio::null())
        .stdout(log.try_clone().unwrap())
        .stderr(log);
    let _learner = Killed(cmd.spawn().expect("etcd"));

    let e = Exporter::start(&client, |_| {}).await;
    wait_info(&e, &info_line(&cluster_id, &learner_id, "")).await;
    let first = Instant::now();
    // Status keeps running (several a second); MemberList does not follow.
    let status_before = requests(&e, "status").await;
    let exporter = &e;
    let asked_status = poll(DEADLINE, STEP, || async move {
        let n = requests(exporter, "status").await;
        if n >= status_before + 40.0 {
            Ok(())
        } else {
            Err(n)
        }
    })
    .await;
    if let Err(n) = asked_status {
        panic!("Status is not being asked: {n} calls, {status_before} before");
    }
    let asked = requests(&e, "member_list").await;
    let allowed = 1.0 + (first.elapsed().as_secs() / 30) as f64 + 1.0;
    assert!(
        asked >= 1.0 && asked <= allowed,
        "MemberList asked {asked} times in {:?} on a learner (at most {allowed}); {} Status calls",
        first.elapsed(),
        requests(&e, "status").await
    );
    assert_eq!(
        info_lines(&e).await,
        [info_line(&cluster_id, &learner_id, "")],
        "a learner's name is unknown"
    );
    eprintln!(
        "{}: learner: {asked} MemberList and {} Status calls in {:?}",
        etcd.display(),
        requests(&e, "status").await,
        first.elapsed()
    );

    // Promoted (once it has caught up): named at once, not 30 s later.
    let id = &learner_id;
    poll(DEADLINE, Duration::from_millis(300), || async move {
        etcdctl(m1, &["member", "promote", id])
    })
    .await
    .unwrap_or_else(|e| panic!("member promote: {e}"));
    // wait_info's deadline is RELIST_EVERY (30 s): the name must come
    // from the promotion, not from the periodic re-ask.
    assert_eq!(
        DEADLINE,
        etcd_readiness_exporter::sources::etcd::identity::RELIST_EVERY
    );
    wait_info(&e, &info_line(&cluster_id, &learner_id, "learner1")).await;
    e.running.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_learner_is_asked_member_list_at_most_every_30s_etcd_3_4() {
    a_learner_is_asked_member_list_at_most_every_30s("etcd".into()).await;
}

/// The same against etcd 3.5.30 (`.ci/fetch-binaries etcd-3.5.30`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_learner_is_asked_member_list_at_most_every_30s_etcd_3_5() {
    let etcd = etcd_readiness_testkit::binaries::fetched("etcd-3.5.30", "etcd")
        .unwrap_or_else(|e| panic!("{e}"));
    a_learner_is_asked_member_list_at_most_every_30s(etcd).await;
}
