//! `replay`: what would a candidate policy have done to my members? Reads
//! the exported signal history (`etcd_readiness_signal_value`,
//! `etcd_readiness_signal_known`) and the recorded verdict
//! (`etcd_readiness_ready`) of the selected members from Prometheus'
//! `query_range` ([`prometheus`]), rebuilds each member's readings at every
//! step and evaluates the candidate with the same evaluator as `serve`
//! ([`timeline`], pure), and prints the result as text, JSON or SVG
//! ([`render`]). Flags become times and steps in [`time`]. See docs/replay.md.
//!
//! Exit codes: 0 when it ran, 1 on any error (with one clear message), 3
//! with `--fail-on-difference` when the candidate differs from the recorded
//! verdict anywhere.

mod envelope;
pub mod fleet;
pub mod limits;
pub mod matrix;
pub mod prometheus;
pub mod promql;
pub mod render;
pub mod summary;
pub mod svg;
pub mod time;
pub mod timeline;
pub mod values;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use clap::{Args, ValueEnum};

use crate::runtime::clock::Clock;

use etcd_readiness_policy::signals::Catalogue;
use prometheus::{Prometheus, Series};
use render::Header;
use summary::Summary;
use timeline::{Grid, MemberHistory, MemberReport, SignalHistory};

/// The exit code of a replay whose candidate differs from the recorded verdict
/// under `--fail-on-difference`.
pub const EXIT_DIFFERENCE: u8 = 3;

/// Default of `--prometheus.max-bytes`: a day at 15 s of 25 signals for 10
/// members is about 60 MB of JSON.
pub const DEFAULT_MAX_BYTES: u64 = 256 * 1024 * 1024;

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Format {
    Text,
    Json,
    /// One JSON object a line: each member, then `{"fleet": …}`.
    Jsonl,
    Svg,
}

/// `--format svg` draws at most this many members (it holds them all).
pub const MAX_SVG_MEMBERS: usize = 100;

/// Flags of `replay`.
#[derive(Args, Clone, Debug)]
pub struct ReplayArgs {
    /// Prometheus server holding the exporter's metrics (http or https URL).
    #[arg(
        long = "prometheus.url",
        env = "ERE_PROMETHEUS_URL",
        hide_env_values = true,
        value_name = "URL"
    )]
    pub prometheus_url: crate::outside::redacted_url::RedactedUrl,
    /// The candidate policy file.
    #[arg(long = "policy", value_name = "FILE")]
    pub policy: PathBuf,
    /// Also know the signals of the scrape sources in this config file.
    #[arg(long, value_name = "FILE", env = "ERE_CONFIG")]
    pub config: Option<PathBuf>,
    /// Label matchers choosing the members, e.g. '{namespace="prod",pod=~"etcd-.*"}'.
    #[arg(long, default_value = "{}", value_name = "MATCHERS")]
    pub selector: String,
    /// Start: RFC 3339, Unix seconds, `now`, or a duration before now (-24h, now-90m).
    #[arg(long, allow_hyphen_values = true, value_name = "T")]
    pub start: String,
    /// End, in the same forms as --start.
    #[arg(
        long,
        default_value = "now",
        allow_hyphen_values = true,
        value_name = "T"
    )]
    pub end: String,
    /// Time between evaluations (and Prometheus' query step).
    #[arg(long, default_value = "15s", value_name = "DURATION")]
    pub step: String,
    /// Output format.
    #[arg(long, value_enum, default_value = "text")]
    pub format: Format,
    /// Write the output to this file instead of standard output.
    #[arg(long, value_name = "FILE")]
    pub output: Option<PathBuf>,
    /// Exit 3 when the candidate's verdict differs from the recorded one anywhere.
    #[arg(long)]
    pub fail_on_difference: bool,
    /// Deadline of each request to Prometheus.
    #[arg(
        long = "prometheus.timeout",
        default_value = "60s",
        value_name = "DURATION"
    )]
    pub prometheus_timeout: String,
    /// Largest answer accepted from Prometheus, per request, in bytes.
    #[arg(long = "prometheus.max-bytes", default_value_t = DEFAULT_MAX_BYTES, value_name = "BYTES")]
    pub prometheus_max_bytes: u64,
    /// Members read and evaluated together (default: as many as keep an
    /// answer near 2 MiB, at most 500).
    #[arg(long, value_name = "N")]
    pub batch: Option<usize>,
    /// Batches in flight at once (each one request at a time).
    #[arg(long, default_value_t = 4, value_name = "N")]
    pub concurrency: usize,
    /// Also rank clusters by this label of the members (e.g. namespace),
    /// besides etcd's cluster_id.
    #[arg(long = "cluster-label", value_name = "LABEL")]
    pub cluster_label: Option<String>,
}

/// Why a replay could not run.
#[derive(Debug, thiserror::Error)]
pub enum ReplayError {
    #[error(transparent)]
    Time(#[from] time::TimeError),
    #[error(transparent)]
    Grid(#[from] timeline::GridError),
    #[error(transparent)]
    Simulation(#[from] etcd_readiness_policy::simulation::OutOfRange),
    #[error("{0}")]
    Flag(String),
    #[error("{0}")]
    Config(String),
    /// The policy's own diagnostics, already rendered.
    #[error("{0}")]
    Policy(String),
    #[error(transparent)]
    Prometheus(#[from] prometheus::PromError),
    #[error(transparent)]
    Selector(#[from] prometheus::SelectorError),
    #[error(
        "Prometheus holds no etcd_readiness_ready or etcd_readiness_signal_* series matching \
         {selector} between {start} and {end}: check --selector, the time range, and that \
         Prometheus scrapes the exporter"
    )]
    NoSeries {
        selector: String,
        start: String,
        end: String,
    },
    #[error(
        "--format svg draws at most {MAX_SVG_MEMBERS} members and the selector matches {0}: \
         narrow --selector, or use --format text, json or jsonl"
    )]
    SvgTooMany(usize),
    #[error("a replay batch failed: {0}")]
    Batch(String),
    #[error("cannot write {path}: {source}")]
    Output {
        path: PathBuf,
        source: std::io::Error,
    },
}

/// The validated flags.
struct Plan {
    grid: Grid,
    timeout: Duration,
}

fn plan(args: &ReplayArgs, now_ms: i64) -> Result<Plan, ReplayError> {
    let start = time::parse_time("--start", &args.start, now_ms)?;
    let end = time::parse_time("--end", &args.end, now_ms)?;
    if end > now_ms + 300_000 {
        return Err(ReplayError::Flag(format!(
            "--end `{}` is {} in the future: Prometheus holds no history there",
            args.end,
            etcd_readiness_policy::text::fmt_duration((end - now_ms) as f64 / 1000.0)
        )));
    }
    let step = time::parse_step(&args.step)?;
    let grid = Grid::new(start, end, step)?;
    let timeout =
        etcd_readiness_policy::duration::parse(&args.prometheus_timeout, Duration::from_secs(600))
            .map_err(|e| ReplayError::Flag(format!("--prometheus.timeout: {e}")))?;
    if timeout < Duration::from_millis(100) {
        return Err(ReplayError::Flag(
            "--prometheus.timeout must be at least 100ms".to_string(),
        ));
    }
    if !(1024..=(4u64 << 30)).contains(&args.prometheus_max_bytes) {
        return Err(ReplayError::Flag(format!(
            "--prometheus.max-bytes {} is out of range: 1024 to 4294967296",
            args.prometheus_max_bytes
        )));
    }
    prometheus::check_selector(&args.selector)?;
    if args
        .batch
        .is_some_and(|b| !(1..=fleet::MAX_BATCH).contains(&b))
    {
        return Err(ReplayError::Flag(format!(
            "--batch must be 1 to {}",
            fleet::MAX_BATCH
        )));
    }
    if !(1..=64).contains(&args.concurrency) {
        return Err(ReplayError::Flag(
            "--concurrency must be 1 to 64".to_string(),
        ));
    }
    if let Some(l) = &args.cluster_label {
        let ok = l
            .chars()
            .next()
            .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
            && l.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
        if !ok {
            return Err(ReplayError::Flag(format!(
                "--cluster-label `{l}` is not a label name"
            )));
        }
    }
    Ok(Plan { grid, timeout })
}

/// The labels that identify a member: a series' labels without the metric
/// name and the per-signal labels.
fn member_key(labels: &BTreeMap<String, String>) -> BTreeMap<String, String> {
    fleet::without(labels, &prometheus::PER_SIGNAL_LABELS)
}

/// Turn the three queries' series into per-member histories on `grid`
/// (the rows are on it already). A value row becomes its signal's values
/// as it is; a second series of the same signal and member fills in over
/// the first where it has points.
pub fn assemble(
    grid: &Grid,
    ready: Vec<Series>,
    values: Vec<Series>,
    known: Vec<Series>,
) -> Vec<MemberHistory> {
    let mut out: BTreeMap<BTreeMap<String, String>, MemberHistory> = BTreeMap::new();
    let mut keyed = |list: Vec<Series>| -> Vec<(BTreeMap<String, String>, Series)> {
        (list.into_iter())
            .map(|s| {
                let key = member_key(&s.labels);
                if !out.contains_key(&key) {
                    out.insert(key.clone(), MemberHistory::new(key.clone(), grid.steps));
                }
                (key, s)
            })
            .collect()
    };
    let (ready, values, known) = (keyed(ready), keyed(values), keyed(known));
    for (key, s) in ready {
        let Some(m) = out.get_mut(&key) else { continue };
        for (at, v) in m.recorded.iter_mut().zip(s.row) {
            if let Some(v) = v {
                *at = v.is_finite().then_some(v != 0.0);
            }
        }
    }
    for (is_known, list) in [(false, values), (true, known)] {
        for (key, s) in list {
            let (Some(signal), Some(m)) = (s.labels.get("signal"), out.get_mut(&key)) else {
                continue;
            };
            let h = match m.signals.entry(signal.clone()) {
                std::collections::btree_map::Entry::Vacant(e) if !is_known => {
                    e.insert(SignalHistory {
                        value: s.row,
                        known: vec![None; grid.steps],
                    });
                    continue;
                }
                std::collections::btree_map::Entry::Vacant(e) => {
                    e.insert(SignalHistory::new(grid.steps))
                }
                std::collections::btree_map::Entry::Occupied(e) => e.into_mut(),
            };
            if is_known {
                for (at, v) in h.known.iter_mut().zip(s.row) {
                    if let Some(v) = v {
                        *at = Some(v != 0.0);
                    }
                }
            } else {
                for (at, v) in h.value.iter_mut().zip(s.row) {
                    if v.is_some() {
                        *at = v;
                    }
                }
            }
        }
    }
    out.into_values().collect()
}

/// Where the output goes, in its format, written member by member.
struct Sink<'h> {
    out: Box<dyn std::io::Write>,
    path: PathBuf,
    format: Format,
    header: Header<'h>,
    json: Option<render::JsonStream>,
    /// `--format svg` draws them all at the end.
    svg: Vec<MemberReport>,
    /// The members found: a fleet summary follows when more than one.
    found: usize,
}

impl<'h> Sink<'h> {
    fn open(args: &ReplayArgs, header: Header<'h>, found: usize) -> Result<Self, ReplayError> {
        let (out, path): (Box<dyn std::io::Write>, PathBuf) = match &args.output {
            Some(path) => {
                let f = std::fs::File::create(path).map_err(|source| ReplayError::Output {
                    path: path.clone(),
                    source,
                })?;
                (Box::new(std::io::BufWriter::new(f)), path.clone())
            }
            None => (
                Box::new(std::io::BufWriter::new(std::io::stdout())),
                PathBuf::from("standard output"),
            ),
        };
        let json = (args.format == Format::Json).then(|| render::JsonStream::new(&header));
        Ok(Sink {
            out,
            path,
            format: args.format,
            header,
            json,
            svg: Vec::new(),
            found,
        })
    }

    fn write(&mut self, text: &str) -> Result<(), ReplayError> {
        self.out
            .write_all(text.as_bytes())
            .map_err(|source| ReplayError::Output {
                path: self.path.clone(),
                source,
            })
    }

    fn start(&mut self) -> Result<(), ReplayError> {
        let head = match (&self.json, self.format) {
            (Some(j), _) => j.head().to_string(),
            (None, Format::Text) => render::text_head(&self.header, self.found),
            _ => return Ok(()),
        };
        self.write(&head)
    }

    fn member(&mut self, m: MemberReport) -> Result<(), ReplayError> {
        let text = match (&mut self.json, self.format) {
            (Some(j), _) => j.member(&m),
            (None, Format::Text) => {
                let mut s = String::new();
                render::member_text(&mut s, &self.header, &m);
                s
            }
            (None, Format::Jsonl) => render::member_line(&m),
            (None, _) => {
                self.svg.push(m);
                return Ok(());
            }
        };
        self.write(&text)
    }

    fn finish(&mut self, summary: &Summary, without_data: u64) -> Result<(), ReplayError> {
        let fleet = self.found > 1;
        let text = match (&self.json, self.format) {
            (Some(j), _) => {
                let s = summary.json(without_data);
                j.tail(fleet.then_some(&s))
            }
            (None, Format::Text) if fleet => summary.text(without_data),
            (None, Format::Text) => String::new(),
            (None, Format::Jsonl) => render::fleet_line(&summary.json(without_data)),
            (None, _) => svg::svg(&self.header, &self.svg),
        };
        self.write(&text)?;
        self.out.flush().map_err(|source| ReplayError::Output {
            path: self.path.clone(),
            source,
        })
    }
}

/// Load the policy, find the members, read and replay them batch by batch
/// and write each as it comes: everything `replay` does but the exit code.
/// Returns whether the candidate changes any member.
// long because: the one place the flags, the store, the batches and the
// output meet; each step is a call, kept in the order they run.
pub fn replay(args: &ReplayArgs, clock: &Clock) -> Result<bool, ReplayError> {
    let now = clock.read();
    let now_ms = i64::try_from(
        now.wall
            .duration_since(SystemTime::UNIX_EPOCH)
            .unwrap_or_default()
            .as_millis(),
    )
    .unwrap_or(i64::MAX / 2);
    let plan = plan(args, now_ms)?;
    let catalogue: Catalogue =
        crate::sources::config::catalogue_with_config(args.config.as_deref())
            .map_err(|e| ReplayError::Config(format!("{e:#}")))?;
    let policy = crate::reload::load(&args.policy, &catalogue).map_err(|e| match e {
        crate::reload::ReloadError::Invalid(d) => ReplayError::Policy(d.to_string()),
        other => ReplayError::Policy(other.to_string()),
    })?;
    let policy = Arc::new(policy);
    let prom = Prometheus::new(
        &args.prometheus_url,
        plan.timeout,
        args.prometheus_max_bytes,
    )?;
    let grid = plan.grid;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| ReplayError::Flag(format!("cannot start the runtime: {e}")))?;
    let local = tokio::task::LocalSet::new();
    local.block_on(&runtime, async {
        let found = fleet::discover(&prom, &args.selector, &policy, &grid).await?;
        let no_series = || ReplayError::NoSeries {
            selector: args.selector.clone(),
            start: crate::outside::checked::rfc3339(grid.start_ms),
            end: crate::outside::checked::rfc3339(grid.end_ms),
        };
        if found.members.is_empty() {
            return Err(no_series());
        }
        if args.format == Format::Svg && found.members.len() > MAX_SVG_MEMBERS {
            return Err(ReplayError::SvgTooMany(found.members.len()));
        }
        if !found.missing_signals.is_empty() {
            eprintln!(
                "warning: the policy reads signals Prometheus holds no series of for the selected \
                 members (unknown throughout the replay): {}",
                found.missing_signals.join(", ")
            );
        }
        let header = Header {
            policy_path: policy.path(),
            policy_sha256: policy.sha256(),
            check_names: policy
                .checks()
                .iter()
                .map(|c| (c.name.clone(), c.kind))
                .collect(),
            grid,
            missing_signals: found.missing_signals.clone(),
        };
        let mut sink = Sink::open(args, header, found.members.len())?;
        sink.start()?;
        let names = fleet::signal_names(&policy);
        let size = args
            .batch
            .unwrap_or_else(|| fleet::auto_batch(grid.steps, names.len()));
        let reader = Arc::new(fleet::Reader {
            prom,
            policy: policy.clone(),
            catalogue,
            grid,
            selector: args.selector.clone(),
            names,
            origin: now.now,
        });
        let mut summary = Summary::new(args.cluster_label.clone());
        let mut progress = Progress::new(found.members.len());
        let mut without_data = 0;
        fleet::run_batches(reader, &found.members, size, args.concurrency, |out| {
            without_data += out.without_data;
            progress.done(out.reports.len() as u64 + out.without_data);
            for (i, m) in out.reports {
                summary.add(&m, found.clusters[i].as_deref());
                sink.member(m)?;
            }
            Ok(())
        })
        .await?;
        progress.end();
        sink.finish(&summary, without_data)?;
        if summary.members == 0 {
            return Err(no_series());
        }
        Ok(summary.changed > 0)
    })
}

/// Progress on standard error, when it is a terminal.
struct Progress {
    tty: bool,
    done: u64,
    total: usize,
}

impl Progress {
    fn new(total: usize) -> Self {
        use std::io::IsTerminal;
        Progress {
            tty: std::io::stderr().is_terminal(),
            done: 0,
            total,
        }
    }

    fn done(&mut self, n: u64) {
        self.done += n;
        if self.tty {
            eprint!("\rreplay: {} of {} members", self.done, self.total);
        }
    }

    fn end(&self) {
        if self.tty {
            eprintln!();
        }
    }
}

/// `replay`, with the time from `clock`: returns the process exit code.
pub fn run(args: ReplayArgs, clock: &Clock) -> ExitCode {
    match replay(&args, clock) {
        Ok(true) if args.fail_on_difference => {
            eprintln!(
                "the candidate differs from the recorded verdict (--fail-on-difference): exit {EXIT_DIFFERENCE}"
            );
            ExitCode::from(EXIT_DIFFERENCE)
        }
        Ok(_) => ExitCode::SUCCESS,
        Err(ReplayError::Policy(d)) => {
            eprint!("{d}");
            if !d.ends_with('\n') {
                eprintln!();
            }
            eprintln!(
                "error: the candidate policy {} is invalid",
                args.policy.display()
            );
            ExitCode::FAILURE
        }
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}
