//! PodDisruptionBudgets over the exporter's StatefulSets: one must keep a
//! quorum (n/2+1 of n members) through voluntary disruptions, and select
//! the pods of one etcd cluster only (one budget over two clusters is a
//! quorum of neither). And over any pod: no two budgets may select it (the
//! eviction API refuses to evict such a pod, so every drain fails).

use serde_json::Value;

use super::pod_security::{list, text};
use super::{Finding, Rule, exporter, object, pod_template};

/// Whether `selector` (a LabelSelector) matches `labels`.
pub(super) fn selects(selector: &Value, labels: &Value) -> bool {
    let label = |k: &str| labels[k].as_str();
    let Some(_) = selector.as_object() else {
        return false;
    };
    let by_labels = selector["matchLabels"]
        .as_object()
        .is_none_or(|m| m.iter().all(|(k, v)| label(k) == v.as_str()));
    let by_expressions = list(&selector["matchExpressions"]).iter().all(|e| {
        let key = text(&e["key"]);
        let values: Vec<&str> = list(&e["values"]).iter().map(text).collect();
        match text(&e["operator"]) {
            "In" => label(key).is_some_and(|v| values.contains(&v)),
            "NotIn" => label(key).is_none_or(|v| !values.contains(&v)),
            "Exists" => label(key).is_some(),
            "DoesNotExist" => label(key).is_none(),
            _ => false,
        }
    });
    // An empty selector selects every pod in policy/v1.
    by_labels && by_expressions
}

/// `value` (an integer or `N%`) of `n` pods, rounded up as the disruption
/// controller does; None when it is neither.
fn of(value: &Value, n: i64) -> Option<i64> {
    match value {
        Value::Number(x) => x.as_i64(),
        Value::String(s) => {
            let p: i64 = s.strip_suffix('%')?.parse().ok()?;
            Some((p * n + 99) / 100)
        }
        _ => None,
    }
}

/// The findings of every PodDisruptionBudget that selects pods of an
/// exporter's StatefulSet.
pub(super) fn findings(docs: &[Value]) -> Vec<Finding> {
    let ns = super::namespace_of;
    let clusters: Vec<&Value> = docs
        .iter()
        .filter(|d| d["kind"] == "StatefulSet")
        .filter(|d| exporter(&d["spec"]["template"]["spec"]).is_some())
        .collect();
    let mut out = Vec::new();
    for pdb in docs.iter().filter(|d| d["kind"] == "PodDisruptionBudget") {
        let selector = &pdb["spec"]["selector"];
        let hit: Vec<&&Value> = clusters
            .iter()
            .filter(|s| ns(s) == ns(pdb))
            .filter(|s| selects(selector, &s["spec"]["template"]["metadata"]["labels"]))
            .collect();
        let finding = |problem: String, fix: &str| Finding {
            object: object(pdb),
            rule: Rule::PdbQuorum,
            problem,
            fix: fix.to_string(),
        };
        if hit.len() > 1 {
            let names: Vec<&str> = hit.iter().map(|s| text(&s["metadata"]["name"])).collect();
            out.push(finding(
                format!("selects the pods of {} StatefulSets ({}): one budget over several etcd clusters counts their members together, and keeps a quorum of none", hit.len(), names.join(", ")),
                "one budget per cluster, selecting that StatefulSet's own pod labels (its spec.selector), as deploy/kustomize/components/pdb does",
            ));
            continue;
        }
        let Some(sts) = hit.first() else { continue };
        let n = sts["spec"]["replicas"].as_i64().unwrap_or(1);
        let quorum = n / 2 + 1;
        let spec = &pdb["spec"];
        let kept = match (of(&spec["minAvailable"], n), of(&spec["maxUnavailable"], n)) {
            (Some(min), _) => Some((min, format!("minAvailable {}", spec["minAvailable"]))),
            (None, Some(max)) => Some((
                n - max,
                format!("maxUnavailable {}", spec["maxUnavailable"]),
            )),
            (None, None) => None,
        };
        if let Some((kept, what)) = kept.filter(|(k, _)| *k < quorum) {
            out.push(finding(
                format!(
                    "{what} keeps {kept} of the {n} members of StatefulSet {} available, fewer than its quorum of {quorum}: a drain may take the cluster below quorum, and etcd stops serving",
                    text(&sts["metadata"]["name"])
                ),
                "minAvailable: 51% (a quorum for every member count; deploy/kustomize/components/pdb), or the integer n/2+1",
            ));
        }
    }
    out
}

/// Every workload whose pods more than one PodDisruptionBudget of the
/// same namespace selects: the `pdb` component next to a chart's or an
/// operator's own budget.
pub(super) fn overlaps(docs: &[Value]) -> Vec<Finding> {
    let ns = super::namespace_of;
    let budgets: Vec<&Value> = docs
        .iter()
        .filter(|d| d["kind"] == "PodDisruptionBudget")
        .collect();
    let mut out = Vec::new();
    for doc in docs {
        let Some((meta, _)) = pod_template(doc) else {
            continue;
        };
        let over: Vec<String> = budgets
            .iter()
            .filter(|b| ns(b) == ns(doc) && selects(&b["spec"]["selector"], &meta["labels"]))
            .map(|b| text(&b["metadata"]["name"]).to_string())
            .collect();
        if over.len() < 2 {
            continue;
        }
        out.push(Finding {
            object: object(doc),
            rule: Rule::PdbOverlap,
            problem: format!(
                "its pods are selected by {} PodDisruptionBudgets ({}): the eviction API refuses to evict a pod that more than one budget covers, so every node drain (kubectl drain, node upgrades, the cluster autoscaler) fails on these pods",
                over.len(),
                over.join(", ")
            ),
            fix: "keep one budget over these pods: leave out the `pdb` component where the chart or operator already makes one (the Bitnami chart's `pdb.create`, etcd-druid's own), or delete the other; the one kept should keep a quorum (minAvailable n/2+1, or 51%)".to_string(),
        });
    }
    out
}
