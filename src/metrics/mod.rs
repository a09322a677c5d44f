//! Metrics exposition. Each component owns and registers its families
//! (`fn register(&mut Registry) -> Self`, as linkerd does): the engine's in
//! [`crate::engine::EngineMetrics`], the samplers' in
//! [`crate::sources::SourceMetrics`], the HTTP layer's in
//! [`crate::http::HttpMetrics`], the reloader's in
//! [`crate::reload::ReloadMetrics`], process and build info in [`process`].
//! `serve` registers them all into one prometheus-client [`Registry`]; this
//! module turns that registry into the two text expositions (OpenMetrics
//! 1.0.0 and Prometheus text 0.0.4).

pub mod build_info;
pub mod process;
pub mod reload_status;

use std::collections::HashSet;

use prometheus_client::registry::Registry;

pub const OPENMETRICS_CONTENT_TYPE: &str =
    "application/openmetrics-text; version=1.0.0; charset=utf-8";
pub const TEXT_CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

/// The exposition format a scraper asked for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    OpenMetrics,
    Text004,
}

impl Format {
    /// OpenMetrics when the `Accept` header names it, else text 0.0.4.
    pub fn from_accept(accept: Option<&str>) -> Self {
        match accept {
            Some(a) if a.contains("application/openmetrics-text") => Format::OpenMetrics,
            _ => Format::Text004,
        }
    }

    pub fn content_type(self) -> &'static str {
        match self {
            Format::OpenMetrics => OPENMETRICS_CONTENT_TYPE,
            Format::Text004 => TEXT_CONTENT_TYPE,
        }
    }
}

/// Encode `registry` in `format`.
pub fn encode(registry: &Registry, format: Format) -> String {
    let mut om = String::with_capacity(16 * 1024);
    // Writing into a String cannot fail.
    let _ = prometheus_client::encoding::text::encode(&mut om, registry);
    match format {
        Format::OpenMetrics => om,
        Format::Text004 => openmetrics_to_text004(&om),
    }
}

/// Derive Prometheus text 0.0.4 from prometheus-client's OpenMetrics output:
/// counter families are named with `_total` in `# HELP`/`# TYPE` (samples
/// already carry it), `# UNIT`, `_created` samples and `# EOF` are dropped,
/// and the OpenMetrics-only types `info`, `stateset`, `gaugehistogram` and
/// `unknown` become `gauge`/`untyped`.
pub fn openmetrics_to_text004(om: &str) -> String {
    let mut out = String::with_capacity(om.len());
    let mut counters: HashSet<String> = HashSet::new();
    for line in om.lines() {
        if let Some(rest) = line.strip_prefix("# TYPE ") {
            let mut parts = rest.splitn(2, ' ');
            let (name, ty) = (parts.next().unwrap_or(""), parts.next().unwrap_or(""));
            if ty == "counter" {
                counters.insert(name.to_string());
            }
        }
    }
    for line in om.lines() {
        if line == "# EOF" || line.starts_with("# UNIT ") {
            continue;
        }
        if let Some(rest) = line
            .strip_prefix("# HELP ")
            .or_else(|| line.strip_prefix("# TYPE "))
        {
            let kw = &line[..7];
            let (name, tail) = rest.split_once(' ').unwrap_or((rest, ""));
            let name = if counters.contains(name) && !name.ends_with("_total") {
                format!("{name}_total")
            } else {
                name.to_string()
            };
            let tail = if kw == "# TYPE " {
                match tail {
                    "info" | "stateset" => "gauge",
                    "gaugehistogram" => "histogram",
                    "unknown" => "untyped",
                    t => t,
                }
            } else {
                tail
            };
            out.push_str(kw);
            out.push_str(&name);
            out.push(' ');
            out.push_str(tail);
            out.push('\n');
            continue;
        }
        let metric = line.split(['{', ' ']).next().unwrap_or("");
        if let Some(base) = metric.strip_suffix("_created")
            && counters.contains(base)
        {
            continue;
        }
        out.push_str(line);
        out.push('\n');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use prometheus_client::metrics::counter::Counter;

    #[test]
    fn text004_names_counters_with_total_and_drops_eof() {
        let mut r = Registry::default();
        let c: Counter = Counter::default();
        c.inc();
        r.register("demo_flips", "Flips", c);
        let om = encode(&r, Format::OpenMetrics);
        assert!(om.contains("# TYPE demo_flips counter\n"), "{om}");
        assert!(om.ends_with("# EOF\n"));
        let text = encode(&r, Format::Text004);
        assert_eq!(
            text,
            "# HELP demo_flips_total Flips.\n# TYPE demo_flips_total counter\ndemo_flips_total 1\n"
        );
    }
}
