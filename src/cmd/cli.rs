//! Command-line interface: flag parsing and dispatch to the library. Each
//! subcommand's logic lives in its own module; this file only wires them.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::{CommandFactory, Parser, Subcommand};

use crate::runtime::clock::Clock;
use etcd_readiness_policy::policy::Policy;
use etcd_readiness_policy::signals::{Catalogue, Source};

#[derive(Parser, Debug)]
#[command(
    name = "etcd-readiness-exporter",
    version,
    long_version = crate::metrics::build_info::long_version(),
    about = "Decides when an etcd member is ready to serve, explains why, and exports it to Prometheus.",
    args_conflicts_with_subcommands = true
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Option<Command>,
    /// Flags of `serve`, the default when no subcommand is given.
    #[command(flatten)]
    pub serve: crate::config::ServeArgs,
}

#[derive(Subcommand, Debug)]
pub enum Command {
    /// Validate policy files (exit 1 with diagnostics if any is invalid).
    ///
    /// By default every built-in source is assumed configured, and `check`
    /// says which ones each policy uses and the `serve` flags they need;
    /// `--sources` checks against only those `serve` will run.
    Check {
        #[arg(required = true, value_name = "FILE")]
        files: Vec<PathBuf>,
        /// Also know the signals of the scrape sources in this config file.
        #[arg(long, value_name = "FILE", env = "ERE_CONFIG")]
        config: Option<PathBuf>,
        /// The built-in sources `serve` will run, comma-separated (etcd is
        /// always on): e.g. `--sources etcd,owner` for a `serve` without
        /// `--backup.url`. Default: all of them.
        #[arg(long, value_name = "LIST", value_delimiter = ',', value_parser = ["etcd", "backup", "owner", "etcd_metrics"])]
        sources: Option<Vec<String>>,
    },
    /// Run policy unit tests (YAML files; see docs/policy-language.md).
    Test {
        #[arg(required = true, value_name = "FILE")]
        files: Vec<PathBuf>,
        /// Also know the signals of the scrape sources in this config file.
        #[arg(long, value_name = "FILE", env = "ERE_CONFIG")]
        config: Option<PathBuf>,
    },
    /// Print the catalogue of signals a policy can use.
    Signals {
        /// Also list the signals of the scrape sources in this config file.
        #[arg(long, value_name = "FILE", env = "ERE_CONFIG")]
        config: Option<PathBuf>,
    },
    /// Check rendered Kubernetes manifests of etcd with the exporter (exit 1
    /// naming each problem and its fix).
    ///
    /// Reads the files, or standard input for `-` or none, e.g.
    /// `kubectl kustomize . | etcd-readiness-exporter lint`. Reports a patch
    /// keyed on a container that is not there, duplicate port names, a
    /// quorum-gated probe under OrderedReady, a probe timeout within its
    /// `?wait=`, probe thresholds that hide the verdict, a probe naming the
    /// exporter's port on another container, Pod Security
    /// "restricted" violations, a root-default image under runAsNonRoot,
    /// a PodDisruptionBudget that does not keep a quorum, two budgets over
    /// the same pods, an exporter not given what etcd's TLS, client
    /// certificates or authentication need, a liveness or startup probe that
    /// needs a quorum, and a NetworkPolicy closing a port the pod serves.
    /// An input is at most 16 MiB and 1,024 YAML documents. Exit 0: no
    /// finding; 1: findings; 2: an input unreadable, too large, not YAML, or
    /// without any object.
    Lint {
        #[arg(value_name = "FILE")]
        files: Vec<PathBuf>,
    },
    /// Sample one etcd member, evaluate the policy, serve /readyz and /metrics (the default).
    Serve(Box<crate::config::ServeArgs>),
    /// Start a local 3-member etcd cluster and walk through failures, showing /readyz.
    Demo(crate::cmd::demo::DemoArgs),
    /// Evaluate a candidate policy against the history in Prometheus (see docs/replay.md).
    Replay(Box<crate::replay::ReplayArgs>),
    /// Print a shell completion script, generated from these flags, to stdout
    /// (e.g. `completion bash > /etc/bash_completion.d/etcd-readiness-exporter`).
    #[command(hide = true)]
    Completion {
        #[arg(value_enum)]
        shell: clap_complete::Shell,
    },
    /// Print the man page (roff), generated from these flags, to stdout
    /// (e.g. `man | man -l -`).
    #[command(hide = true)]
    Man,
}

/// The program's name, as completions and the man page call it.
const BIN_NAME: &str = "etcd-readiness-exporter";

/// Run the CLI; returns the process exit code.
pub fn run() -> ExitCode {
    let cli = Cli::parse();
    match cli.command {
        Some(Command::Check {
            files,
            config,
            sources,
        }) => match catalogue_for(config.as_deref()) {
            Ok(mut catalogue) => {
                if let Some(on) = &sources {
                    catalogue.set_source_enabled(&Source::Backup, on.iter().any(|s| s == "backup"));
                    catalogue.set_source_enabled(&Source::Owner, on.iter().any(|s| s == "owner"));
                    catalogue.set_source_enabled(
                        &Source::EtcdMetrics,
                        on.iter().any(|s| s == "etcd_metrics"),
                    );
                }
                check_files(&files, &catalogue)
            }
            Err(code) => code,
        },
        Some(Command::Test { files, config }) => match catalogue_for(config.as_deref()) {
            Ok(catalogue) => test_files(&files, &catalogue),
            Err(code) => code,
        },
        Some(Command::Signals { config }) => match catalogue_for(config.as_deref()) {
            Ok(catalogue) => {
                print!("{}", catalogue.render_table());
                ExitCode::SUCCESS
            }
            Err(code) => code,
        },
        Some(Command::Lint { files }) => lint_files(&files),
        Some(Command::Serve(args)) => crate::cmd::serve::run(*args),
        Some(Command::Demo(args)) => crate::cmd::demo::run(args),
        Some(Command::Replay(args)) => crate::replay::run(*args, &Clock::node()),
        Some(Command::Completion { shell }) => {
            let mut out = std::io::stdout().lock();
            clap_complete::generate(shell, &mut Cli::command(), BIN_NAME, &mut out);
            ExitCode::SUCCESS
        }
        Some(Command::Man) => {
            let mut out = std::io::stdout().lock();
            match clap_mangen::Man::new(Cli::command()).render(&mut out) {
                Ok(()) => ExitCode::SUCCESS,
                Err(e) => {
                    eprintln!("error: cannot write the man page: {e}");
                    ExitCode::FAILURE
                }
            }
        }
        None => crate::cmd::serve::run(cli.serve),
    }
}

/// The built-in catalogue plus the scrape signals of `--config`, or exit code 1.
fn catalogue_for(config: Option<&std::path::Path>) -> Result<Catalogue, ExitCode> {
    crate::sources::config::catalogue_with_config(config).map_err(|e| {
        eprintln!("error: {e:#}");
        ExitCode::FAILURE
    })
}

/// The largest manifest file `lint` reads (a rendered kustomization is
/// kilobytes). Documented with the lint (deploy/kustomize/README.md,
/// "Checking the rendering"), with the YAML reader's 1,024 documents.
const LINT_MAX_BYTES: u64 = 16 << 20;

/// Why an input is refused for its size, with the limit and what to do.
fn lint_too_large() -> String {
    format!(
        "it is larger than lint's limit of {} MiB for one input (a rendered kustomization is kilobytes: lint each rendering on its own)",
        LINT_MAX_BYTES >> 20
    )
}

/// `lint [FILE...|-]`: each input's findings on stdout; exit 1 with any, 2
/// when an input cannot be read.
pub fn lint_files(files: &[PathBuf]) -> ExitCode {
    let stdin = [PathBuf::from("-")];
    let files = if files.is_empty() { &stdin[..] } else { files };
    let (mut findings, mut broken) = (false, false);
    for path in files {
        let (shown, read) = if path.as_os_str() == "-" {
            let mut buf = Vec::new();
            use std::io::Read;
            let r = std::io::stdin()
                .take(LINT_MAX_BYTES + 1)
                .read_to_end(&mut buf)
                .map_err(|e| e.to_string())
                .and_then(|n| match n as u64 > LINT_MAX_BYTES {
                    true => Err(lint_too_large()),
                    false => Ok(buf),
                });
            ("<stdin>".to_string(), r)
        } else {
            use crate::outside::bounded_read::ReadError;
            let r =
                crate::outside::bounded_read::read_bounded(path, LINT_MAX_BYTES).map_err(
                    |e| match e {
                        ReadError::TooLarge { .. } => lint_too_large(),
                        e => e.to_string(),
                    },
                );
            (path.display().to_string(), r)
        };
        let text = match read.map(String::from_utf8) {
            Ok(Ok(t)) => t,
            Ok(Err(_)) => {
                eprintln!("error: {shown} is not UTF-8 text");
                broken = true;
                continue;
            }
            Err(e) => {
                eprintln!("error: cannot read {shown}: {e}");
                broken = true;
                continue;
            }
        };
        match crate::lint::lint(&shown, &text) {
            Err(e) => {
                eprintln!("error: {e}");
                broken = true;
            }
            Ok(r) if r.objects == 0 => {
                eprintln!("error: {shown}: no Kubernetes object (a document with a `kind`)");
                broken = true;
            }
            Ok(r) => {
                findings |= !r.findings.is_empty();
                print!("{}", crate::lint::render(&shown, &r));
            }
        }
    }
    match (broken, findings) {
        (true, _) => ExitCode::from(2),
        (false, true) => ExitCode::FAILURE,
        (false, false) => ExitCode::SUCCESS,
    }
}

/// `check FILE...`: like `promtool check rules`.
pub fn check_files(files: &[PathBuf], catalogue: &Catalogue) -> ExitCode {
    let mut failed = false;
    for path in files {
        let shown = path.display().to_string();
        match read_text(path, MAX_POLICY_READ) {
            Err(e) => {
                failed = true;
                eprintln!("error: cannot read {shown}: {e}");
            }
            Ok(src) => match Policy::compile(&shown, &src, catalogue) {
                Ok(p) => {
                    println!("{shown}: OK: {}", p.summary());
                    println!("  {}", sources_needed(&p, catalogue));
                }
                Err(d) => {
                    failed = true;
                    eprint!("{d}");
                    let n = d.items.len();
                    eprintln!(
                        "{shown}: FAILED: {n} problem{}\n",
                        if n == 1 { "" } else { "s" }
                    );
                }
            },
        }
    }
    if failed {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    }
}

/// Which sources a valid policy reads, and the `serve` flags they need: a
/// policy `check` accepts with every source assumed is refused by a `serve`
/// that does not configure one of them, unless the policy names its signals
/// only on the left of `??` (an optional term, listed as such).
fn sources_needed(p: &Policy, catalogue: &Catalogue) -> String {
    let mut used: Vec<Source> = Vec::new();
    for id in p.signals_used() {
        let src = catalogue.get(id).source.clone();
        if !used.contains(&src) {
            used.push(src);
        }
    }
    let required: Vec<Source> = p
        .signals_required()
        .into_iter()
        .map(|id| catalogue.get(id).source.clone())
        .collect();
    let flags = |want_required: bool| -> Vec<String> {
        used.iter()
            .filter(|s| **s != Source::Etcd && required.contains(s) == want_required)
            .map(|s| format!("{} ({})", s.label(), s.enabled_by()))
            .collect()
    };
    let (needs, optional) = (flags(true), flags(false));
    let names: Vec<String> = used.iter().map(Source::label).collect();
    let mut out = format!("sources: {}", names.join(", "));
    if needs.is_empty() && optional.is_empty() {
        out.push_str(" (always on)");
    }
    if !needs.is_empty() {
        out.push_str(&format!("; serve needs {}", needs.join(", ")));
    }
    if !optional.is_empty() {
        out.push_str(&format!(
            "; optional (loads without, the `??` fallback decides): {}",
            optional.join(", ")
        ));
    }
    out
}

/// Read one test file and the policy it names through the one bounded
/// reader, and run it (the policy crate's `run_text` reads no file itself).
fn run_test_file(
    path: &Path,
    catalogue: &Catalogue,
) -> Result<
    etcd_readiness_policy::policytest::FileOutcome,
    etcd_readiness_policy::policytest::TestFileError,
> {
    use etcd_readiness_policy::policytest::{MAX_TEST_FILE_BYTES, TestFileError};
    let text = read_text(path, MAX_TEST_FILE_BYTES).map_err(|source| TestFileError::Read {
        path: path.display().to_string(),
        source,
    })?;
    // The virtual clock may start at any instant; this one is as good as any.
    let origin = Clock::node().now();
    etcd_readiness_policy::policytest::run_text(path, &text, catalogue, origin, |p| {
        read_text(p, MAX_POLICY_READ)
    })
}

/// One byte over the policy limit is enough for the compiler to report it.
const MAX_POLICY_READ: u64 = etcd_readiness_policy::policy::limits::MAX_POLICY_BYTES as u64 + 1;

/// A text file through the one bounded reader, at most `max` bytes.
fn read_text(p: &Path, max: u64) -> std::io::Result<String> {
    let bytes =
        crate::outside::bounded_read::read_bounded(p, max).map_err(std::io::Error::other)?;
    String::from_utf8(bytes)
        .map_err(|_| std::io::Error::new(std::io::ErrorKind::InvalidData, "it is not UTF-8"))
}

/// `test FILE...`: like `promtool test rules`.
pub fn test_files(files: &[PathBuf], catalogue: &Catalogue) -> ExitCode {
    let mut failed = false;
    for path in files {
        let shown = path.display().to_string();
        match run_test_file(path, catalogue) {
            Err(e) => {
                failed = true;
                eprintln!("{e}");
                eprintln!("{shown}: FAILED: the tests could not run\n");
            }
            Ok(o) if o.failures.is_empty() => {
                println!("{shown}: SUCCESS: {} tests passed", o.cases)
            }
            Ok(o) => {
                failed = true;
                for f in &o.failures {
                    eprintln!("{f}\n");
                }
                eprintln!(
                    "{shown}: FAILED: {} of {} expectations did not hold\n",
                    o.failures.len(),
                    o.expectations
                );
            }
        }
    }
    if failed {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    }
}
