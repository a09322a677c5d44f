//! What the exporter needs to reach its etcd, read from the etcd
//! container's own settings, against what the exporter container is given.
//! etcd serving clients over TLS only needs an `https://` endpoint and the
//! CA; `--client-cert-auth` a client certificate and key; authentication a
//! user and password file, or a client certificate whose CN is the user
//! (etcd takes the CN as the user when it checks client certificates).
//! Without them every member stays not ready and the rollout stalls at the
//! first pod. An etcd configured by a config file shows none of this in the
//! manifest, and is not judged.

use serde_json::Value;

use super::Rule;
use super::pod_security::text;
use super::settings::{Setting, Settings};

/// What etcd asks of its clients, each with the setting that shows it.
#[derive(Debug, Default)]
struct Demands {
    tls: Option<String>,
    client_certs: Option<String>,
    auth: Option<String>,
}

/// The demands of one etcd container; None when it is configured by a
/// config file (`--config-file` makes etcd ignore its other flags and
/// variables, and the file is not in the manifest).
fn demands(etcd: &Settings) -> Option<Demands> {
    if etcd.mentions("config-file", "ETCD_CONFIG_FILE") {
        return None;
    }
    let https = |urls: &str| urls.split(',').all(|u| u.trim().starts_with("https://"));
    let listen = etcd.get("listen-client-urls", "ETCD_LISTEN_CLIENT_URLS");
    let advertise = etcd.get("advertise-client-urls", "ETCD_ADVERTISE_CLIENT_URLS");
    let tls = match listen {
        Setting::Value(v) if https(v) => Some(format!("listens for clients on {v} only")),
        // Unset: etcd listens on http://localhost:2379, which the exporter reaches.
        Setting::Value(_) | Setting::Absent => None,
        Setting::Unseen => match (advertise.value(), etcd.get("cert-file", "ETCD_CERT_FILE")) {
            (Some(v), _) if https(v) => Some(format!("advertises {v}")),
            (_, Setting::Value(f)) => Some(format!("has --cert-file {f}")),
            _ => None,
        },
    };
    let client_certs = (tls.is_some() && etcd.enabled("client-cert-auth", "ETCD_CLIENT_CERT_AUTH"))
        .then(|| "requires client certificates (--client-cert-auth)".to_string());
    // Only what the manifest shows: an envFrom may hold anything.
    let auth = if etcd.declares("ETCD_ROOT_PASSWORD") {
        Some("has authentication on (ETCD_ROOT_PASSWORD: the Bitnami image enables it)")
    } else if etcd.env("ALLOW_NONE_AUTHENTICATION").value() == Some("no") {
        Some("has authentication on (ALLOW_NONE_AUTHENTICATION=no)")
    } else if etcd.mentions("auth-token", "ETCD_AUTH_TOKEN") {
        Some("has authentication on (--auth-token is set)")
    } else {
        None
    };
    Some(Demands {
        tls,
        client_certs,
        auth: auth.map(str::to_string),
    })
}

/// What the exporter lacks for those demands: each lack and the setting
/// that gives it.
fn lacks(d: &Demands, exporter: &Settings) -> Vec<(String, &'static str)> {
    let mut out = Vec::new();
    let endpoint = match exporter.get("etcd.endpoint", "ERE_ETCD_ENDPOINT") {
        Setting::Absent => Some("the default http://127.0.0.1:2379"),
        s => s.value(),
    };
    let set = |flag: &str, var: &str| exporter.get(flag, var).is_set();
    let pair = set("etcd.cert", "ERE_ETCD_CERT") && set("etcd.key", "ERE_ETCD_KEY");
    if d.tls.is_some() {
        if let Some(e) = endpoint.filter(|e| !e.starts_with("https://")) {
            out.push((
                format!("an https:// endpoint (it has {e})"),
                "ERE_ETCD_ENDPOINT=https://127.0.0.1:2379 (etcd's certificate needs 127.0.0.1, or ::1, among its SANs)",
            ));
        }
        if !set("etcd.cacert", "ERE_ETCD_CACERT") {
            out.push((
                "the CA of etcd's certificate".to_string(),
                "ERE_ETCD_CACERT=<ca.crt mounted from etcd's CA Secret>",
            ));
        }
    }
    if d.client_certs.is_some() && !pair {
        out.push((
            "a client certificate and key".to_string(),
            "ERE_ETCD_CERT and ERE_ETCD_KEY=<a client pair signed by etcd's --trusted-ca-file>",
        ));
    }
    let login =
        set("etcd.user", "ERE_ETCD_USER") && set("etcd.password-file", "ERE_ETCD_PASSWORD_FILE");
    let by_cn = d.client_certs.is_some() && pair;
    if d.auth.is_some() && !login && !by_cn {
        out.push((
            "an etcd user".to_string(),
            if d.client_certs.is_some() {
                "ERE_ETCD_USER and ERE_ETCD_PASSWORD_FILE=<a Secret mount> for a user whose role reads the probe key, or a client certificate whose CN is that user (etcd takes the CN as the user; no password needed)"
            } else {
                "ERE_ETCD_USER and ERE_ETCD_PASSWORD_FILE=<a Secret mount> for a user whose role reads the probe key"
            },
        ));
    }
    out
}

/// The finding of a pod whose exporter cannot reach its etcd as etcd is
/// configured.
pub(super) fn findings(etcd: &Value, exporter: &Value, out: &mut dyn FnMut(Rule, String, String)) {
    let Some(d) = demands(&Settings::of(etcd)) else {
        return;
    };
    let lacking = lacks(&d, &Settings::of(exporter));
    if lacking.is_empty() {
        return;
    }
    let why: Vec<&str> = [&d.tls, &d.client_certs, &d.auth]
        .into_iter()
        .flatten()
        .map(String::as_str)
        .collect();
    let what: Vec<&str> = lacking.iter().map(|(w, _)| w.as_str()).collect();
    let fix: Vec<&str> = lacking.iter().map(|(_, f)| *f).collect();
    out(
        Rule::EtcdAccess,
        format!(
            "container `{}` {}, and container `{}` is not given {}: the exporter cannot read etcd, every member stays not ready and the rollout stalls at the first pod",
            text(&etcd["name"]),
            why.join(", "),
            text(&exporter["name"]),
            what.join("; ")
        ),
        format!(
            "set on container `{}` (the flags of the same names also work): {}; see deploy/kustomize/README.md (\"Configuring the exporter\")",
            text(&exporter["name"]),
            fix.join("; ")
        ),
    );
}
