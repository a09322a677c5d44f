//! The `lint` command's rules: rendered Kubernetes manifests (the output of
//! `kubectl kustomize`, multi-document YAML) in, findings out, each naming
//! the object, what is wrong and the fix. Pure: no IO, no clock; the CLI
//! reads the files and prints [`render`]'s text.
//!
//! What it knows is how the exporter is deployed next to etcd: a container
//! is the exporter by its name or image; a readinessProbe is *ours* when it
//! asks `/readyz` on the exporter's probe port, and then it is gated on a
//! quorum (the default policy's linearizable read); a container is etcd by
//! its name, image or command. The rules are those an adopter trips over: a
//! patch keyed on a container name that is not there (an image-less
//! container), duplicate port names, an exporter not given what etcd's TLS,
//! client certificates or authentication need, an exporter told another
//! heartbeat interval or election timeout than its etcd runs with, a
//! quorum-gated liveness or startup probe, a quorum-gated readinessProbe
//! under `OrderedReady`, a probe timeout within its `?wait=`, thresholds that hide the verdict, Pod
//! Security "restricted", an image that runs as root under `runAsNonRoot`,
//! a PodDisruptionBudget that does not keep a quorum, two budgets over the
//! same pods, and a NetworkPolicy that closes a port the pod serves.

mod access;
mod network;
mod pdb;
mod pod_security;
mod probe;
mod quorum;
mod settings;
mod timing;

use std::fmt;

use serde_json::Value;

use etcd_readiness_policy::yaml::YamlError;
use pod_security::{containers, list, text};

/// What a finding is about; its id is printed with it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Rule {
    /// A container without an image: a strategic merge patch keyed on a
    /// container name the pod does not have.
    NoImage,
    /// Two ports of one pod with the same name.
    DuplicatePortName,
    /// A quorum-gated readinessProbe in a multi-member `OrderedReady`
    /// StatefulSet: a cold start never creates the second member.
    OrderedReady,
    /// Our probe's `timeoutSeconds` does not exceed its `?wait=`.
    ProbeTimeout,
    /// Our probe's period or thresholds delay the verdict.
    ProbeThresholds,
    /// A probe naming a port of another container: the kubelet looks a
    /// named port up among the probed container's own ports.
    ProbePort,
    /// A Pod Security "restricted" (or "baseline") violation.
    PodSecurity,
    /// An image that runs as root by default, under `runAsNonRoot` and no user.
    RootImage,
    /// A PodDisruptionBudget that lets a quorum go.
    PdbQuorum,
    /// etcd serves TLS, requires client certificates or has authentication,
    /// and the exporter is not given what that needs.
    EtcdAccess,
    /// The exporter is told another heartbeat interval or election timeout
    /// than its etcd runs with.
    EtcdTiming,
    /// A liveness or startup probe that needs a quorum.
    LivenessQuorum,
    /// More than one PodDisruptionBudget selecting the same pods.
    PdbOverlap,
    /// A NetworkPolicy that closes a port a container of the pod serves.
    NetworkPolicyPort,
}

impl Rule {
    /// The id printed in brackets after each finding.
    pub fn id(self) -> &'static str {
        match self {
            Rule::NoImage => "no-image",
            Rule::DuplicatePortName => "duplicate-port-name",
            Rule::OrderedReady => "ordered-ready",
            Rule::ProbeTimeout => "probe-timeout",
            Rule::ProbeThresholds => "probe-thresholds",
            Rule::ProbePort => "probe-port",
            Rule::PodSecurity => "pod-security",
            Rule::RootImage => "root-image",
            Rule::PdbQuorum => "pdb-quorum",
            Rule::EtcdAccess => "etcd-access",
            Rule::EtcdTiming => "etcd-timing",
            Rule::LivenessQuorum => "liveness-quorum",
            Rule::PdbOverlap => "pdb-overlap",
            Rule::NetworkPolicyPort => "networkpolicy-port",
        }
    }
}

/// One problem in one object.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Finding {
    /// `Kind/name`, with `namespace/` in front when the object has one.
    pub object: String,
    pub rule: Rule,
    /// What is wrong, with the values that make it so.
    pub problem: String,
    /// What to change.
    pub fix: String,
}

/// What one input held and what is wrong in it.
#[derive(Debug, Default)]
pub struct Report {
    /// Kubernetes objects read (documents with a `kind`).
    pub objects: usize,
    pub findings: Vec<Finding>,
}

/// The workload kinds whose pod template is checked.
const WORKLOADS: &[&str] = &[
    "Deployment",
    "StatefulSet",
    "DaemonSet",
    "ReplicaSet",
    "Job",
];

/// The exporter container's name in the shipped component.
pub const EXPORTER: &str = "etcd-readiness-exporter";

/// Lint the manifests `text` (named `path` in YAML errors).
pub fn lint(path: &str, text: &str) -> Result<Report, YamlError> {
    let docs: Vec<Value> = etcd_readiness_policy::yaml::documents(path, text)?;
    let docs: Vec<Value> = docs
        .into_iter()
        .flat_map(|d| match d["kind"].as_str() {
            // `kubectl get -o yaml` wraps objects in a List.
            Some("List") => list(&d["items"]).to_vec(),
            Some(_) => vec![d],
            None => vec![],
        })
        .collect();
    let mut report = Report {
        objects: docs.len(),
        findings: Vec::new(),
    };
    for doc in &docs {
        if let Some((meta, spec)) = pod_template(doc) {
            pod(doc, meta, spec, &mut report.findings);
        }
    }
    report.findings.extend(pdb::findings(&docs));
    report.findings.extend(pdb::overlaps(&docs));
    report.findings.extend(network::findings(&docs));
    Ok(report)
}

/// A workload's pod template metadata and spec.
pub(crate) fn pod_template(doc: &Value) -> Option<(&Value, &Value)> {
    let kind = doc["kind"].as_str()?;
    if kind == "Pod" {
        return Some((&doc["metadata"], &doc["spec"]));
    }
    let t = match kind {
        "CronJob" => &doc["spec"]["jobTemplate"]["spec"]["template"],
        k if WORKLOADS.contains(&k) => &doc["spec"]["template"],
        _ => return None,
    };
    Some((&t["metadata"], &t["spec"]))
}

/// `namespace/Kind/name`, or `Kind/name` without a namespace.
pub(crate) fn object(doc: &Value) -> String {
    let m = &doc["metadata"];
    let base = format!("{}/{}", text(&doc["kind"]), text(&m["name"]));
    match m["namespace"].as_str() {
        Some(ns) if !ns.is_empty() => format!("{ns}/{base}"),
        _ => base,
    }
}

/// The exporter container of a pod spec.
fn exporter(spec: &Value) -> Option<&Value> {
    list(&spec["containers"])
        .iter()
        .find(|c| text(&c["name"]) == EXPORTER || text(&c["image"]).contains(EXPORTER))
}

/// Whether a container is etcd (and not the exporter): named `etcd`, or
/// run from an image or a command named `etcd`.
pub(crate) fn is_etcd(c: &Value) -> bool {
    let image = text(&c["image"]);
    text(&c["name"]) != EXPORTER
        && !image.contains(EXPORTER)
        && (text(&c["name"]) == "etcd" || runs_etcd_image_or_command(c))
}

/// Whether a container is run from an image named `etcd` (its repository's
/// last part, tag and digest aside) or its command (else its first
/// argument) is a program named `etcd`; a container only *named* `etcd`
/// (etcd-druid's etcd-wrapper) may run a wrapper instead.
pub(crate) fn runs_etcd_image_or_command(c: &Value) -> bool {
    let image = text(&c["image"]);
    let repo = image.split('@').next().unwrap_or("");
    let repo = repo
        .rsplit_once(':')
        .filter(|(_, tag)| !tag.contains('/'))
        .map_or(repo, |(r, _)| r);
    let program = list(&c["command"])
        .first()
        .or(list(&c["args"]).first())
        .map(text)
        .unwrap_or("");
    repo.rsplit('/').next() == Some("etcd") || program.rsplit('/').next() == Some("etcd")
}

/// An object's namespace, empty when it has none (the rules that compare
/// objects compare within one namespace).
fn namespace_of(d: &Value) -> String {
    d["metadata"]["namespace"]
        .as_str()
        .unwrap_or("")
        .to_string()
}

/// Images that run as root (uid 0) unless told otherwise.
const ROOT_IMAGES: &[&str] = &[
    "registry.k8s.io/etcd",
    "k8s.gcr.io/etcd",
    "quay.io/coreos/etcd",
    "gcr.io/etcd-development/etcd",
];

/// Every rule that looks at one pod.
fn pod(doc: &Value, meta: &Value, spec: &Value, out: &mut Vec<Finding>) {
    let obj = object(doc);
    let finding = |rule, problem: String, fix: String| Finding {
        object: obj.clone(),
        rule,
        problem,
        fix,
    };
    let exporter = exporter(spec);
    let names: Vec<&str> = list(&spec["containers"])
        .iter()
        .filter(|c| !c["image"].is_null())
        .map(|c| text(&c["name"]))
        .collect();
    for (where_, c) in containers(spec) {
        if text(&c["image"]).is_empty() {
            let fix = if text(&c["name"]) == "etcd" && exporter.is_some() {
                format!(
                    "the component's patches find etcd's container by the name `etcd`, and this pod has none (its containers: {}): rename your etcd container to `etcd`, or copy deploy/kustomize/components/sidecar and change `name: etcd` in its etcd-probe.yaml (and in components/restricted/restricted.yaml)",
                    names.join(", ")
                )
            } else {
                "give it an image; a container with only a few fields is what a strategic merge patch keyed on a container name that is not there adds".to_string()
            };
            out.push(finding(
                Rule::NoImage,
                format!("{where_} has no image (the API server refuses the pod)"),
                fix,
            ));
        }
    }
    duplicate_ports(spec, &mut |p, f| {
        out.push(finding(Rule::DuplicatePortName, p, f))
    });
    // A control-plane static pod (kubeadm's etcd) runs on the host's
    // network with hostPath volumes by design, in kube-system, which Pod
    // Security leaves privileged: "restricted" is not its standard.
    let control_plane =
        text(&doc["kind"]) == "Pod" && text(&doc["metadata"]["namespace"]) == "kube-system";
    let restricted = if control_plane {
        Vec::new()
    } else {
        pod_security::violations(meta, spec)
    };
    for violation in restricted {
        out.push(finding(
            Rule::PodSecurity,
            format!("Pod Security \"restricted\": {violation}"),
            "deploy/kustomize/components/restricted sets the pod's and the `etcd` container's securityContext; give every other container allowPrivilegeEscalation: false, capabilities.drop [ALL], runAsNonRoot and a seccompProfile (RuntimeDefault)".to_string(),
        ));
    }
    root_images(spec, &mut |p, f| out.push(finding(Rule::RootImage, p, f)));
    let ports = exporter.map(probe::exporter_ports).unwrap_or_default();
    let mut push = |rule, p, f| out.push(finding(rule, p, f));
    quorum::restarts(spec, &ports, &mut push);
    quorum::ordered_ready(doc, spec, &ports, &mut push);
    if let Some(exporter) = exporter {
        probe::findings(spec, exporter, &mut push);
        for etcd in list(&spec["containers"]).iter().filter(|c| is_etcd(c)) {
            access::findings(etcd, exporter, &mut push);
            timing::findings(etcd, exporter, &mut push);
        }
    }
}

/// Port names used twice in one pod (refused within a container, warned
/// across containers; name lookups take the first).
fn duplicate_ports(spec: &Value, out: &mut dyn FnMut(String, String)) {
    let mut seen: Vec<(&str, String)> = Vec::new();
    for (where_, c) in containers(spec) {
        for p in list(&c["ports"]) {
            let Some(name) = p["name"].as_str() else {
                continue;
            };
            let here = format!("{where_} ({})", p["containerPort"]);
            match seen.iter().find(|(n, _)| *n == name) {
                Some((_, first)) => out(
                    format!(
                        "port name `{name}` is used by {first} and by {here}: the API server refuses it within one container and warns across containers, and a Service targetPort, probe or PodMonitor naming the port gets the first"
                    ),
                    "rename one of them (the exporter's are `ere-metrics` and `ere-probe`; a Service's targetPort or a PodMonitor naming the port must follow)".to_string(),
                ),
                None => seen.push((name, here)),
            }
        }
    }
}

/// A root-default etcd image with `runAsNonRoot: true` and no user: the
/// kubelet refuses to start it ("image will run as root").
fn root_images(spec: &Value, out: &mut dyn FnMut(String, String)) {
    let psc = &spec["securityContext"];
    for (where_, c) in containers(spec) {
        let image = text(&c["image"]);
        let repo = image.split([':', '@']).next().unwrap_or("");
        if !ROOT_IMAGES.contains(&repo) {
            continue;
        }
        let sc = &c["securityContext"];
        let nonroot = match sc["runAsNonRoot"].as_bool() {
            Some(b) => b,
            None => psc["runAsNonRoot"] == Value::Bool(true),
        };
        let user = sc["runAsUser"].as_i64().or(psc["runAsUser"].as_i64());
        if nonroot && user.is_none() {
            out(
                format!("{where_}: {repo} runs as root (uid 0) by default, and runAsNonRoot is true with no runAsUser: the kubelet refuses to start it"),
                "set runAsUser, runAsGroup and fsGroup (65532 runs it, and lets it write its data volume) in the pod's securityContext, as deploy/kustomize/components/nonroot-user does".to_string(),
            );
        }
    }
}

/// The findings as the command prints them: one paragraph each, then a
/// count.
pub fn render(path: &str, report: &Report) -> String {
    let mut out = String::new();
    for f in &report.findings {
        out.push_str(&f.display(path).to_string());
    }
    let n = report.findings.len();
    out.push_str(&format!(
        "{path}: {} object{}, {} finding{}\n",
        report.objects,
        if report.objects == 1 { "" } else { "s" },
        n,
        if n == 1 { "" } else { "s" },
    ));
    out
}

impl Finding {
    /// `path: object: problem [rule]` and an indented `fix:` line.
    pub fn display<'a>(&'a self, path: &'a str) -> impl fmt::Display + 'a {
        struct D<'a>(&'a Finding, &'a str);
        impl fmt::Display for D<'_> {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                let (x, path) = (self.0, self.1);
                writeln!(f, "{path}: {}: {} [{}]", x.object, x.problem, x.rule.id())?;
                writeln!(f, "  fix: {}", x.fix)
            }
        }
        D(self, path)
    }
}

#[cfg(test)]
mod tests;
