//! etcd's heartbeat interval and election timeout against the exporter's
//! (`--etcd.heartbeat-interval`, `--etcd.election-timeout`, which read
//! etcd's own `ETCD_HEARTBEAT_INTERVAL` and `ETCD_ELECTION_TIMEOUT`). The
//! exporter trusts a serving follower's pending read through an election
//! for one election timeout: told less than etcd's, every election that
//! outlasts it reads as an outage, followers go not ready and a rolling
//! update (each restart is an election) stalls; told more, a stuck read is
//! trusted longer and an outage is seen later. Each setting as its program
//! reads it: the flag, else the variable, else etcd's default (100, 1000).
//! Never judged: a value the manifest cannot show (a `valueFrom`, an
//! `envFrom`), one that is not a plain decimal number, an etcd configured
//! by `--config-file`, or a container only *named* etcd (a wrapper, as
//! etcd-druid's, configures etcd from elsewhere).

use serde_json::Value;

use super::pod_security::{list, text};
use super::settings::{Setting, Settings};
use super::{Rule, runs_etcd_image_or_command};

/// One timing setting as each container takes it.
struct Timing {
    /// What it is, in a sentence.
    what: &'static str,
    /// etcd's flag.
    etcd_flag: &'static str,
    /// The exporter's flag.
    exporter_flag: &'static str,
    /// The variable both read.
    var: &'static str,
    /// etcd's default, also the exporter's, in milliseconds.
    default: u64,
    /// The election timeout (else the heartbeat interval).
    election: bool,
}

const TIMINGS: [Timing; 2] = [
    Timing {
        what: "heartbeat interval",
        etcd_flag: "heartbeat-interval",
        exporter_flag: "etcd.heartbeat-interval",
        var: "ETCD_HEARTBEAT_INTERVAL",
        default: 100,
        election: false,
    },
    Timing {
        what: "election timeout",
        etcd_flag: "election-timeout",
        exporter_flag: "etcd.election-timeout",
        var: "ETCD_ELECTION_TIMEOUT",
        default: 1000,
        election: true,
    },
];

/// Where a container's value of a setting comes from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Origin {
    Flag,
    Env,
    Default,
}

/// A setting's value in milliseconds and where it comes from; None when
/// it cannot be read from the manifest (unseen, a flag without a value,
/// not a plain decimal number).
fn read(s: &Settings, flag: &str, var: &str, default: u64) -> Option<(u64, Origin)> {
    let (v, origin) = match s.flag(flag) {
        Some(v) => (v, Origin::Flag),
        None if s.has_flag(flag) => return None,
        None => match s.env(var) {
            Setting::Value(v) => (v, Origin::Env),
            Setting::Absent => return Some((default, Origin::Default)),
            Setting::Unseen => return None,
        },
    };
    millis(v).map(|ms| (ms, origin))
}

/// A plain decimal number, as both programs read it alike: etcd (Go's
/// flag package) takes a leading `0` as octal and `0x` as hex, the
/// exporter does not, so those are not read.
fn millis(v: &str) -> Option<u64> {
    let plain =
        !v.is_empty() && v.bytes().all(|b| b.is_ascii_digit()) && (v == "0" || !v.starts_with('0'));
    if !plain {
        return None;
    }
    v.parse().ok()
}

/// Whether the manifest shows the program to be etcd itself: its image or
/// command, or a shell command line that runs `etcd` (its first word, or
/// the word after `exec`).
fn runs_etcd(c: &Value) -> bool {
    let is_etcd = |w: &str| w.rsplit('/').next() == Some("etcd");
    runs_etcd_image_or_command(c)
        || list(&c["command"])
            .iter()
            .chain(list(&c["args"]))
            .map(text)
            .filter(|a| a.contains(char::is_whitespace))
            .any(|script| {
                let words: Vec<&str> = script.split_whitespace().collect();
                words.first().is_some_and(|w| is_etcd(w))
                    || words.windows(2).any(|p| p[0] == "exec" && is_etcd(p[1]))
            })
}

/// How a value is shown in a finding.
fn shown(t: &Timing, ms: u64, origin: Origin, flag: &str) -> String {
    match origin {
        Origin::Flag => format!("{ms} ms (--{flag}={ms})"),
        Origin::Env => format!("{ms} ms ({}={ms})", t.var),
        Origin::Default => format!("{ms} ms (the default)"),
    }
}

/// What the mismatch does, by which side is longer.
fn consequence(t: &Timing, etcd: u64, exporter: u64) -> String {
    match (t.election, etcd > exporter) {
        (true, true) => format!(
            "the exporter trusts a follower's pending read through an election for {exporter} ms only, so every election longer than that reads as an outage: followers go not ready during elections, and a rolling update (each restart is an election) stalls"
        ),
        (true, false) => format!(
            "the exporter trusts a stuck read, and forgives CPU contention, for {exporter} ms where etcd elects after {etcd} ms: an outage is seen later"
        ),
        (false, true) => format!(
            "the exporter trusts an answer for as little as {exporter} ms, less than one of etcd's heartbeats, so a loaded but healthy member can read as outdated"
        ),
        (false, false) => format!(
            "the exporter trusts an answer for at least {exporter} ms, more than one of etcd's heartbeats, so a stale answer is trusted longer"
        ),
    }
}

/// The fix: give the exporter etcd's value the way etcd is given it.
fn fix(t: &Timing, etcd: (u64, Origin), exporter: Origin, name: &str) -> String {
    let (ms, flag) = (etcd.0, t.exporter_flag);
    let how = match (exporter, etcd.1) {
        (Origin::Flag, _) => {
            format!("change its --{flag} to {ms} (its flag wins over the variable)")
        }
        (_, Origin::Env) => format!(
            "copy etcd's env entry {}={ms} to it (the exporter reads etcd's own variable), or set --{flag}={ms}",
            t.var
        ),
        (_, Origin::Flag) => format!(
            "set --{flag}={ms} in its args, or the env entry {}={ms} (etcd's own variable, which it reads)",
            t.var
        ),
        (_, Origin::Default) => format!(
            "remove its {} entry (the default is etcd's {ms}), or set it to {ms}",
            t.var
        ),
    };
    format!("give container `{name}` etcd's {}: {how}", t.what)
}

/// The findings of a pod whose exporter is told other timing than its etcd
/// runs with, one per setting.
pub(super) fn findings(etcd: &Value, exporter: &Value, out: &mut dyn FnMut(Rule, String, String)) {
    let (e, x) = (Settings::of(etcd), Settings::of(exporter));
    if !runs_etcd(etcd) || e.mentions("config-file", "ETCD_CONFIG_FILE") {
        return;
    }
    let (etcd_name, exporter_name) = (text(&etcd["name"]), text(&exporter["name"]));
    for t in &TIMINGS {
        let Some((em, eo)) = read(&e, t.etcd_flag, t.var, t.default) else {
            continue;
        };
        let Some((xm, xo)) = read(&x, t.exporter_flag, t.var, t.default) else {
            continue;
        };
        if em == xm {
            continue;
        }
        out(
            Rule::EtcdTiming,
            format!(
                "container `{etcd_name}` runs with {} {} of {}, and container `{exporter_name}` is told {}: {}",
                if t.election { "an" } else { "a" },
                t.what,
                shown(t, em, eo, t.etcd_flag),
                shown(t, xm, xo, t.exporter_flag),
                consequence(t, em, xm)
            ),
            fix(t, (em, eo), xo, exporter_name),
        );
    }
}
