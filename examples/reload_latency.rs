//! Policy reload latency: time from the kubelet-style rename of `..data`
//! (`etcd_readiness_testkit::atomic_writer`) to the new policy being in force, over many
//! swaps, with the watcher's default options unless told otherwise.
//!
//! Two end points:
//! - `sink` (default): the new policy reaches the engine (`PolicySink::apply`);
//! - `http`: the new policy is served by `GET /policy` of a real in-process
//!   `serve` (its etcd endpoint is a closed loopback port: /policy does not
//!   depend on etcd), polled every millisecond.
//!
//! Run: `cargo run --release --example reload_latency -- [SWAPS] [DEBOUNCE_MS] [sink|http]`
//! (defaults 60, 100, sink).

use std::path::Path;
use std::sync::Arc;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use etcd_readiness_exporter::config::{ServeArgs, ServeConfig};
use etcd_readiness_exporter::outside::http_client;
use etcd_readiness_exporter::reload::{
    self, PolicySink, ReloadMetrics, Reloader, WatchOptions, spawn_watcher,
};
use etcd_readiness_policy::policy::Policy;
use etcd_readiness_policy::signals::Catalogue;
use etcd_readiness_testkit::atomic_writer::AtomicWriterVolume;
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

/// How long one GET of `/policy` may take: it is answered at once.
const ANSWER_WITHIN: Duration = Duration::from_secs(5);

/// Measures one swap: returns when the policy with `want` is in force.
enum Probe {
    Sink(mpsc::Receiver<(String, Instant)>),
    Http(std::net::SocketAddr),
}

impl Probe {
    async fn wait_for(&self, want: &str) -> Result<Instant> {
        let deadline = Instant::now() + Duration::from_secs(10);
        match self {
            Probe::Sink(rx) => tokio::task::block_in_place(|| {
                loop {
                    let left = deadline.saturating_duration_since(Instant::now());
                    let (sha, at) = rx
                        .recv_timeout(left)
                        .context("no policy applied within 10 s")?;
                    if sha == want {
                        return Ok(at);
                    }
                }
            }),
            Probe::Http(addr) => loop {
                let answer = http_client::get_at(*addr, "/policy", None, ANSWER_WITHIN).await?;
                if answer.body.contains(want) {
                    return Ok(Instant::now());
                }
                if Instant::now() > deadline {
                    bail!("/policy did not show {want} within 10 s");
                }
                tokio::time::sleep(Duration::from_millis(1)).await;
            },
        }
    }
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> Result<()> {
    let mut args = std::env::args().skip(1);
    let swaps: usize = args.next().map_or(Ok(60), |a| a.parse())?;
    let debounce_ms: u64 = args.next().map_or(Ok(100), |a| a.parse())?;
    let mode = args.next().unwrap_or_else(|| "sink".to_string());
    if swaps == 0 {
        bail!("SWAPS must be at least 1");
    }
    let dir = tempfile::tempdir()?;
    let mut volume = AtomicWriterVolume::create(dir.path(), "policy", &policy(0))?;
    let path = volume.path();
    let opts = WatchOptions {
        debounce: Duration::from_millis(debounce_ms),
        ..WatchOptions::default()
    };

    // Keep whatever runs the watcher alive for the whole measurement.
    let (probe, _keep): (Probe, Box<dyn std::any::Any>) = match mode.as_str() {
        "sink" => {
            let catalogue = Arc::new(Catalogue::builtin());
            let initial = reload::load(Path::new(&path), &catalogue)?;
            let (tx, rx) = mpsc::channel();
            let mut registry = Registry::default();
            let reloader = Arc::new(Reloader::policy(
                &path,
                catalogue,
                Arc::new(Sink(tx)),
                ReloadMetrics::register(&mut registry),
                Some(&initial),
                etcd_readiness_exporter::runtime::clock::Clock::node(),
            ));
            let supervisor = etcd_readiness_exporter::runtime::supervise::Supervisor::new(
                etcd_readiness_exporter::runtime::clock::Clock::node(),
            );
            let watcher = spawn_watcher("policy-watcher", reloader, opts.clone(), &supervisor);
            (Probe::Sink(rx), Box::new(watcher))
        }
        "http" => {
            if debounce_ms != 100 {
                bail!("http mode uses serve's watcher with its default 100 ms debounce");
            }
            let mut a = ServeArgs::for_endpoint("http://127.0.0.1:1");
            a.web_listen_address = "127.0.0.1:0".to_string();
            a.policy = Some(path.clone());
            let running =
                etcd_readiness_exporter::cmd::serve::start(ServeConfig::from_args(&a)?).await?;
            (Probe::Http(running.addr), Box::new(running))
        }
        other => bail!("mode must be sink or http, not {other}"),
    };

    let mut latencies = Vec::with_capacity(swaps);
    for i in 1..=swaps {
        let content = policy(i);
        let want = hex::encode(Sha256::digest(content.as_bytes()));
        let renamed_at = volume.update(&content)?;
        let seen_at = probe.wait_for(&want).await?;
        latencies.push(seen_at.saturating_duration_since(renamed_at));
    }
    latencies.sort();
    let ms = |d: Duration| d.as_secs_f64() * 1000.0;
    let end = if mode == "http" {
        "GET /policy"
    } else {
        "PolicySink::apply"
    };
    println!(
        "policy reload latency, rename of ..data -> {end}, {swaps} swaps, debounce {debounce_ms} ms, resync {:?}",
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
