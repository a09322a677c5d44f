//! A real etcd cluster of local processes on free 127.0.0.1 ports: the one
//! launcher behind `demo`, and under the tests' and benchmarks' launchers
//! (`etcd_readiness_testkit::etcd`, which adds test timings, the heavy-test
//! slot and what only tests start, such as a lone member). Members run the
//! `etcd` binary with their own data directory and log under a directory
//! that is removed on drop; every member is killed on drop too. Members can
//! be killed, frozen (SIGSTOP), resumed and restarted on their data, and
//! asked for Status with a deadline.

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

/// Why a cluster could not be started or a member not be controlled.
#[derive(Debug, thiserror::Error)]
pub enum ClusterError {
    #[error("cannot create the cluster directory {}: {source}", path.display())]
    Dir {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("cannot pick free loopback ports: {0}")]
    Ports(std::io::Error),
    #[error("cannot open the log {}: {source}", path.display())]
    Log {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("cannot start {} (apt-get install etcd-server): {source}", etcd.display())]
    Spawn {
        etcd: PathBuf,
        source: std::io::Error,
    },
    #[error("cannot send {signal} to member {member}: {reason}")]
    Signal {
        member: String,
        signal: &'static str,
        reason: String,
    },
    #[error("member {member}: {reason}")]
    Client { member: String, reason: String },
}

/// Find `name` in `PATH`.
pub fn find_in_path(name: &str) -> Option<PathBuf> {
    std::env::var_os("PATH").and_then(|p| {
        std::env::split_paths(&p)
            .map(|d| d.join(name))
            .find(|f| f.is_file())
    })
}

/// `n` distinct free loopback ports for child processes to bind. All
/// listeners are held until every port is chosen, so one call never hands
/// out the same port twice. The ports are taken below the kernel's
/// ephemeral range (`net.ipv4.ip_local_port_range`) when there is room
/// there: every outgoing connection on the machine (a client, the exporter,
/// a test) takes its source port from that range, so a port picked by
/// binding `:0` could be taken by one of them between its release here and
/// the child's bind, and an etcd member would then fail with "address
/// already in use" (seen under load). Below the range only another
/// explicit bind can take it; this process never hands a port out twice,
/// and the start is random so that concurrent test processes rarely meet.
pub fn free_ports(n: usize) -> std::io::Result<Vec<u16>> {
    match below_ephemeral() {
        Some(range) => pick_in(range, n),
        None => {
            let listeners = (0..n)
                .map(|_| TcpListener::bind("127.0.0.1:0"))
                .collect::<std::io::Result<Vec<_>>>()?;
            listeners
                .iter()
                .map(|l| Ok(l.local_addr()?.port()))
                .collect()
        }
    }
}

/// The ports from 10000 up to the start of the ephemeral range, when that
/// leaves at least a thousand.
fn below_ephemeral() -> Option<std::ops::Range<u16>> {
    let text = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range").ok()?;
    let low: u16 = text.split_whitespace().next()?.parse().ok()?;
    (low >= 11_000).then_some(10_000..low)
}

/// `n` ports of `range` that bind on 127.0.0.1 (and on ::1 where it
/// exists) and that this process has not handed out before.
fn pick_in(range: std::ops::Range<u16>, n: usize) -> std::io::Result<Vec<u16>> {
    use std::collections::HashSet;
    use std::sync::Mutex;
    static HANDED_OUT: Mutex<Option<HashSet<u16>>> = Mutex::new(None);
    let mut handed = HANDED_OUT.lock().unwrap_or_else(|e| e.into_inner());
    let handed = handed.get_or_insert_with(HashSet::new);
    let width = usize::from(range.end - range.start);
    if handed.len() + n > width / 2 {
        handed.clear();
    }
    let start = fastrand::usize(..width);
    let mut held = Vec::with_capacity(n);
    for offset in 0..width {
        if held.len() == n {
            break;
        }
        let Ok(port) = u16::try_from(range.start as usize + (start + offset) % width) else {
            continue;
        };
        if handed.contains(&port) {
            continue;
        }
        let Ok(v4) = TcpListener::bind(("127.0.0.1", port)) else {
            continue;
        };
        let v6 = TcpListener::bind(("::1", port));
        if matches!(&v6, Err(e) if e.kind() == std::io::ErrorKind::AddrInUse) {
            continue;
        }
        held.push((port, v4, v6.ok()));
    }
    if held.len() < n {
        return Err(std::io::Error::new(
            std::io::ErrorKind::AddrNotAvailable,
            format!("fewer than {n} free loopback ports in {range:?}"),
        ));
    }
    let ports: Vec<u16> = held.iter().map(|(p, _, _)| *p).collect();
    handed.extend(&ports);
    Ok(ports)
}

/// The command line of one member listening on `client` and for peers on
/// `peer.0`, telling them to dial `peer.1` (`peer.0`, or a relay in front of
/// it, [`Builder::advertise_peers`]), in the cluster `initial`
/// (`name=peer,...`). The caller adds the cluster state, timings, TLS and
/// output. The testkit's lone members (a learner, a member of another
/// cluster) are started from the same command line.
pub fn member_command(
    etcd: &Path,
    name: &str,
    data_dir: &Path,
    client: &str,
    peer: (&str, &str),
    initial: &str,
) -> Command {
    let mut cmd = Command::new(etcd);
    cmd.args(["--name", name])
        .arg("--data-dir")
        .arg(data_dir)
        .args(["--listen-client-urls", client])
        .args(["--advertise-client-urls", client])
        .args(["--listen-peer-urls", peer.0])
        .args(["--initial-advertise-peer-urls", peer.1])
        .args(["--initial-cluster", initial]);
    cmd
}

/// Server TLS material for the members' client URLs (PEM file paths); the
/// members then require client certificates signed by `ca`.
#[derive(Clone, Debug)]
pub struct ServerTls {
    pub ca: PathBuf,
    pub cert: PathBuf,
    pub key: PathBuf,
}

/// One member process.
#[derive(Debug)]
pub struct Member {
    pub name: String,
    pub client_port: u16,
    pub peer_port: u16,
    /// The port its peers dial: `peer_port`, or a relay's in front of it
    /// ([`Builder::advertise_peers`]).
    pub advertised_peer_port: u16,
    /// `--listen-metrics-urls` port, when the cluster was built with metrics.
    pub metrics_port: Option<u16>,
    pub data_dir: PathBuf,
    pub log: PathBuf,
    child: Option<Child>,
    stopped: bool,
}

impl Member {
    /// Its process id while it runs.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }
}

/// The environment variable that names the `etcd` binary every local
/// cluster runs (the demo's and the tests'): how CI runs the same tests on
/// etcd 3.4 and 3.5 (`.ci/fetch-binaries`, docs/compatibility.md).
pub const ETCD_ENV: &str = "ERE_ETCD";

/// `$ERE_ETCD` when set and not empty, else `etcd` (from `PATH`).
pub fn default_etcd() -> PathBuf {
    match std::env::var_os(ETCD_ENV) {
        Some(p) if !p.is_empty() => PathBuf::from(p),
        _ => PathBuf::from("etcd"),
    }
}

/// How to start a [`LocalCluster`].
#[derive(Clone, Debug)]
pub struct Builder {
    n: usize,
    etcd: PathBuf,
    heartbeat_ms: u32,
    election_ms: u32,
    tls: Option<ServerTls>,
    quota: Option<u64>,
    metrics: bool,
    /// The loopback address every URL of the members uses.
    loopback: std::net::IpAddr,
    advertised_peer_ports: Option<Vec<u16>>,
}

impl Builder {
    /// Listen (client, peer, metrics) on `[::1]` instead of 127.0.0.1.
    pub fn ipv6(mut self) -> Self {
        self.loopback = std::net::Ipv6Addr::LOCALHOST.into();
        self
    }

    /// Member `i` tells its peers to dial `ports[i]` instead of its own peer
    /// port: where the caller runs a relay to it (e.g. one that delays the
    /// traffic, to stretch the cluster over a slow link).
    pub fn advertise_peers(mut self, ports: Vec<u16>) -> Self {
        self.advertised_peer_ports = Some(ports);
        self
    }

    /// The `etcd` binary to run (default: [`default_etcd`]).
    pub fn etcd(mut self, etcd: impl Into<PathBuf>) -> Self {
        self.etcd = etcd.into();
        self
    }

    /// `--heartbeat-interval` and `--election-timeout` in milliseconds
    /// (default 100 and 1000, etcd's defaults).
    pub fn timings(mut self, heartbeat_ms: u32, election_ms: u32) -> Self {
        self.heartbeat_ms = heartbeat_ms;
        self.election_ms = election_ms;
        self
    }

    /// Serve clients over https with client-certificate auth.
    pub fn tls(mut self, tls: ServerTls) -> Self {
        self.tls = Some(tls);
        self
    }

    /// `--quota-backend-bytes`.
    pub fn quota(mut self, bytes: u64) -> Self {
        self.quota = Some(bytes);
        self
    }

    /// Give every member a plain-HTTP `--listen-metrics-urls` listener.
    pub fn metrics(mut self) -> Self {
        self.metrics = true;
        self
    }

    /// Start every member (returns once the processes are spawned; wait for
    /// a leader with [`LocalCluster::leader`]).
    pub fn start(self) -> Result<LocalCluster, ClusterError> {
        let dir = unique_dir();
        std::fs::create_dir_all(&dir).map_err(|source| ClusterError::Dir {
            path: dir.clone(),
            source,
        })?;
        let ports = free_ports(3 * self.n).map_err(ClusterError::Ports)?;
        let members = (1..=self.n)
            .map(|i| Member {
                name: format!("m{i}"),
                client_port: ports[3 * i - 3],
                peer_port: ports[3 * i - 2],
                advertised_peer_port: self
                    .advertised_peer_ports
                    .as_ref()
                    .and_then(|a| a.get(i - 1).copied())
                    .unwrap_or(ports[3 * i - 2]),
                metrics_port: self.metrics.then_some(ports[3 * i - 1]),
                data_dir: dir.join(format!("m{i}.etcd")),
                log: dir.join(format!("m{i}.log")),
                child: None,
                stopped: false,
            })
            .collect();
        let mut c = LocalCluster {
            dir,
            members,
            cfg: self,
        };
        for i in 0..c.members.len() {
            c.spawn(i)?;
        }
        Ok(c)
    }
}

/// A fresh directory for one cluster: under /dev/shm when it exists (etcd
/// fsyncs; tmpfs keeps that cheap), else the temp dir.
fn unique_dir() -> PathBuf {
    use std::sync::atomic::{AtomicU32, Ordering};
    static SEQ: AtomicU32 = AtomicU32::new(0);
    let base = if Path::new("/dev/shm").is_dir() {
        PathBuf::from("/dev/shm")
    } else {
        std::env::temp_dir()
    };
    base.join(format!(
        "etcd-readiness-cluster-{}-{}",
        std::process::id(),
        SEQ.fetch_add(1, Ordering::Relaxed)
    ))
}

/// A running local etcd cluster. Dropping it kills every member and removes
/// its directory.
#[derive(Debug)]
pub struct LocalCluster {
    pub dir: PathBuf,
    pub members: Vec<Member>,
    cfg: Builder,
}

impl LocalCluster {
    /// A cluster of `n` members, of the `etcd` named by [`ETCD_ENV`] or
    /// else `etcd` from `PATH`.
    pub fn builder(n: usize) -> Builder {
        Builder {
            n,
            etcd: default_etcd(),
            heartbeat_ms: 100,
            election_ms: 1000,
            tls: None,
            quota: None,
            metrics: false,
            loopback: std::net::Ipv4Addr::LOCALHOST.into(),
            advertised_peer_ports: None,
        }
    }

    /// `scheme://LOOPBACK:port` (IPv6 in brackets).
    fn url(&self, scheme: &str, port: u16) -> String {
        format!(
            "{scheme}://{}",
            std::net::SocketAddr::new(self.cfg.loopback, port)
        )
    }

    fn scheme(&self) -> &'static str {
        if self.cfg.tls.is_some() {
            "https"
        } else {
            "http"
        }
    }

    /// Member `i`'s client URL.
    pub fn endpoint(&self, i: usize) -> String {
        self.url(self.scheme(), self.members[i].client_port)
    }

    /// Member `i`'s metrics URL (`--listen-metrics-urls`), when built with
    /// [`Builder::metrics`].
    pub fn metrics_url(&self, i: usize) -> Option<String> {
        self.members[i].metrics_port.map(|p| self.url("http", p))
    }

    fn initial_cluster(&self) -> String {
        self.members
            .iter()
            .map(|m| format!("{}={}", m.name, self.url("http", m.advertised_peer_port)))
            .collect::<Vec<_>>()
            .join(",")
    }

    /// Start member `i` (again, on its data directory) unless it runs.
    pub fn spawn(&mut self, i: usize) -> Result<(), ClusterError> {
        if self.members[i].child.is_some() {
            return Ok(());
        }
        let initial = self.initial_cluster();
        let client = self.endpoint(i);
        let peer = self.url("http", self.members[i].peer_port);
        let metrics = self.metrics_url(i);
        let advertised = self.url("http", self.members[i].advertised_peer_port);
        let m = &mut self.members[i];
        let log_err = |source| ClusterError::Log {
            path: m.log.clone(),
            source,
        };
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&m.log)
            .map_err(log_err)?;
        let log2 = log.try_clone().map_err(log_err)?;
        let mut cmd = member_command(
            &self.cfg.etcd,
            &m.name,
            &m.data_dir,
            &client,
            (&peer, &advertised),
            &initial,
        );
        cmd.args(["--initial-cluster-state", "new"])
            .arg(format!("--heartbeat-interval={}", self.cfg.heartbeat_ms))
            .arg(format!("--election-timeout={}", self.cfg.election_ms))
            .stdin(Stdio::null())
            .stdout(log2)
            .stderr(log);
        if let Some(q) = self.cfg.quota {
            cmd.arg(format!("--quota-backend-bytes={q}"));
        }
        if let Some(url) = metrics {
            cmd.arg(format!("--listen-metrics-urls={url}"));
        }
        if let Some(t) = &self.cfg.tls {
            cmd.arg("--client-cert-auth")
                .arg("--trusted-ca-file")
                .arg(&t.ca)
                .arg("--cert-file")
                .arg(&t.cert)
                .arg("--key-file")
                .arg(&t.key);
        }
        let child = cmd.spawn().map_err(|source| ClusterError::Spawn {
            etcd: self.cfg.etcd.clone(),
            source,
        })?;
        m.child = Some(child);
        m.stopped = false;
        Ok(())
    }

    /// SIGKILL member `i` and reap it (no-op when it is not running).
    pub fn kill(&mut self, i: usize) {
        let m = &mut self.members[i];
        if let Some(mut c) = m.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
        m.stopped = false;
    }

    fn signal(&self, i: usize, signal: &'static str) -> Result<(), ClusterError> {
        let m = &self.members[i];
        let err = |reason: String| ClusterError::Signal {
            member: m.name.clone(),
            signal,
            reason,
        };
        let pid = m.pid().ok_or_else(|| err("not running".into()))?;
        let st = Command::new("kill")
            .args([signal, &pid.to_string()])
            .status()
            .map_err(|e| err(format!("cannot run kill (procps): {e}")))?;
        if st.success() {
            Ok(())
        } else {
            Err(err(format!("kill exited with {st}")))
        }
    }

    /// Freeze member `i` (SIGSTOP): its ports stay open, nothing answers.
    pub fn stop(&mut self, i: usize) -> Result<(), ClusterError> {
        self.signal(i, "-STOP")?;
        self.members[i].stopped = true;
        Ok(())
    }

    /// Resume a frozen member (SIGCONT).
    pub fn cont(&mut self, i: usize) -> Result<(), ClusterError> {
        self.signal(i, "-CONT")?;
        self.members[i].stopped = false;
        Ok(())
    }

    /// The last lines of every member's log, for a failure message.
    pub fn log_tails(&self) -> String {
        self.members
            .iter()
            .map(|m| {
                let text = std::fs::read_to_string(&m.log).unwrap_or_default();
                let tail: Vec<&str> = text.lines().rev().take(5).collect();
                let tail: Vec<&str> = tail.into_iter().rev().collect();
                format!("--- {} ({}):\n{}", m.name, m.log.display(), tail.join("\n"))
            })
            .collect::<Vec<_>>()
            .join("\n")
    }

    /// A plain (non-TLS) client to member `i` with a 2 s request timeout.
    pub async fn client(&self, i: usize) -> Result<etcd_client::Client, ClusterError> {
        let connect = etcd_client::Client::connect(
            [self.endpoint(i)],
            Some(etcd_client::ConnectOptions::new().with_timeout(Duration::from_secs(2))),
        );
        let err = |reason: String| ClusterError::Client {
            member: self.members[i].name.clone(),
            reason,
        };
        match tokio::time::timeout(Duration::from_secs(5), connect).await {
            Ok(Ok(c)) => Ok(c),
            Ok(Err(e)) => Err(err(e.to_string())),
            Err(_) => Err(err("connect timed out after 5s".into())),
        }
    }

    /// Maintenance.Status of a running, unfrozen member over plain HTTP, or
    /// `None` (down, frozen, TLS, or no answer within 2 s).
    pub async fn status(&self, i: usize) -> Option<etcd_client::StatusResponse> {
        let m = &self.members[i];
        if m.child.is_none() || m.stopped || self.cfg.tls.is_some() {
            return None;
        }
        let st = async {
            let mut c = self.client(i).await.ok()?;
            c.status().await.ok()
        };
        tokio::time::timeout(Duration::from_secs(2), st)
            .await
            .ok()
            .flatten()
    }

    /// Member `i`'s id as Status reports it.
    pub async fn member_id(&self, i: usize) -> Result<u64, ClusterError> {
        self.status(i)
            .await
            .and_then(|s| s.header().map(|h| h.member_id()))
            .ok_or_else(|| ClusterError::Client {
                member: self.members[i].name.clone(),
                reason: "no Status answer".into(),
            })
    }

    /// Index of the leader, asked of every answering member.
    pub async fn leader(&self) -> Option<usize> {
        let mut ids = vec![0u64; self.members.len()];
        let mut leader = 0;
        for (i, id) in ids.iter_mut().enumerate() {
            if let Some(s) = self.status(i).await {
                *id = s.header().map_or(0, |h| h.member_id());
                if s.leader() != 0 {
                    leader = s.leader();
                }
            }
        }
        ids.iter().position(|id| *id != 0 && *id == leader)
    }

    /// How many answering members agree on one leader.
    pub async fn members_agreeing_on_leader(&self) -> usize {
        let mut leaders = Vec::new();
        for i in 0..self.members.len() {
            if let Some(s) = self.status(i).await {
                leaders.push(s.leader());
            }
        }
        match leaders.first() {
            Some(&l) if l != 0 => leaders.iter().filter(|x| **x == l).count(),
            _ => 0,
        }
    }
}

impl Drop for LocalCluster {
    fn drop(&mut self) {
        for i in 0..self.members.len() {
            if self.members[i].stopped {
                let _ = self.cont(i);
            }
            self.kill(i);
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn free_ports_are_distinct_bindable_and_outside_the_ephemeral_range() {
        let first = free_ports(30).unwrap();
        let second = free_ports(30).unwrap();
        let all: std::collections::HashSet<u16> = first.iter().chain(&second).copied().collect();
        assert_eq!(
            all.len(),
            60,
            "a port was handed out twice: {first:?} {second:?}"
        );
        if let Some(range) = below_ephemeral() {
            assert!(
                all.iter().all(|p| range.contains(p)),
                "{all:?} not in {range:?}"
            );
        }
        for p in first {
            TcpListener::bind(("127.0.0.1", p)).unwrap();
        }
    }
}
