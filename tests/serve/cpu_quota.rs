//! The exporter reads its own CPU limit (a CFS quota) at start and stretches
//! the etcd source's trust period over one CFS period, so that its own
//! throttling is not reported as an outdated answer (src/runtime/cpuquota.rs). Here
//! the real binary runs in a real cgroup v1 `cpu` group with a 500m quota,
//! next to a real etcd member, and the test reads what it says at start.
//! Needs root and a writable cgroup v1 `cpu` hierarchy, which CI has; where
//! either is missing the test prints why and checks nothing.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use etcd_readiness_testkit::etcd::EtcdCluster;

/// Removes the cgroup when dropped (after its process is gone).
struct Group(PathBuf);

impl Drop for Group {
    fn drop(&mut self) {
        for _ in 0..50 {
            if std::fs::remove_dir(&self.0).is_ok() {
                return;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

/// Kills the exporter when dropped, so a failing assertion leaves nothing.
struct Kill(Child);

impl Drop for Kill {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[test]
fn the_binary_reads_its_cfs_quota_and_trusts_answers_over_one_period() {
    let base = Path::new("/sys/fs/cgroup/cpu");
    let path = base.join(format!("ere-cpu-quota-test-{}", std::process::id()));
    if let Err(e) = std::fs::create_dir(&path) {
        eprintln!(
            "not checked: cannot create a cgroup under {base:?} ({e}); needs root and cgroup v1 cpu"
        );
        return;
    }
    let group = Group(path);
    std::fs::write(group.0.join("cpu.cfs_period_us"), "100000").unwrap();
    std::fs::write(group.0.join("cpu.cfs_quota_us"), "50000").unwrap();

    let cluster = EtcdCluster::builder(1).start();
    let bin = env!("CARGO_BIN_EXE_etcd-readiness-exporter");
    // The shell joins the cgroup, then becomes the exporter.
    let script = format!(
        "echo $$ > '{}/cgroup.procs' && exec \"$0\" \"$@\"",
        group.0.display()
    );
    let mut child = Command::new("sh")
        .args(["-c", &script, bin])
        .args([
            "--etcd.endpoint",
            &cluster.endpoint(0),
            "--web.listen-address",
            "127.0.0.1:0",
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start the exporter");
    let stderr = child.stderr.take().unwrap();
    let _child = Kill(child);
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            if tx.send(line).is_err() {
                return;
            }
        }
    });
    let line = loop {
        match rx.recv_timeout(Duration::from_secs(30)) {
            Ok(l) if l.contains("CPU limit") => break l,
            Ok(l) => assert!(
                !l.contains("serving"),
                "started without naming its CPU limit: {l}"
            ),
            Err(e) => panic!("no 'CPU limit' line within 30 s: {e}"),
        }
    };
    assert!(line.contains("limit_millicores=500"), "{line}");
    assert!(line.contains("period=100ms"), "{line}");
    assert!(line.contains("trust=120ms"), "{line}");
}
