//! Hostile policy files through real ConfigMap-style swaps (the kubelet's
//! AtomicWriter sequence) next to a real etcd member: the key becomes a FIFO,
//! then a symlink to /dev/zero, then a good file again. Regressions: a FIFO
//! blocked the reloader forever (holding its lock, so SIGHUP and every
//! `POST /-/reload` hung, one blocked thread each), and /dev/zero was read
//! 2.1 GB per re-read. Now each is a failed reload named in `/policy`, the
//! metrics and the POST answer; the previous policy stays in force; SIGHUP
//! and POST keep answering; threads and bytes read stay bounded; and the
//! good file is picked up as soon as it is back.

use std::sync::Arc;
use std::time::Duration;

use etcd_readiness_testkit::atomic_writer::AtomicWriterVolume;
use etcd_readiness_testkit::etcd::EtcdCluster;
use etcd_readiness_testkit::exporter::{Exporter, post};
use etcd_readiness_testkit::ports::free_tcp_port;
use etcd_readiness_testkit::wait::{poll, wait_until};

const WAIT: Duration = Duration::from_secs(20);
const V1: &str = "check leader: leader\n";
const V2: &str = "check leader: leader\ncheck linearizable_read: qget_ms < 2000\n";

/// A field of /proc/self/<file> (`Threads:` of status, `rchar:` of io).
fn proc_self(file: &str, field: &str) -> u64 {
    std::fs::read_to_string(format!("/proc/self/{file}"))
        .unwrap()
        .lines()
        .find_map(|l| l.strip_prefix(field))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or_else(|| panic!("{field} in /proc/self/{file}"))
}

fn sighup() {
    let st = std::process::Command::new("kill")
        .args(["-HUP", &std::process::id().to_string()])
        .status()
        .unwrap();
    assert!(st.success());
}

/// SIGHUP makes the reloader read the file again (a read we can count).
async fn sighup_is_handled(e: &Exporter) {
    let reloader = e.running.reloader.clone().unwrap();
    let before = reloader.reads();
    sighup();
    wait_until("SIGHUP to cause a re-read", WAIT, || {
        let reads = reloader.reads();
        async move { reads != before }
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fifo_and_dev_zero_policies_fail_reloads_without_wedging_anything() {
    let cluster = EtcdCluster::builder(1).start();
    let dir = tempfile::tempdir().unwrap();
    let mut volume = AtomicWriterVolume::create(dir.path(), "policy", V1).unwrap();
    let path = volume.path();
    let e = Arc::new(
        Exporter::start(&cluster.endpoint(0), move |a| {
            a.policy = Some(path);
            a.policy_reload_interval = Duration::from_millis(200);
        })
        .await,
    );
    assert_eq!(e.wait_for("/readyz", 200, WAIT).await.status, 200);
    let good_sha = e.policy_json().await["sha256"]
        .as_str()
        .unwrap()
        .to_string();

    // 1. The key becomes a FIFO with no writer.
    volume
        .update_with(|p| {
            let st = std::process::Command::new("mkfifo").arg(p).status()?;
            assert!(st.success());
            Ok(())
        })
        .unwrap();
    let p = e
        .wait_policy("the FIFO to be refused", WAIT, |p| {
            p["last_reload_error"]
                .as_str()
                .is_some_and(|s| s.contains("it is a FIFO (named pipe), not a regular file"))
        })
        .await;
    assert_eq!(p["sha256"], good_sha.as_str(), "the good policy stays");
    let threads_before = proc_self("status", "Threads:");
    for _ in 0..100 {
        let (status, body) = post(e.addr(), "/-/reload").await;
        assert_eq!(status, 500, "{body}");
        assert!(body.contains("FIFO"), "{body}");
    }
    let threads_after = proc_self("status", "Threads:");
    println!("threads before 100 POSTs: {threads_before}, after: {threads_after}");
    // tokio's blocking pool may grow a little; 100 stuck threads it must not.
    assert!(
        threads_after < threads_before + 20,
        "threads grew from {threads_before} to {threads_after}"
    );
    sighup_is_handled(&e).await;
    assert_eq!(e.get("/readyz").await.status, 200);
    let scrape = e.get("/metrics").await.body;
    assert!(
        scrape.contains("etcd_readiness_policy_last_reload_successful 0"),
        "{scrape}"
    );

    // 2. The key becomes a symlink to /dev/zero: refused before reading.
    volume
        .update_with(|p| std::os::unix::fs::symlink("/dev/zero", p))
        .unwrap();
    e.wait_policy("/dev/zero to be refused", WAIT, |p| {
        p["last_reload_error"]
            .as_str()
            .is_some_and(|s| s.contains("it is a character device, not a regular file"))
    })
    .await;
    let rchar_before = proc_self("io", "rchar:");
    for _ in 0..20 {
        let (status, body) = post(e.addr(), "/-/reload").await;
        assert_eq!(status, 500, "{body}");
        assert!(body.contains("character device"), "{body}");
    }
    sighup_is_handled(&e).await;
    let read = proc_self("io", "rchar:") - rchar_before;
    println!("bytes read during 20 POSTs and a SIGHUP with /dev/zero as policy: {read}");
    // Before: 2.1 GB per re-read. Now only HTTP and etcd traffic.
    assert!(read < 16 * 1024 * 1024, "read {read} bytes");
    assert_eq!(e.policy_json().await["sha256"], good_sha.as_str());
    assert_eq!(e.get("/readyz").await.status, 200);

    // 3. A good file again: picked up by the watcher, error cleared.
    volume.update(V2).unwrap();
    let p = e
        .wait_policy("the good policy", WAIT, |p| {
            p["sha256"] != good_sha.as_str() && p["last_reload_error"].is_null()
        })
        .await;
    assert!(p["text"].as_str().unwrap().contains("qget_ms < 2000"));
    let (status, body) = post(e.addr(), "/-/reload").await;
    assert_eq!(status, 200, "{body}");
    assert!(body.starts_with("policy unchanged"), "{body}");
    sighup_is_handled(&e).await;
    assert_eq!(e.wait_for("/readyz", 200, WAIT).await.status, 200);
    let l = e.get("/livez?verbose").await;
    assert_eq!(l.status, 200, "{}", l.body);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fifo_or_device_as_the_startup_policy_is_a_clear_error() {
    let dir = tempfile::tempdir().unwrap();
    let fifo = dir.path().join("policy");
    assert!(
        std::process::Command::new("mkfifo")
            .arg(&fifo)
            .status()
            .unwrap()
            .success()
    );
    let bin = env!("CARGO_BIN_EXE_etcd-readiness-exporter");
    for p in [fifo.as_path(), std::path::Path::new("/dev/zero")] {
        let out = std::process::Command::new(bin)
            .args(["serve", "--web.listen-address", "127.0.0.1:0", "--policy"])
            .arg(p)
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{err}");
        assert!(err.contains("not a regular file"), "{err}");
    }
}

/// The binary with a FIFO swapped in as its policy still answers POST and
/// exits on SIGTERM (before: the reloader blocked on the FIFO forever and the
/// process ignored SIGTERM).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_binary_exits_on_sigterm_with_a_fifo_as_its_policy() {
    let dir = tempfile::tempdir().unwrap();
    let mut volume = AtomicWriterVolume::create(dir.path(), "policy", V1).unwrap();
    let addr: std::net::SocketAddr = format!("127.0.0.1:{}", free_tcp_port()).parse().unwrap();
    let bin = env!("CARGO_BIN_EXE_etcd-readiness-exporter");
    // No etcd: the exporter serves (not ready) without one.
    let mut child = std::process::Command::new(bin)
        .args(["serve", "--web.listen-address", &addr.to_string()])
        .args(["--etcd.endpoint", "http://127.0.0.1:9"])
        .arg("--web.enable-lifecycle")
        .arg("--policy")
        .arg(volume.path())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    poll(WAIT, Duration::from_millis(50), || {
        tokio::net::TcpStream::connect(addr)
    })
    .await
    .unwrap_or_else(|e| panic!("the exporter did not listen: {e}"));
    volume
        .update_with(|p| {
            let st = std::process::Command::new("mkfifo").arg(p).status()?;
            assert!(st.success());
            Ok(())
        })
        .unwrap();
    for _ in 0..20 {
        let (status, body) = post(addr, "/-/reload").await;
        assert_eq!(status, 500, "{body}");
        assert!(body.contains("FIFO"), "{body}");
    }
    let st = std::process::Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(st.success());
    let child = &mut child;
    let exited = poll(WAIT, Duration::from_millis(50), || {
        let exited = child.try_wait().unwrap().ok_or(());
        async move { exited }
    })
    .await;
    let Ok(status) = exited else {
        let _ = child.kill();
        let _ = child.wait();
        panic!("the exporter ignored SIGTERM");
    };
    assert!(status.success(), "{status:?}");
}
