//! NetworkPolicies over the exporter's pods: selecting a pod isolates it
//! for ingress, so a port that no policy selecting it opens (to anyone) is
//! closed. Every port another container of the pod declares is checked —
//! etcd's, a backup-restore sidecar's, a wrapper's — except the exporter's
//! own: its probe listener is meant to be closed (the kubelet's probes come
//! from the node). Only ports declared in `ports:` can be seen.

use serde_json::Value;

use super::pdb::selects;
use super::pod_security::{list, text};
use super::{Finding, Rule, exporter, object, pod_template};

/// Whether a NetworkPolicy restricts ingress (`policyTypes` unset means
/// Ingress, and Egress too only when it has egress rules).
fn restricts_ingress(policy: &Value) -> bool {
    match policy["spec"]["policyTypes"].as_array() {
        Some(types) => types.iter().any(|t| t == "Ingress"),
        None => true,
    }
}

/// Whether an ingress rule lets some peer reach `port` (a container port).
fn opens(rule: &Value, port: &Value) -> bool {
    let number = port["containerPort"].as_i64();
    let protocol = port["protocol"].as_str().unwrap_or("TCP");
    let entries = list(&rule["ports"]);
    entries.is_empty()
        || entries.iter().any(|e| {
            let same_protocol = e["protocol"].as_str().unwrap_or("TCP") == protocol;
            let matches = match &e["port"] {
                Value::Null => true,
                Value::Number(n) => {
                    let from = n.as_i64();
                    let to = e["endPort"].as_i64().or(from);
                    matches!((number, from, to), (Some(p), Some(f), Some(t)) if f <= p && p <= t)
                }
                Value::String(name) => port["name"].as_str() == Some(name.as_str()),
                _ => false,
            };
            same_protocol && matches
        })
}

/// The findings for every pod with the exporter that a NetworkPolicy in
/// the same input isolates.
pub(super) fn findings(docs: &[Value]) -> Vec<Finding> {
    let ns = super::namespace_of;
    let policies: Vec<&Value> = docs
        .iter()
        .filter(|d| d["kind"] == "NetworkPolicy" && restricts_ingress(d))
        .collect();
    let mut out = Vec::new();
    for doc in docs {
        let Some((meta, spec)) = pod_template(doc) else {
            continue;
        };
        let Some(exporter) = exporter(spec) else {
            continue;
        };
        if spec["hostNetwork"] == Value::Bool(true) {
            continue;
        }
        let over: Vec<&&Value> = policies
            .iter()
            .filter(|p| ns(p) == ns(doc) && selects(&p["spec"]["podSelector"], &meta["labels"]))
            .collect();
        if over.is_empty() {
            continue;
        }
        let rules: Vec<&Value> = over
            .iter()
            .flat_map(|p| list(&p["spec"]["ingress"]))
            .collect();
        let mut closed = Vec::new();
        for c in list(&spec["containers"])
            .iter()
            .filter(|c| !std::ptr::eq(*c, exporter))
        {
            for port in list(&c["ports"]) {
                if !rules.iter().any(|r| opens(r, port)) {
                    let name = port["name"]
                        .as_str()
                        .map(|n| format!(" ({n})"))
                        .unwrap_or_default();
                    closed.push(format!(
                        "container `{}`'s {} {}{name}",
                        text(&c["name"]),
                        port["protocol"].as_str().unwrap_or("TCP"),
                        port["containerPort"]
                    ));
                }
            }
        }
        if closed.is_empty() {
            continue;
        }
        let names: Vec<String> = over.iter().map(|p| object(p)).collect();
        out.push(Finding {
            object: names.join(", "),
            rule: Rule::NetworkPolicyPort,
            problem: format!(
                "selects the pods of {} and opens no ingress to {}: whoever calls {} from another pod (Prometheus, an operator, a job) is refused",
                object(doc),
                closed.join(", "),
                if closed.len() == 1 { "it" } else { "them" }
            ),
            fix: "add an ingress rule for each such port, `from` the pods that call it (e.g. etcd-druid's backup-restore 8080 from etcd-druid and the compaction jobs, a wrapper's 9095), to this policy or another selecting these pods; the networkpolicy component opens only etcd's 2379, 2380, 2381 and the exporter's 9379".to_string(),
        });
    }
    out
}
