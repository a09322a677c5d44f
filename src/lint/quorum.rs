//! Probes that need a quorum: which ones are ([`gate`]), and the two rules
//! about them. A liveness or startup probe that needs a quorum restarts
//! members while the cluster has none, prolonging the outage; a
//! quorum-gated readinessProbe under `OrderedReady` never lets a cold start
//! create the second member. etcd's own `/livez` needs no quorum (a
//! serializable read; kubeadm's livenessProbe), so it is never reported.

use serde_json::Value;

use super::Rule;
use super::pod_security::{list, text};
use super::{is_etcd, probe};

/// Why a probe cannot pass without a quorum.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Gate {
    /// The exporter's `/readyz`: the default policy's linearizable read.
    Exporter,
    /// etcd's `/health`: alarms, a leader, then a linearizable read.
    EtcdHealth,
    /// etcd's (or etcd-druid's wrapper's) `/readyz`: its `linearizable_read` check.
    EtcdReadyz,
    /// `etcdctl endpoint health`: a linearizable Get.
    Etcdctl,
    /// The Bitnami image's `healthcheck.sh`, which runs `etcdctl endpoint health`.
    BitnamiHealthcheck,
}

impl Gate {
    /// What the probe asks, in the words of a finding.
    fn describe(self) -> &'static str {
        match self {
            Gate::Exporter => "the exporter's /readyz (the default policy's linearizable read)",
            Gate::EtcdHealth => {
                "etcd's /health (alarms, a leader, then a linearizable read; not ?serializable=true)"
            }
            Gate::EtcdReadyz => "etcd's /readyz (its linearizable_read check)",
            Gate::Etcdctl => "`etcdctl endpoint health` (a linearizable read)",
            Gate::BitnamiHealthcheck => {
                "the Bitnami image's healthcheck.sh (`etcdctl endpoint health`, a linearizable read)"
            }
        }
    }
}

/// Whether `probe`, of container `c` in a pod whose exporter listens on
/// `exporter_ports`, needs a quorum to pass.
pub(super) fn gate(c: &Value, probe: &Value, exporter_ports: &[u16]) -> Option<Gate> {
    let get = &probe["httpGet"];
    if !get.is_null() {
        let (path, query) = text(&get["path"])
            .split_once('?')
            .unwrap_or((text(&get["path"]), ""));
        let path = path.trim_end_matches('/');
        let port = probe::port_number(&get["port"]);
        let has = |kv: &str| query.split('&').any(|q| q == kv);
        return match path {
            "/readyz" if port.is_some_and(|p| exporter_ports.contains(&p)) => Some(Gate::Exporter),
            "/readyz" | "/readyz/linearizable_read"
                if is_etcd(c) && !has("exclude=linearizable_read") =>
            {
                Some(Gate::EtcdReadyz)
            }
            "/health" if is_etcd(c) && !has("serializable=true") => Some(Gate::EtcdHealth),
            _ => None,
        };
    }
    let command: Vec<&str> = list(&probe["exec"]["command"]).iter().map(text).collect();
    let words: Vec<&str> = command.iter().flat_map(|c| c.split_whitespace()).collect();
    let word = |w: &str| {
        words
            .iter()
            .any(|x| *x == w || x.ends_with(&format!("/{w}")))
    };
    if word("etcdctl") && word("endpoint") && word("health") {
        Some(Gate::Etcdctl)
    } else if words.iter().any(|w| w.ends_with("/etcd/healthcheck.sh")) {
        Some(Gate::BitnamiHealthcheck)
    } else {
        None
    }
}

/// Liveness and startup probes of etcd containers that need a quorum.
pub(super) fn restarts(
    spec: &Value,
    exporter_ports: &[u16],
    out: &mut dyn FnMut(Rule, String, String),
) {
    // Another container's restart (a backup sidecar's) leaves the member be.
    for c in list(&spec["containers"]).iter().filter(|c| is_etcd(c)) {
        for kind in ["livenessProbe", "startupProbe"] {
            let Some(gate) = gate(c, &c[kind], exporter_ports) else {
                continue;
            };
            let when = match kind {
                "livenessProbe" => {
                    "fails whenever the cluster has no quorum, and the kubelet restarts the member"
                }
                _ => {
                    "fails while the member cannot reach a quorum, and the kubelet restarts it after failureThreshold × periodSeconds (a cold start, a slow peer)"
                }
            };
            out(
                Rule::LivenessQuorum,
                format!(
                    "container `{}`: {kind} asks {}: it {when}, which prolongs the outage it reacts to",
                    text(&c["name"]),
                    gate.describe()
                ),
                format!(
                    "{kind}: httpGet /livez on etcd's client or metrics port (etcd 3.4.29+ and 3.5.11+: a serializable read that needs no quorum, as kubeadm's livenessProbe), or no {kind} at all (etcd-druid runs none); readiness is the exporter's to decide"
                ),
            );
        }
    }
}

/// A quorum-gated readinessProbe in a StatefulSet that creates its pods one
/// at a time, each only once the one before is ready: the first member
/// waits for a quorum that the others, never created, cannot give.
pub(super) fn ordered_ready(
    doc: &Value,
    spec: &Value,
    exporter_ports: &[u16],
    out: &mut dyn FnMut(Rule, String, String),
) {
    if doc["kind"] != "StatefulSet" {
        return;
    }
    let policy = doc["spec"]["podManagementPolicy"]
        .as_str()
        .unwrap_or("OrderedReady");
    let replicas = doc["spec"]["replicas"].as_i64().unwrap_or(1);
    if policy != "OrderedReady" || replicas <= 1 {
        return;
    }
    let Some((name, gate)) = list(&spec["containers"])
        .iter()
        .find_map(|c| gate(c, &c["readinessProbe"], exporter_ports).map(|g| (text(&c["name"]), g)))
    else {
        return;
    };
    let sts = text(&doc["metadata"]["name"]);
    out(
        Rule::OrderedReady,
        format!(
            "podManagementPolicy {policy}{} with {replicas} replicas and a quorum-gated readinessProbe on container `{name}`, which asks {}: on a cold start (a new cluster, or every pod gone at once) {sts}-0 waits for a quorum and {sts}-1 is never created, so the cluster never starts",
            if doc["spec"]["podManagementPolicy"].is_null() {
                " (the default)"
            } else {
                ""
            },
            gate.describe()
        ),
        format!(
            "podManagementPolicy: Parallel (the sidecar component sets it; it changes how pods are created and deleted, not rolling updates). The field is immutable: on an existing StatefulSet, `kubectl delete statefulset {sts} --cascade=orphan` (the pods and their volumes keep running), then apply again; the new StatefulSet adopts the running pods"
        ),
    );
}
