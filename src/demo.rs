//! `demo`: a guided tour on a real, local 3-member etcd cluster. It starts the
//! members from the `etcd` binary on free 127.0.0.1 ports with temporary data
//! directories, runs the exporter in-process against member 1 with the
//! default policy, and walks through: healthy → leader killed → quorum lost →
//! restored, printing `/readyz?verbose` whenever readiness changes. Every
//! child is killed on Ctrl-C/SIGTERM, on error and on panic (Drop guards).

use std::net::{SocketAddr, TcpListener};
use std::path::PathBuf;
use std::process::{Child, Command, ExitCode, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use clap::Args;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::config::{ServeArgs, ServeConfig};

/// Flags of `demo`.
#[derive(Args, Clone, Debug)]
pub struct DemoArgs {
    /// Address for the exporter's HTTP server.
    #[arg(long = "web.listen-address", default_value = "127.0.0.1:9379")]
    pub listen: String,
}

/// Find `name` in `PATH`.
pub fn find_in_path(name: &str) -> Option<PathBuf> {
    std::env::var_os("PATH").and_then(|p| {
        std::env::split_paths(&p)
            .map(|d| d.join(name))
            .find(|f| f.is_file())
    })
}

/// A free TCP port on 127.0.0.1 (bound and released).
pub fn free_port() -> std::io::Result<u16> {
    Ok(free_ports(1)?[0])
}

/// `n` distinct free loopback ports. All listeners are held until every port
/// is chosen, so the kernel cannot hand the same port out twice (which would
/// make one etcd member fail to bind and silently shrink the cluster).
pub fn free_ports(n: usize) -> std::io::Result<Vec<u16>> {
    let listeners = (0..n)
        .map(|_| TcpListener::bind("127.0.0.1:0"))
        .collect::<std::io::Result<Vec<_>>>()?;
    listeners
        .iter()
        .map(|l| Ok(l.local_addr()?.port()))
        .collect()
}

/// The command line of one etcd member listening on `client` and `peer`
/// URLs, in the cluster `initial` (`name=peer,...`). Callers add the cluster
/// state, timings, TLS and output. Shared by the demo, the tests and benches.
pub fn etcd_member_command(
    etcd: &std::path::Path,
    name: &str,
    data_dir: &std::path::Path,
    client: &str,
    peer: &str,
    initial: &str,
) -> Command {
    let mut cmd = Command::new(etcd);
    cmd.args(["--name", name])
        .arg("--data-dir")
        .arg(data_dir)
        .args(["--listen-client-urls", client])
        .args(["--advertise-client-urls", client])
        .args(["--listen-peer-urls", peer])
        .args(["--initial-advertise-peer-urls", peer])
        .args(["--initial-cluster", initial]);
    cmd
}

/// One etcd member process.
struct Member {
    name: String,
    client_port: u16,
    peer_port: u16,
    data_dir: PathBuf,
    log: PathBuf,
    child: Option<Child>,
}

/// A local etcd cluster; dropping it kills every member and removes the data.
struct Cluster {
    etcd: PathBuf,
    dir: PathBuf,
    members: Vec<Member>,
}

impl Cluster {
    fn start(etcd: PathBuf, n: usize) -> anyhow::Result<Cluster> {
        let dir = std::env::temp_dir().join(format!("etcd-readiness-demo-{}", std::process::id()));
        std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
        let mut members = Vec::new();
        let ports = free_ports(2 * n)?;
        for i in 1..=n {
            members.push(Member {
                name: format!("m{i}"),
                client_port: ports[2 * i - 2],
                peer_port: ports[2 * i - 1],
                data_dir: dir.join(format!("m{i}.etcd")),
                log: dir.join(format!("m{i}.log")),
                child: None,
            });
        }
        let mut c = Cluster { etcd, dir, members };
        for i in 0..n {
            c.spawn(i)?;
        }
        Ok(c)
    }

    fn initial_cluster(&self) -> String {
        self.members
            .iter()
            .map(|m| format!("{}=http://127.0.0.1:{}", m.name, m.peer_port))
            .collect::<Vec<_>>()
            .join(",")
    }

    fn spawn(&mut self, i: usize) -> anyhow::Result<()> {
        let initial = self.initial_cluster();
        let m = &mut self.members[i];
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&m.log)?;
        let client = format!("http://127.0.0.1:{}", m.client_port);
        let peer = format!("http://127.0.0.1:{}", m.peer_port);
        let child = etcd_member_command(&self.etcd, &m.name, &m.data_dir, &client, &peer, &initial)
            .args(["--initial-cluster-state", "new"])
            .args(["--heartbeat-interval", "100", "--election-timeout", "1000"])
            .stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log)
            .spawn()
            .with_context(|| format!("starting {}", self.etcd.display()))?;
        m.child = Some(child);
        Ok(())
    }

    fn kill(&mut self, i: usize) {
        if let Some(mut c) = self.members[i].child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    fn endpoint(&self, i: usize) -> String {
        format!("http://127.0.0.1:{}", self.members[i].client_port)
    }

    /// Maintenance.Status of a live member, or `None` (dead, or no answer in 2 s).
    async fn status(&self, i: usize) -> Option<etcd_client::StatusResponse> {
        self.members[i].child.as_ref()?;
        let st = async {
            let mut c = etcd_client::Client::connect(
                [self.endpoint(i)],
                Some(etcd_client::ConnectOptions::new().with_timeout(Duration::from_secs(1))),
            )
            .await
            .ok()?;
            c.status().await.ok()
        };
        tokio::time::timeout(Duration::from_secs(2), st)
            .await
            .ok()
            .flatten()
    }

    /// How many live members answer Status and agree on one leader.
    async fn members_agreeing_on_leader(&self) -> usize {
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

    /// The last lines of every member's log, for a failure message.
    fn log_tails(&self) -> String {
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

    /// Index of the member that is leader, asked of every live member.
    async fn leader(&self) -> Option<usize> {
        let mut ids = Vec::new();
        let mut leader = 0;
        for i in 0..self.members.len() {
            match self.status(i).await {
                Some(s) => {
                    ids.push(s.header().map_or(0, |h| h.member_id()));
                    if s.leader() != 0 {
                        leader = s.leader();
                    }
                }
                None => ids.push(0),
            }
        }
        ids.iter().position(|id| *id != 0 && *id == leader)
    }

    async fn member_id(&self, i: usize) -> anyhow::Result<u64> {
        let mut c = etcd_client::Client::connect([self.endpoint(i)], None).await?;
        let s = tokio::time::timeout(Duration::from_secs(2), c.status()).await??;
        Ok(s.header().map_or(0, |h| h.member_id()))
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        for i in 0..self.members.len() {
            self.kill(i);
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// A minimal HTTP/1.0 GET: (status, body). Enough for a demo and tests that
/// talk to our own server on loopback.
pub async fn http_get(
    addr: SocketAddr,
    path: &str,
    accept: Option<&str>,
) -> std::io::Result<(u16, String, String)> {
    let mut s = tokio::net::TcpStream::connect(addr).await?;
    let mut req = format!("GET {path} HTTP/1.0\r\nHost: {addr}\r\nConnection: close\r\n");
    if let Some(a) = accept {
        req.push_str(&format!("Accept: {a}\r\n"));
    }
    req.push_str("\r\n");
    s.write_all(req.as_bytes()).await?;
    let mut buf = Vec::new();
    s.read_to_end(&mut buf).await?;
    let text = String::from_utf8_lossy(&buf).into_owned();
    let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    let status = head
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    Ok((status, head.to_string(), body.to_string()))
}

struct Watcher {
    addr: SocketAddr,
    last: Option<(u16, Vec<String>)>,
}

impl Watcher {
    /// Print /readyz?verbose when readiness or the set of failing checks changed.
    async fn poll(&mut self) -> Option<u16> {
        let (status, _, body) = http_get(self.addr, "/readyz?verbose", None).await.ok()?;
        let key: Vec<String> = body
            .lines()
            .filter(|l| l.starts_with("[-]") || l.contains("(warning"))
            .map(|l| l.split(':').next().unwrap_or(l).to_string())
            .collect();
        if self.last.as_ref() != Some(&(status, key.clone())) {
            let state = if status == 200 { "READY" } else { "NOT READY" };
            println!("  /readyz -> {status} {state}");
            for l in body.lines() {
                println!("    {l}");
            }
            self.last = Some((status, key));
        }
        Some(status)
    }

    /// Poll until `want` (200 or 503) or the deadline.
    async fn until(&mut self, want: u16, deadline: Duration) -> bool {
        let end = Instant::now() + deadline;
        while Instant::now() < end {
            if self.poll().await == Some(want) {
                return true;
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        false
    }
}

async fn tour(cluster: &mut Cluster, listen: &str) -> anyhow::Result<()> {
    let mut args = ServeArgs::for_endpoint(&cluster.endpoint(0));
    args.web_listen_address = listen.to_string();
    let config = ServeConfig::from_args(&args)?;
    let running = crate::serve::start(config).await?;
    let mut w = Watcher {
        addr: running.addr,
        last: None,
    };
    println!(
        "etcd cluster: {}",
        (0..3)
            .map(|i| cluster.endpoint(i))
            .collect::<Vec<_>>()
            .join(" ")
    );
    println!("exporter on member m1: {}/readyz?verbose\n", running.url());

    println!("== 1. healthy cluster: waiting for m1 to be ready");
    if !w.until(200, Duration::from_secs(30)).await {
        bail!(
            "m1 did not become ready within 30s; see the logs in {}",
            cluster.dir.display()
        );
    }

    // All three members must be up and agree on a leader before one is
    // killed, or the "leader killed" step would really be a quorum loss.
    let end = std::time::Instant::now() + Duration::from_secs(30);
    while cluster.members_agreeing_on_leader().await < 3 {
        if std::time::Instant::now() > end {
            bail!(
                "the three members did not agree on a leader within 30s:\n{}",
                cluster.log_tails()
            );
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }

    println!("\n== 2. leader killed");
    let mut leader = cluster.leader().await.context("no leader found")?;
    if leader == 0 {
        // Keep the observed member alive: hand leadership to m2 first.
        let target = cluster.member_id(1).await?;
        let mut c = etcd_client::Client::connect([cluster.endpoint(0)], None).await?;
        tokio::time::timeout(Duration::from_secs(5), c.move_leader(target)).await??;
        println!("   (m1 was leader; moved leadership to m2 first)");
        leader = 1;
    }
    println!("   killing leader {}", cluster.members[leader].name);
    cluster.kill(leader);
    // The survivors elect a new leader within an election timeout or two.
    w.until(503, Duration::from_secs(3)).await;
    if !w.until(200, Duration::from_secs(20)).await {
        bail!(
            "m1 did not become ready again after the leader was killed:\n{}",
            cluster.log_tails()
        );
    }

    println!("\n== 3. quorum lost");
    let other = (1..3).find(|i| *i != leader).unwrap_or(2);
    println!(
        "   killing {} too: 1 of 3 members left",
        cluster.members[other].name
    );
    cluster.kill(other);
    if !w.until(503, Duration::from_secs(20)).await {
        bail!("m1 stayed ready without quorum");
    }

    println!("\n== 4. restored");
    println!(
        "   restarting {} and {}",
        cluster.members[leader].name, cluster.members[other].name
    );
    cluster.spawn(leader)?;
    cluster.spawn(other)?;
    if !w.until(200, Duration::from_secs(30)).await {
        bail!("m1 did not become ready after the members came back");
    }

    let u = running.url();
    println!("\nThe cluster and the exporter keep running. Try:");
    println!("  curl '{u}/readyz?verbose'");
    println!("  curl '{u}/readyz?format=json'");
    println!("  curl '{u}/readyz/linearizable_read'");
    println!("  curl '{u}/livez?verbose'");
    println!("  curl '{u}/metrics'");
    println!("  curl '{u}/signals'");
    println!(
        "etcd members: {}",
        (0..3)
            .map(|i| cluster.endpoint(i))
            .collect::<Vec<_>>()
            .join(" ")
    );
    println!("Ctrl-C stops everything.");
    loop {
        tokio::time::sleep(Duration::from_secs(1)).await;
        w.poll().await;
    }
}

/// The `demo` subcommand.
pub fn run(args: DemoArgs) -> ExitCode {
    let Some(etcd) = find_in_path("etcd") else {
        println!("apt-get install etcd-server");
        return ExitCode::FAILURE;
    };
    let rt = match crate::serve::runtime() {
        Ok(rt) => rt,
        Err(code) => return code,
    };
    rt.block_on(async move {
        let mut cluster = match Cluster::start(etcd, 3) {
            Ok(c) => c,
            Err(e) => {
                eprintln!("error: {e:#}");
                return ExitCode::FAILURE;
            }
        };
        let code = tokio::select! {
            r = tour(&mut cluster, &args.listen) => match r {
                Ok(()) => ExitCode::SUCCESS,
                Err(e) => {
                    eprintln!("error: {e:#}");
                    ExitCode::FAILURE
                }
            },
            _ = crate::serve::shutdown_signal() => {
                println!("\nstopping: killing every etcd member");
                ExitCode::SUCCESS
            }
        };
        drop(cluster);
        code
    })
}
