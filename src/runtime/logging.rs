//! Logging to stderr in the conventions of Prometheus' promslog: `--log.level`
//! is one of `debug`, `info`, `warn`, `error` (anything else is refused by
//! the flag parser, exit 2, naming the four), `--log.format` is `logfmt`
//! (the default) or `json`, and each line carries `time` (RFC 3339 UTC,
//! milliseconds), `level` (upper case), `source` (the module), `msg`, then the
//! event's own fields:
//!
//! ```text
//! time=2026-12-01T09:40:00.123Z level=INFO source=etcd_readiness_exporter::cmd::serve msg=serving addr=127.0.0.1:9379
//! {"time":"2026-12-01T09:40:00.123Z","level":"INFO","source":"etcd_readiness_exporter::cmd::serve","msg":"serving","addr":"127.0.0.1:9379"}
//! ```
//!
//! The level applies to this program's crates; dependencies (h2, hyper,
//! tonic, rustls…) log at `info` and above even at `debug`, where their
//! per-frame messages would drown ours.

use std::fmt::{self, Write as _};

use clap::ValueEnum;
use tracing::field::{Field, Visit};
use tracing::{Event, Level, Subscriber};
use tracing_subscriber::fmt::format::Writer;
use tracing_subscriber::fmt::{FmtContext, FormatEvent, FormatFields};
use tracing_subscriber::registry::LookupSpan;

/// `--log.level`: promslog's four levels.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
#[value(rename_all = "lower")]
pub enum LogLevel {
    Debug,
    Info,
    Warn,
    Error,
}

impl LogLevel {
    fn tracing(self) -> Level {
        match self {
            LogLevel::Debug => Level::DEBUG,
            LogLevel::Info => Level::INFO,
            LogLevel::Warn => Level::WARN,
            LogLevel::Error => Level::ERROR,
        }
    }
}

/// `--log.format`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum LogFormat {
    /// `key=value` pairs, as promslog's default. `text`, the name of the
    /// format before logfmt, is accepted so existing manifests keep working.
    #[value(alias = "text")]
    Logfmt,
    /// One JSON object per line, the same keys.
    Json,
}

/// Install the stderr logger for `level` and `format` (once per process; a
/// second call is a no-op, as in tests that start several servers).
pub fn init(level: LogLevel, format: LogFormat) {
    let ours = level.tracing();
    // tracing orders levels by verbosity (ERROR < WARN < INFO < DEBUG), so the
    // minimum is the less verbose of the two.
    let deps = ours.min(Level::INFO);
    let filter = tracing_subscriber::filter::Targets::new()
        .with_target("etcd_readiness_exporter", ours)
        .with_target("etcd_readiness_policy", ours)
        .with_default(deps);
    use tracing_subscriber::layer::SubscriberExt;
    use tracing_subscriber::util::SubscriberInitExt;
    let _ = tracing_subscriber::registry()
        .with(
            tracing_subscriber::fmt::layer()
                .event_format(Promslog { format })
                .with_writer(std::io::stderr),
        )
        .with(filter)
        .try_init();
}

/// The event formatter: promslog's keys in logfmt or JSON.
struct Promslog {
    format: LogFormat,
}

impl<S, N> FormatEvent<S, N> for Promslog
where
    S: Subscriber + for<'a> LookupSpan<'a>,
    N: for<'a> FormatFields<'a> + 'static,
{
    fn format_event(
        &self,
        _ctx: &FmtContext<'_, S, N>,
        mut writer: Writer<'_>,
        event: &Event<'_>,
    ) -> fmt::Result {
        let time = jiff::Timestamp::now()
            .strftime("%Y-%m-%dT%H:%M:%S%.3fZ")
            .to_string();
        let meta = event.metadata();
        let mut fields = Fields::default();
        event.record(&mut fields);
        let line = render(
            self.format,
            &time,
            meta.level().as_str(),
            meta.target(),
            &fields,
        );
        writer.write_str(&line)
    }
}

/// An event's message and other fields, as text.
#[derive(Default)]
struct Fields {
    msg: String,
    kv: Vec<(&'static str, Value)>,
}

enum Value {
    Str(String),
    Num(String),
    Bool(bool),
}

impl Visit for Fields {
    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        let text = format!("{value:?}");
        if field.name() == "message" {
            self.msg = text;
        } else {
            self.kv.push((field.name(), Value::Str(text)));
        }
    }
    fn record_str(&mut self, field: &Field, value: &str) {
        if field.name() == "message" {
            self.msg = value.to_string();
        } else {
            self.kv.push((field.name(), Value::Str(value.to_string())));
        }
    }
    fn record_i64(&mut self, field: &Field, value: i64) {
        self.kv.push((field.name(), Value::Num(value.to_string())));
    }
    fn record_u64(&mut self, field: &Field, value: u64) {
        self.kv.push((field.name(), Value::Num(value.to_string())));
    }
    fn record_f64(&mut self, field: &Field, value: f64) {
        let v = if value.is_finite() {
            Value::Num(value.to_string())
        } else {
            Value::Str(value.to_string())
        };
        self.kv.push((field.name(), v));
    }
    fn record_bool(&mut self, field: &Field, value: bool) {
        self.kv.push((field.name(), Value::Bool(value)));
    }
}

/// One log line, newline included.
fn render(format: LogFormat, time: &str, level: &str, source: &str, f: &Fields) -> String {
    let mut out = String::with_capacity(128);
    match format {
        LogFormat::Logfmt => {
            let mut pair = |k: &str, v: &str| {
                if !out.is_empty() {
                    out.push(' ');
                }
                out.push_str(k);
                out.push('=');
                logfmt_value(&mut out, v);
            };
            pair("time", time);
            pair("level", level);
            pair("source", source);
            pair("msg", &f.msg);
            for (k, v) in &f.kv {
                match v {
                    Value::Str(s) | Value::Num(s) => pair(k, s),
                    Value::Bool(b) => pair(k, if *b { "true" } else { "false" }),
                }
            }
        }
        LogFormat::Json => {
            // Keys in promslog's order (a serde_json map would sort them).
            let mut pair = |k: &str, v: serde_json::Value| {
                out.push(if out.is_empty() { '{' } else { ',' });
                out.push_str(&serde_json::Value::from(k).to_string());
                out.push(':');
                out.push_str(&v.to_string());
            };
            pair("time", time.into());
            pair("level", level.into());
            pair("source", source.into());
            pair("msg", f.msg.as_str().into());
            for (k, v) in &f.kv {
                let v = match v {
                    Value::Str(s) => serde_json::Value::from(s.as_str()),
                    Value::Num(s) => s
                        .parse::<serde_json::Number>()
                        .map(serde_json::Value::Number)
                        .unwrap_or_else(|_| serde_json::Value::from(s.as_str())),
                    Value::Bool(b) => serde_json::Value::Bool(*b),
                };
                pair(k, v);
            }
            out.push('}');
        }
    }
    out.push('\n');
    out
}

/// A logfmt value: bare when it has no space, `=`, quote or control
/// character and is not empty; otherwise double-quoted with `\"`, `\\` and
/// `\n`-style escapes (go-logfmt's rules), so every line stays one line.
fn logfmt_value(out: &mut String, v: &str) {
    let bare = !v.is_empty()
        && !v
            .chars()
            .any(|c| c == ' ' || c == '=' || c == '"' || c == '\\' || c.is_control());
    if bare {
        out.push_str(v);
        return;
    }
    out.push('"');
    for c in v.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if c.is_control() => {
                let _ = write!(out, "\\u{{{:04x}}}", c as u32);
            }
            c => out.push(c),
        }
    }
    out.push('"');
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fields() -> Fields {
        Fields {
            msg: "policy reload failed".into(),
            kv: vec![
                ("file", Value::Str("/etc/etcd-readiness/policy".into())),
                (
                    "error",
                    Value::Str("1:11: unknown signal `x`\n = help: \"y\"".into()),
                ),
                ("n", Value::Num("3".into())),
                ("ok", Value::Bool(false)),
                ("empty", Value::Str(String::new())),
            ],
        }
    }

    #[test]
    fn logfmt_line_quotes_only_what_needs_it_and_stays_one_line() {
        let line = render(
            LogFormat::Logfmt,
            "2026-12-01T09:40:00.123Z",
            "WARN",
            "etcd_readiness_exporter::reload",
            &fields(),
        );
        assert_eq!(
            line,
            "time=2026-12-01T09:40:00.123Z level=WARN source=etcd_readiness_exporter::reload \
             msg=\"policy reload failed\" file=/etc/etcd-readiness/policy \
             error=\"1:11: unknown signal `x`\\n = help: \\\"y\\\"\" n=3 ok=false empty=\"\"\n"
        );
    }

    #[test]
    fn json_line_has_the_same_keys_with_typed_values() {
        let line = render(
            LogFormat::Json,
            "2026-12-01T09:40:00.123Z",
            "INFO",
            "m",
            &fields(),
        );
        assert_eq!(line.matches('\n').count(), 1);
        assert!(
            line.starts_with(
                r#"{"time":"2026-12-01T09:40:00.123Z","level":"INFO","source":"m","msg":"#
            ),
            "{line}"
        );
        let v: serde_json::Value = serde_json::from_str(&line).unwrap();
        assert_eq!(v["time"], "2026-12-01T09:40:00.123Z");
        assert_eq!(v["level"], "INFO");
        assert_eq!(v["source"], "m");
        assert_eq!(v["msg"], "policy reload failed");
        assert_eq!(v["n"], 3);
        assert_eq!(v["ok"], false);
        assert_eq!(v["error"], "1:11: unknown signal `x`\n = help: \"y\"");
    }

    #[test]
    fn debug_lowers_only_our_crates() {
        assert_eq!(LogLevel::Debug.tracing().min(Level::INFO), Level::INFO);
        assert_eq!(LogLevel::Error.tracing().min(Level::INFO), Level::ERROR);
    }
}
