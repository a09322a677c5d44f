//! Real etcd for the tests, from the `etcd` binary (3.4 from PATH, or the
//! one `ERE_ETCD` names: the library's `localcluster` decides) on free
//! 127.0.0.1 ports: [`EtcdCluster`], a cluster of n with test timings, and
//! [`Etcd`], one member with a metrics listener, answering before it is
//! handed out. Each holds a heavy-test slot ([`crate::heavy`]) while it runs;
//! every member is killed on drop. Also: a lone member's command line
//! ([`member_command`]), reading the revision and writing until it reaches a
//! target.

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use etcd_readiness_exporter::cmd::localcluster;
pub use etcd_readiness_exporter::cmd::localcluster::{
    Builder, LocalCluster, ServerTls, default_etcd,
};

use crate::heavy::{self, Slot};
use crate::wait::{poll, wait_until};

/// The command line of one etcd member started outside a [`LocalCluster`]
/// (a learner joining one, a member of another cluster), listening on
/// `client` and `peer` URLs, in the cluster `initial` (`name=peer,...`).
/// Callers add the cluster state, timings, TLS and output.
pub fn member_command(
    etcd: &Path,
    name: &str,
    data_dir: &Path,
    client: &str,
    peer: &str,
    initial: &str,
) -> Command {
    localcluster::member_command(etcd, name, data_dir, client, (peer, peer), initial)
}

/// Member `i`'s log so far (empty when it cannot be read).
pub fn member_log(cluster: &LocalCluster, i: usize) -> String {
    std::fs::read_to_string(&cluster.members[i].log).unwrap_or_default()
}

/// Builds an [`EtcdCluster`]: the library's [`LocalCluster`] with test
/// timings (50 ms heartbeat, 500 ms election timeout: fast failover).
pub struct EtcdClusterBuilder(Builder);

impl EtcdClusterBuilder {
    /// Serve clients over https with client-certificate auth.
    pub fn tls(self, tls: ServerTls) -> Self {
        EtcdClusterBuilder(self.0.tls(tls))
    }

    /// `--heartbeat-interval` and `--election-timeout` in milliseconds,
    /// instead of the test timings (50, 500).
    pub fn timings(self, heartbeat_ms: u32, election_ms: u32) -> Self {
        EtcdClusterBuilder(self.0.timings(heartbeat_ms, election_ms))
    }

    /// `--quota-backend-bytes`.
    pub fn quota(self, bytes: u64) -> Self {
        EtcdClusterBuilder(self.0.quota(bytes))
    }

    /// Peers dial `ports[i]` for member `i` (a relay in front of its peer
    /// port, e.g. [`crate::slowlink`]).
    pub fn advertise_peers(self, ports: Vec<u16>) -> Self {
        EtcdClusterBuilder(self.0.advertise_peers(ports))
    }

    /// Start the members, once this test holds a heavy-test slot
    /// ([`crate::heavy`]: how many clusters run at once).
    pub fn start(self) -> EtcdCluster {
        let slot = heavy::slot();
        EtcdCluster(self.0.start().expect("etcd cluster"), slot)
    }
}

/// A running etcd cluster ([`LocalCluster`], whose methods it has); the
/// controls that can fail panic here, as a test should. Dropping it kills
/// every member; dropping it in a failing test first prints the tail of
/// every member's log (what explains a cluster that did not serve).
pub struct EtcdCluster(pub LocalCluster, #[allow(dead_code)] Slot);

impl Drop for EtcdCluster {
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!(
                "--- etcd member logs (the test failed) ---\n{}",
                self.0.log_tails()
            );
        }
    }
}

impl std::ops::Deref for EtcdCluster {
    type Target = LocalCluster;
    fn deref(&self) -> &LocalCluster {
        &self.0
    }
}

impl std::ops::DerefMut for EtcdCluster {
    fn deref_mut(&mut self) -> &mut LocalCluster {
        &mut self.0
    }
}

impl EtcdCluster {
    pub fn builder(n: usize) -> EtcdClusterBuilder {
        EtcdClusterBuilder(LocalCluster::builder(n).timings(50, 500))
    }

    /// Freeze the member (SIGSTOP): its ports stay open, nothing answers.
    pub fn stop(&mut self, i: usize) {
        self.0.stop(i).unwrap();
    }

    pub fn cont(&mut self, i: usize) {
        self.0.cont(i).unwrap();
    }

    /// Kill member `i` and start it again on its data directory.
    pub fn restart(&mut self, i: usize) {
        self.0.kill(i);
        self.0.spawn(i).unwrap();
    }

    /// Member `i`'s log so far.
    pub fn log(&self, i: usize) -> String {
        member_log(&self.0, i)
    }

    /// Every member's client URL.
    pub fn endpoints(&self) -> Vec<String> {
        (0..self.0.members.len())
            .map(|i| self.0.endpoint(i))
            .collect()
    }

    /// A plain (non-TLS) client to member `i`, for test writes.
    pub async fn client(&self, i: usize) -> etcd_client::Client {
        self.0.client(i).await.unwrap()
    }
}

/// A single-member etcd 3.4 with a metrics listener: the library's
/// [`LocalCluster`] of one, started and answering a linearizable get.
pub struct Etcd {
    pub client_url: String,
    pub metrics_url: String,
    pub cluster: LocalCluster,
    /// A heavy-test slot ([`crate::heavy`]), held while it runs.
    _slot: Slot,
}

impl Etcd {
    pub async fn start() -> Etcd {
        Etcd::start_with(|b| b).await
    }

    /// [`Etcd::start`] with the builder changed by `f` (e.g. `Builder::ipv6`).
    pub async fn start_with(f: impl FnOnce(Builder) -> Builder) -> Etcd {
        let slot = heavy::slot();
        let cluster = f(LocalCluster::builder(1).metrics())
            .start()
            .expect("etcd (apt-get install etcd-server)");
        let etcd = Etcd {
            client_url: cluster.endpoint(0),
            metrics_url: cluster.metrics_url(0).expect("built with metrics"),
            cluster,
            _slot: slot,
        };
        let url = etcd.client_url.clone();
        wait_until(
            "etcd to answer a linearizable get",
            Duration::from_secs(20),
            || {
                let url = url.clone();
                async move {
                    let Ok(Ok(mut c)) = tokio::time::timeout(
                        Duration::from_secs(1),
                        etcd_client::Client::connect([url], None),
                    )
                    .await
                    else {
                        return false;
                    };
                    matches!(
                        tokio::time::timeout(Duration::from_secs(1), c.get("probe", None)).await,
                        Ok(Ok(_))
                    )
                }
            },
        )
        .await;
        etcd
    }

    /// SIGKILL the member.
    pub fn kill(&mut self) {
        self.cluster.kill(0);
    }

    pub async fn client(&self) -> etcd_client::Client {
        let opts = etcd_client::ConnectOptions::new().with_timeout(Duration::from_secs(5));
        etcd_client::Client::connect([self.client_url.clone()], Some(opts))
            .await
            .unwrap()
    }
}

/// The current revision, from the header of a linearizable Range, and the
/// Range's latency in milliseconds.
pub async fn read_revision(client: &mut etcd_client::Client) -> (i64, f64) {
    let t = Instant::now();
    let resp = client.get("probe", None).await.unwrap();
    let ms = t.elapsed().as_secs_f64() * 1000.0;
    (resp.header().unwrap().revision(), ms)
}

/// Write keys (64 in flight) until the revision is at least `target`.
pub async fn write_until_revision(client: &etcd_client::Client, target: i64) -> i64 {
    // Each probe writes the next batch itself: no sleep between.
    let written = poll(Duration::from_secs(40), Duration::ZERO, || async move {
        let (rev, _) = read_revision(&mut client.clone()).await;
        if rev >= target {
            return Ok(rev);
        }
        let n = (target - rev).min(2000);
        let mut tasks = tokio::task::JoinSet::new();
        for w in 0..64 {
            let mut c = client.clone();
            tasks.spawn(async move {
                let mut i = w;
                while i < n {
                    c.put(format!("k{}", i % 100), "v", None).await.unwrap();
                    i += 64;
                }
            });
        }
        while let Some(r) = tasks.join_next().await {
            r.unwrap();
        }
        Err(rev)
    })
    .await;
    written.unwrap_or_else(|rev| panic!("etcd revision stuck at {rev}"))
}
