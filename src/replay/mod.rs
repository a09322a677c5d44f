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

pub mod prometheus;
pub mod render;
pub mod time;
pub mod timeline;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use clap::{Args, ValueEnum};

use crate::policy::Policy;
use crate::signals::Catalogue;
use prometheus::{Prometheus, Series, selector_query};
use render::Header;
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
    Svg,
}

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
    pub prometheus_url: crate::redacted_url::RedactedUrl,
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
            crate::text::fmt_duration((end - now_ms) as f64 / 1000.0)
        )));
    }
    let step = time::parse_step(&args.step)?;
    let grid = Grid::new(start, end, step)?;
    let timeout = crate::duration::parse(&args.prometheus_timeout, Duration::from_secs(600))
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
    prometheus::check_selector(&args.selector).map_err(ReplayError::Flag)?;
    Ok(Plan { grid, timeout })
}

/// The labels that identify a member: a series' labels without the metric
/// name and the per-signal labels.
fn member_key(labels: &BTreeMap<String, String>) -> BTreeMap<String, String> {
    labels
        .iter()
        .filter(|(k, _)| !prometheus::PER_SIGNAL_LABELS.contains(&k.as_str()))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect()
}

/// Turn the three queries' series into per-member histories on `grid`.
/// Points off the grid are ignored.
pub fn assemble(
    grid: &Grid,
    ready: Vec<Series>,
    values: Vec<Series>,
    known: Vec<Series>,
) -> Vec<MemberHistory> {
    let mut out: BTreeMap<BTreeMap<String, String>, MemberHistory> = BTreeMap::new();
    let mut entry = |labels: &BTreeMap<String, String>| -> BTreeMap<String, String> {
        let key = member_key(labels);
        out.entry(key.clone())
            .or_insert_with(|| MemberHistory::new(key.clone(), grid.steps));
        key
    };
    let mut keyed_ready = Vec::new();
    for s in ready {
        keyed_ready.push((entry(&s.labels), s));
    }
    let mut keyed_values = Vec::new();
    for s in values {
        keyed_values.push((entry(&s.labels), s));
    }
    let mut keyed_known = Vec::new();
    for s in known {
        keyed_known.push((entry(&s.labels), s));
    }
    for (key, s) in keyed_ready {
        let m = out.get_mut(&key).expect("entered above");
        for (t, v) in s.points {
            if let Some(i) = grid.index_of(t) {
                m.recorded[i] = v.is_finite().then_some(v != 0.0);
            }
        }
    }
    for (is_known, list) in [(false, keyed_values), (true, keyed_known)] {
        for (key, s) in list {
            let Some(signal) = s.labels.get("signal") else {
                continue;
            };
            let m = out.get_mut(&key).expect("entered above");
            let h = m
                .signals
                .entry(signal.clone())
                .or_insert_with(|| SignalHistory::new(grid.steps));
            for (t, v) in s.points {
                if let Some(i) = grid.index_of(t) {
                    if is_known {
                        h.known[i] = Some(v != 0.0);
                    } else {
                        h.value[i] = Some(v);
                    }
                }
            }
        }
    }
    out.into_values().collect()
}

/// Everything `replay` computes, before it is rendered.
pub struct Outcome {
    pub policy: Arc<Policy>,
    pub grid: Grid,
    pub members: Vec<MemberReport>,
}

impl Outcome {
    pub fn header(&self) -> Header<'_> {
        Header {
            policy_path: self.policy.path(),
            policy_sha256: self.policy.sha256(),
            check_names: self
                .policy
                .checks()
                .iter()
                .map(|c| (c.name.clone(), c.kind))
                .collect(),
            grid: self.grid,
            missing_signals: timeline::missing_everywhere(&self.members),
        }
    }

    pub fn differs(&self) -> bool {
        self.members
            .iter()
            .any(|m| !m.differs_from_recorded.is_empty())
    }

    pub fn render(&self, format: Format) -> String {
        let h = self.header();
        match format {
            Format::Text => render::text(&h, &self.members),
            Format::Json => render::json(&h, &self.members),
            Format::Svg => render::svg(&h, &self.members),
        }
    }
}

/// Load the policy, query Prometheus and replay: everything but printing.
pub fn compute(args: &ReplayArgs, now: SystemTime) -> Result<Outcome, ReplayError> {
    let now_ms = i64::try_from(
        now.duration_since(SystemTime::UNIX_EPOCH)
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
    let names: Vec<String> = policy
        .signals_used()
        .into_iter()
        .map(|id| policy.signal_name(id).to_string())
        .collect();
    let grid = plan.grid;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| ReplayError::Flag(format!("cannot start the runtime: {e}")))?;
    let (ready, values, known) = runtime.block_on(async {
        let q = selector_query("etcd_readiness_ready", &args.selector, &[]);
        let ready = prom.query_range(&q, &grid).await?;
        if names.is_empty() {
            return Ok::<_, ReplayError>((ready, Vec::new(), Vec::new()));
        }
        // Signal names are identifiers (checked by the catalogue), safe in a regex.
        let only = vec![format!("signal=~\"{}\"", names.join("|"))];
        let q = selector_query("etcd_readiness_signal_value", &args.selector, &only);
        let values = prom.query_range(&q, &grid).await?;
        let q = selector_query("etcd_readiness_signal_known", &args.selector, &only);
        let known = prom.query_range(&q, &grid).await?;
        Ok((ready, values, known))
    })?;
    if ready.is_empty() && values.is_empty() && known.is_empty() {
        return Err(ReplayError::NoSeries {
            selector: args.selector.clone(),
            start: time::rfc3339(grid.start_ms),
            end: time::rfc3339(grid.end_ms),
        });
    }
    let histories = assemble(&grid, ready, values, known);
    let members = timeline::replay(
        &policy,
        &catalogue,
        &grid,
        &histories,
        std::time::Instant::now(),
    )?;
    Ok(Outcome {
        policy,
        grid,
        members,
    })
}

/// `replay`: returns the process exit code.
pub fn run(args: ReplayArgs) -> ExitCode {
    let outcome = match compute(&args, SystemTime::now()) {
        Ok(o) => o,
        Err(ReplayError::Policy(d)) => {
            eprint!("{d}");
            if !d.ends_with('\n') {
                eprintln!();
            }
            eprintln!(
                "error: the candidate policy {} is invalid",
                args.policy.display()
            );
            return ExitCode::FAILURE;
        }
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::FAILURE;
        }
    };
    let header = outcome.header();
    if !header.missing_signals.is_empty() {
        eprintln!(
            "warning: the policy reads signals Prometheus holds no series of for the selected \
             members (unknown throughout the replay): {}",
            header.missing_signals.join(", ")
        );
    }
    let text = outcome.render(args.format);
    let written = match &args.output {
        Some(path) => std::fs::write(path, &text).map_err(|source| ReplayError::Output {
            path: path.clone(),
            source,
        }),
        None => {
            use std::io::Write;
            let mut out = std::io::stdout().lock();
            out.write_all(text.as_bytes())
                .and_then(|()| out.flush())
                .map_err(|source| ReplayError::Output {
                    path: PathBuf::from("standard output"),
                    source,
                })
        }
    };
    if let Err(e) = written {
        eprintln!("error: {e}");
        return ExitCode::FAILURE;
    }
    if args.fail_on_difference && outcome.differs() {
        eprintln!(
            "the candidate differs from the recorded verdict (--fail-on-difference): exit {EXIT_DIFFERENCE}"
        );
        return ExitCode::from(EXIT_DIFFERENCE);
    }
    ExitCode::SUCCESS
}
