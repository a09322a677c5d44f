//! `demo`: a guided tour on a real, local 3-member etcd cluster. It starts the
//! members from the `etcd` binary on free 127.0.0.1 ports with temporary data
//! directories, runs the exporter in-process against member 1 with the
//! default policy, and walks through: healthy → leader killed → quorum lost →
//! restored, printing `/readyz?verbose` whenever readiness changes. The
//! leader's kill says what happened even where readiness did not change:
//! whether m1 stayed ready, the new leader, and how long the election took
//! as m1's own Status reports the leader. Every child is killed on
//! Ctrl-C/SIGTERM, on error and on panic (Drop guards).

use std::net::SocketAddr;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use clap::Args;

use crate::cmd::localcluster::{LocalCluster, find_in_path};
use crate::config::{ServeArgs, ServeConfig};
use crate::outside::http_client;
use crate::runtime::clock::Clock;

/// Flags of `demo`.
#[derive(Args, Clone, Debug)]
pub struct DemoArgs {
    /// Address for the exporter's HTTP server.
    #[arg(long = "web.listen-address", default_value = "127.0.0.1:9379")]
    pub listen: String,
    /// Seconds each phase is held after its verdict, so that it can be read
    /// (changes meanwhile are printed too).
    #[arg(long = "hold", default_value_t = 5, value_parser = clap::value_parser!(u64).range(0..=600))]
    pub hold: u64,
}

/// How long one look at `/readyz?verbose` may take: the exporter answers
/// from its last verdict at once, so a slower answer counts as none.
const ANSWER_WITHIN: Duration = Duration::from_secs(5);

struct Watcher {
    addr: SocketAddr,
    last: Option<(u16, Vec<String>)>,
    /// The runtime's clock: the demo's deadlines and the election's time.
    clock: Clock,
}

impl Watcher {
    /// Print /readyz?verbose when readiness or the set of failing checks changed.
    async fn poll(&mut self) -> Option<u16> {
        let answer = http_client::get_at(self.addr, "/readyz?verbose", None, ANSWER_WITHIN)
            .await
            .ok()?;
        let (status, body) = (answer.status.as_u16(), answer.body);
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

    /// Keep polling (and printing changes) for `d`.
    async fn hold(&mut self, d: Duration) {
        let end = self.clock.now() + d;
        while self.clock.now() < end {
            self.poll().await;
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    /// Poll until `want` (200 or 503) or the deadline.
    async fn until(&mut self, want: u16, deadline: Duration) -> bool {
        let end = self.clock.now() + deadline;
        while self.clock.now() < end {
            if self.poll().await == Some(want) {
                return true;
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        false
    }
}

async fn tour(cluster: &mut LocalCluster, listen: &str, hold: Duration) -> anyhow::Result<()> {
    let mut args = ServeArgs::for_endpoint(&cluster.endpoint(0));
    args.web_listen_address = listen.to_string();
    let config = ServeConfig::from_args(&args)?;
    let running = crate::cmd::serve::start(config).await?;
    let mut w = Watcher {
        addr: running.addr,
        last: None,
        clock: Clock::node(),
    };
    println!("etcd cluster: {}", endpoints(cluster));
    println!("exporter on member m1: {}/readyz?verbose\n", running.url());

    println!("== 1. healthy cluster: waiting for m1 to be ready");
    if !w.until(200, Duration::from_secs(30)).await {
        bail!(
            "m1 did not become ready within 30s; see the logs in {}",
            cluster.dir.display()
        );
    }
    w.hold(hold).await;

    let leader = kill_the_leader(cluster, &mut w).await?;
    w.hold(hold).await;

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
    w.hold(hold).await;

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
    println!("etcd members: {}", endpoints(cluster));
    println!("Ctrl-C stops everything.");
    loop {
        tokio::time::sleep(Duration::from_secs(1)).await;
        w.poll().await;
    }
}

fn endpoints(cluster: &LocalCluster) -> String {
    (0..3)
        .map(|i| cluster.endpoint(i))
        .collect::<Vec<_>>()
        .join(" ")
}

/// Step 2: kill the leader (never m1, the member the exporter watches: its
/// leadership is handed to m2 first) and wait for m1 to be ready again under
/// the new leader. The index of the killed member.
async fn kill_the_leader(cluster: &mut LocalCluster, w: &mut Watcher) -> anyhow::Result<usize> {
    // All three members must be up and agree on a leader before one is
    // killed, or the "leader killed" step would really be a quorum loss.
    let end = w.clock.now() + Duration::from_secs(30);
    while cluster.members_agreeing_on_leader().await < 3 {
        if w.clock.now() > end {
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
    let ids = member_ids(cluster).await?;
    let mut m1 = cluster.client(0).await?;
    let term = m1.status().await?.raft_term();
    println!("   killing leader {}", cluster.members[leader].name);
    cluster.kill(leader);
    let killed = w.clock.now();
    // The survivors elect a new leader within an election timeout or two.
    let election = watch_the_election(&mut m1, w, ids[leader], Duration::from_secs(20)).await;
    let Some((new_leader, new_term, took)) = election.elected else {
        bail!(
            "m1 reported no new leader within 20s of the kill:\n{}",
            cluster.log_tails()
        );
    };
    let took = took.saturating_duration_since(killed);
    let name = ids.iter().position(|id| *id == new_leader).map_or_else(
        || format!("{new_leader:x}"),
        |i| cluster.members[i].name.clone(),
    );
    println!(
        "   new leader: {name} (raft term {term} -> {new_term}), elected {} after the kill, as m1's Status reports it",
        etcd_readiness_policy::text::fmt_duration(took.as_secs_f64())
    );
    if election.stayed_ready {
        println!(
            "   m1 stayed ready through the election: {} answers of /readyz meanwhile, all 200",
            election.answers
        );
    }
    if !w.until(200, Duration::from_secs(20)).await {
        bail!(
            "m1 did not become ready again after the leader was killed:\n{}",
            cluster.log_tails()
        );
    }
    if !election.stayed_ready {
        println!("   m1 is ready again under the new leader");
    }
    Ok(leader)
}

/// The id of every member, in order, as its Status reports it.
async fn member_ids(cluster: &LocalCluster) -> anyhow::Result<Vec<u64>> {
    let mut ids = Vec::new();
    for i in 0..cluster.members.len() {
        ids.push(cluster.member_id(i).await?);
    }
    Ok(ids)
}

/// What m1 reported while its cluster elected a new leader.
struct Election {
    /// The new leader's id, the raft term it leads and when m1's Status
    /// first named it; `None` when it did not within the deadline.
    elected: Option<(u64, u64, Instant)>,
    /// Every `/readyz` answer meanwhile was 200.
    stayed_ready: bool,
    /// `/readyz` answers meanwhile.
    answers: u32,
}

/// Ask m1's Status for its leader, and `/readyz` for its readiness (the
/// watcher prints a change), every [`ELECTION_STEP`] until Status names a
/// leader other than `killed` and `/readyz` answers, or `within` passes.
async fn watch_the_election(
    m1: &mut etcd_client::Client,
    w: &mut Watcher,
    killed: u64,
    within: Duration,
) -> Election {
    let end = w.clock.now() + within;
    let mut out = Election {
        elected: None,
        stayed_ready: true,
        answers: 0,
    };
    while w.clock.now() < end {
        if out.elected.is_none() {
            let status = tokio::time::timeout(ELECTION_STEP * 5, m1.status()).await;
            if let Ok(Ok(s)) = status
                && s.leader() != 0
                && s.leader() != killed
            {
                out.elected = Some((s.leader(), s.raft_term(), w.clock.now()));
            }
        }
        let ready = w.poll().await;
        out.answers += u32::from(ready.is_some());
        out.stayed_ready &= ready == Some(200);
        if out.elected.is_some() && ready.is_some() {
            break;
        }
        tokio::time::sleep(ELECTION_STEP).await;
    }
    out
}

/// How often the election is looked at: what the time it took is measured
/// to.
const ELECTION_STEP: Duration = Duration::from_millis(20);

/// The `demo` subcommand.
pub fn run(args: DemoArgs) -> ExitCode {
    let wanted = crate::cmd::localcluster::default_etcd();
    let etcd = if wanted.components().count() > 1 {
        Some(wanted)
    } else {
        find_in_path(&wanted.to_string_lossy())
    };
    let Some(etcd) = etcd else {
        println!("apt-get install etcd-server");
        return ExitCode::FAILURE;
    };
    let rt = match crate::cmd::serve::runtime() {
        Ok(rt) => rt,
        Err(code) => return code,
    };
    rt.block_on(async move {
        let mut cluster = match LocalCluster::builder(3).etcd(etcd).start() {
            Ok(c) => c,
            Err(e) => {
                eprintln!("error: {e:#}");
                return ExitCode::FAILURE;
            }
        };
        let code = tokio::select! {
            r = tour(&mut cluster, &args.listen, Duration::from_secs(args.hold)) => match r {
                Ok(()) => ExitCode::SUCCESS,
                Err(e) => {
                    eprintln!("error: {e:#}");
                    ExitCode::FAILURE
                }
            },
            _ = crate::cmd::serve::shutdown_signal() => {
                println!("\nstopping: killing every etcd member");
                ExitCode::SUCCESS
            }
        };
        drop(cluster);
        code
    })
}
