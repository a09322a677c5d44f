//! Policy reload latency: time from the kubelet-style rename of `..data` to
//! the new policy reaching the sink (`PolicySink::apply`, i.e. the engine),
//! over many swaps, with the watcher's default options unless told otherwise.
//!
//! Run: `cargo run --example reload_latency -- [SWAPS] [DEBOUNCE_MS]`
//! (defaults 60 and 100). End-to-end latency through `/policy` is for the
//! integrator to measure once the HTTP surface exists.

use std::os::unix::fs::symlink;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use etcd_readiness_exporter::policy::Policy;
use etcd_readiness_exporter::reload::{
    self, PolicySink, ReloadMetrics, Reloader, WatchOptions, spawn_watcher,
};
use etcd_readiness_exporter::signals::Catalogue;
use prometheus_client::registry::Registry;
use sha2::{Digest, Sha256};

struct Sink(mpsc::Sender<(String, Instant)>);

impl PolicySink for Sink {
    fn apply(&self, policy: Arc<Policy>) {
        let _ = self.0.send((policy.sha256().to_string(), Instant::now()));
    }
    fn reload_failed(&self, error: Option<String>) {
        if let Some(e) = error {
            eprintln!("unexpected reload failure: {e}");
        }
    }
}

/// Writes the kubelet AtomicWriter sequence; returns the instant of the
/// `..data` rename.
struct Volume {
    dir: PathBuf,
    current: Option<PathBuf>,
    generation: u64,
}

impl Volume {
    fn update(&mut self, content: &str) -> Result<Instant> {
        self.generation += 1;
        let name = format!("..2026_11_30_00_00_00.{:09}", self.generation);
        let ts = self.dir.join(&name);
        std::fs::create_dir(&ts)?;
        std::fs::write(ts.join("policy"), content)?;
        let tmp = self.dir.join("..data_tmp");
        symlink(&name, &tmp)?;
        let renamed_at = Instant::now();
        std::fs::rename(&tmp, self.dir.join("..data"))?;
        if self.current.is_none() {
            symlink("..data/policy", self.dir.join("policy"))?;
        }
        if let Some(old) = self.current.replace(ts) {
            std::fs::remove_dir_all(old)?;
        }
        Ok(renamed_at)
    }
}

fn policy(n: usize) -> String {
    format!(
        "check leader: leader\ncheck linearizable_read: qget_ms < {}\n",
        1000 + n
    )
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> Result<()> {
    let mut args = std::env::args().skip(1);
    let swaps: usize = args.next().map_or(Ok(60), |a| a.parse())?;
    let debounce_ms: u64 = args.next().map_or(Ok(100), |a| a.parse())?;
    if swaps == 0 {
        bail!("SWAPS must be at least 1");
    }

    let dir = tempfile::tempdir()?;
    let mut volume = Volume {
        dir: dir.path().to_path_buf(),
        current: None,
        generation: 0,
    };
    volume.update(&policy(0))?;
    let path = dir.path().join("policy");
    let catalogue = Arc::new(Catalogue::builtin());
    let initial = reload::load(Path::new(&path), &catalogue)?;
    let (tx, rx) = mpsc::channel();
    let mut registry = Registry::default();
    let reloader = Arc::new(Reloader::new(
        &path,
        catalogue,
        Arc::new(Sink(tx)),
        ReloadMetrics::register(&mut registry),
        Some(&initial),
    ));
    let opts = WatchOptions {
        debounce: Duration::from_millis(debounce_ms),
        ..WatchOptions::default()
    };
    let _watcher = spawn_watcher(reloader, opts.clone());

    let mut latencies = Vec::with_capacity(swaps);
    for i in 1..=swaps {
        let content = policy(i);
        let want = hex::encode(Sha256::digest(content.as_bytes()));
        let renamed_at = volume.update(&content)?;
        let applied_at = tokio::task::block_in_place(|| {
            loop {
                let (sha, at) = rx
                    .recv_timeout(Duration::from_secs(10))
                    .context("no policy applied within 10 s")?;
                if sha == want {
                    return anyhow::Ok(at);
                }
            }
        })?;
        latencies.push(applied_at.saturating_duration_since(renamed_at));
    }
    latencies.sort();
    let ms = |d: Duration| d.as_secs_f64() * 1000.0;
    println!(
        "policy reload latency, rename of ..data -> PolicySink::apply, {swaps} swaps, \
         debounce {debounce_ms} ms, resync {:?}",
        opts.resync_interval
    );
    println!(
        "min {:.1} ms  median {:.1} ms  p95 {:.1} ms  max {:.1} ms",
        ms(latencies[0]),
        ms(percentile(&latencies, 50.0)),
        ms(percentile(&latencies, 95.0)),
        ms(latencies[latencies.len() - 1]),
    );
    Ok(())
}
