//! The rules about *our* readinessProbe: one on another container of the
//! exporter's pod that asks `/readyz` on a port of the exporter (its probe
//! listener, or the main one). Such a probe is gated on a quorum (the
//! default policy's linearizable read), is answered from a cached verdict
//! within milliseconds, or after at most `?wait=` when it long-polls. (The
//! rules about every quorum-gated probe, ours or etcd's, are in `quorum.rs`.)

use serde_json::Value;

use super::Rule;
use super::pod_security::{list, text};
use super::settings::{Setting, Settings};

/// The exporter's listening ports: `--web.probe-listen-address` and
/// `--web.listen-address` (flags or their `ERE_*` variables; 9379 by default).
pub(super) fn exporter_ports(exporter: &Value) -> Vec<u16> {
    let settings = Settings::of(exporter);
    let main = match settings.get("web.listen-address", "ERE_WEB_LISTEN_ADDRESS") {
        Setting::Value(v) => Some(v),
        Setting::Absent => Some(":9379"),
        Setting::Unseen => None,
    };
    let probe = settings
        .get("web.probe-listen-address", "ERE_WEB_PROBE_LISTEN_ADDRESS")
        .value();
    let port = |addr: &str| addr.rsplit(':').next().and_then(|p| p.parse::<u16>().ok());
    [main, probe]
        .into_iter()
        .flatten()
        .filter_map(port)
        .collect()
}

/// A probe's port as a number (`8080` or `"8080"`); None for a name.
pub(super) fn port_number(port: &Value) -> Option<u16> {
    match port {
        Value::Number(n) => n.as_u64().and_then(|n| u16::try_from(n).ok()),
        Value::String(s) => s.parse().ok(),
        _ => None,
    }
}

/// A probe field, or the kubelet's default for it.
fn seconds(probe: &Value, field: &str, default: i64) -> i64 {
    probe[field].as_i64().unwrap_or(default)
}

/// Findings about every container whose readinessProbe asks the exporter.
pub(super) fn findings(spec: &Value, exporter: &Value, out: &mut dyn FnMut(Rule, String, String)) {
    let ports = exporter_ports(exporter);
    for c in list(&spec["containers"]) {
        if std::ptr::eq(c, exporter) {
            continue;
        }
        named_port(c, exporter, out);
        let probe = &c["readinessProbe"];
        let get = &probe["httpGet"];
        let path = text(&get["path"]);
        let port = port_number(&get["port"]);
        let ours = port.is_some_and(|p| ports.contains(&p))
            && (path == "/readyz" || path.starts_with("/readyz?"));
        if !ours {
            continue;
        }
        let name = text(&c["name"]);
        thresholds(name, probe, out);
        wait(name, probe, path, out);
    }
}

/// A probe of `c` naming one of the exporter's ports (`ere-probe`): the
/// kubelet resolves a named port in the probed container only, so the
/// probe fails with "port not found" however the exporter decides.
fn named_port(c: &Value, exporter: &Value, out: &mut dyn FnMut(Rule, String, String)) {
    let own = |n: &str| list(&c["ports"]).iter().any(|p| text(&p["name"]) == n);
    let theirs = |n: &str| {
        list(&exporter["ports"])
            .iter()
            .find(|p| text(&p["name"]) == n)
            .map(|p| p["containerPort"].clone())
    };
    for kind in ["readinessProbe", "livenessProbe", "startupProbe"] {
        let probe = &c[kind];
        for action in ["httpGet", "tcpSocket"] {
            let Some(name) = probe[action]["port"].as_str() else {
                continue;
            };
            if let Some(number) = theirs(name).filter(|_| !own(name)) {
                out(
                    Rule::ProbePort,
                    format!(
                        "container `{}`: {kind} {action} port `{name}` is the exporter's, and a named port is looked up among the probed container's own ports: the probe can never connect",
                        text(&c["name"])
                    ),
                    format!("port: {number} (the number)"),
                );
            }
        }
    }
}

/// Period and thresholds that delay what the exporter decided: the
/// verdict is evaluated every 250 ms and long-polled, so the kubelet should
/// act on each answer.
fn thresholds(name: &str, probe: &Value, out: &mut dyn FnMut(Rule, String, String)) {
    let period = seconds(probe, "periodSeconds", 10);
    let failure = seconds(probe, "failureThreshold", 3);
    let success = seconds(probe, "successThreshold", 1);
    if period > 1 || failure > 1 || success > 1 {
        out(
            Rule::ProbeThresholds,
            format!(
                "container `{name}`: readinessProbe periodSeconds {period}, failureThreshold {failure}, successThreshold {success} (unset fields count as the kubelet's defaults 10, 3, 1): a not-ready verdict reaches the Service up to {}s late, a ready one up to {}s, hiding what the exporter decided",
                period * failure,
                period * success
            ),
            "periodSeconds: 1, failureThreshold: 1, successThreshold: 1, as the stanza in README.md (\"The probe stanza\"); a hold-down belongs in the policy (`for`, `recover`), where it is explained".to_string(),
        );
    }
}

/// A long poll (`?wait=`) the kubelet gives up on before it can answer.
fn wait(name: &str, probe: &Value, path: &str, out: &mut dyn FnMut(Rule, String, String)) {
    let Some(query) = path.split_once('?').map(|(_, q)| q) else {
        return;
    };
    let Some(w) = query.split('&').find_map(|kv| kv.strip_prefix("wait=")) else {
        return;
    };
    let timeout = seconds(probe, "timeoutSeconds", 1);
    let week = std::time::Duration::from_secs(7 * 86_400);
    match etcd_readiness_policy::duration::parse(w, week) {
        Err(e) => out(
            Rule::ProbeTimeout,
            format!(
                "container `{name}`: readinessProbe path {path}: wait={w} is not a duration ({e})"
            ),
            "a duration such as `wait=2s`, shorter than timeoutSeconds".to_string(),
        ),
        Ok(d) if (timeout as f64) <= d.as_secs_f64() => out(
            Rule::ProbeTimeout,
            format!(
                "container `{name}`: readinessProbe timeoutSeconds {timeout} does not exceed its ?wait={w}: the kubelet gives up before the exporter answers a poll that waits, and counts it as a failure"
            ),
            format!(
                "timeoutSeconds: {} or more (the wait plus a second), or a shorter wait",
                d.as_secs_f64().floor() as i64 + 1
            ),
        ),
        Ok(_) => {}
    }
}
