//! Pod Security Standards, profile "restricted" (which includes "baseline"),
//! on one pod spec: the rules of
//! kubernetes.io/docs/concepts/security/pod-security-standards for
//! Kubernetes 1.29 and later, the same as `.ci/pod-security` checks in CI,
//! applied to the pod and to every container, init container and ephemeral
//! container. Pure: a pod spec in, the violations in words out.

use serde_json::Value;

/// Volume types "restricted" allows.
const RESTRICTED_VOLUMES: &[&str] = &[
    "configMap",
    "csi",
    "downwardAPI",
    "emptyDir",
    "ephemeral",
    "persistentVolumeClaim",
    "projected",
    "secret",
];

/// The sysctls "baseline" allows.
const SAFE_SYSCTLS: &[&str] = &[
    "kernel.shm_rmid_forced",
    "net.ipv4.ip_local_port_range",
    "net.ipv4.ip_unprivileged_port_start",
    "net.ipv4.tcp_syncookies",
    "net.ipv4.ping_group_range",
    "net.ipv4.ip_local_reserved_ports",
    "net.ipv4.tcp_keepalive_time",
    "net.ipv4.tcp_fin_timeout",
    "net.ipv4.tcp_keepalive_intvl",
    "net.ipv4.tcp_keepalive_probes",
];

const SELINUX_TYPES: &[&str] = &[
    "",
    "container_t",
    "container_init_t",
    "container_kvm_t",
    "container_engine_t",
];

/// Every container of a pod spec with its kind: `container NAME`,
/// `initContainer NAME`, `ephemeralContainer NAME`.
pub fn containers(spec: &Value) -> impl Iterator<Item = (String, &Value)> {
    ["initContainers", "containers", "ephemeralContainers"]
        .into_iter()
        .flat_map(move |key| {
            let kind = &key[..key.len() - 1];
            list(&spec[key])
                .iter()
                .map(move |c| (format!("{kind} `{}`", text(&c["name"])), c))
        })
}

/// The violations of "restricted" in one pod (its metadata and spec).
pub fn violations(meta: &Value, spec: &Value) -> Vec<String> {
    let mut v = Vec::new();
    if let Some(annotations) = meta["annotations"].as_object() {
        for (k, val) in annotations {
            let val = text(val);
            if k.starts_with("container.apparmor.security.beta.kubernetes.io/")
                && !(val == "runtime/default" || val.starts_with("localhost/"))
            {
                v.push(format!("annotation {k}={val} (baseline: AppArmor)"));
            }
        }
    }
    let psc = &spec["securityContext"];
    for f in ["hostNetwork", "hostPID", "hostIPC"] {
        if spec[f] == Value::Bool(true) {
            v.push(format!("{f}: true (baseline: host namespaces)"));
        }
    }
    if psc["windowsOptions"]["hostProcess"] == Value::Bool(true) {
        v.push("securityContext.windowsOptions.hostProcess (baseline)".to_string());
    }
    for vol in list(&spec["volumes"]) {
        let name = text(&vol["name"]);
        let Some(fields) = vol.as_object() else {
            continue;
        };
        for kind in fields.keys().filter(|k| *k != "name") {
            if !RESTRICTED_VOLUMES.contains(&kind.as_str()) {
                v.push(format!(
                    "volume `{name}`: type {kind} (restricted allows {})",
                    RESTRICTED_VOLUMES.join(", ")
                ));
            }
        }
    }
    for s in list(&psc["sysctls"]) {
        let name = text(&s["name"]);
        if !SAFE_SYSCTLS.contains(&name) {
            v.push(format!("sysctl {name} is not in the safe set (baseline)"));
        }
    }
    v.extend(common(psc).into_iter().map(|x| format!("pod {x}")));
    if psc["runAsUser"].as_i64() == Some(0) {
        v.push("pod securityContext.runAsUser: 0 (restricted)".to_string());
    }
    let pod_nonroot = psc["runAsNonRoot"] == Value::Bool(true);
    let pod_seccomp = psc["seccompProfile"]["type"].as_str();
    if let Some(t) = pod_seccomp.filter(|t| !matches!(*t, "RuntimeDefault" | "Localhost")) {
        v.push(format!(
            "pod seccompProfile.type {t} (restricted: RuntimeDefault or Localhost)"
        ));
    }
    for (where_, c) in containers(spec) {
        v.extend(
            container(c, pod_nonroot, pod_seccomp.is_some())
                .into_iter()
                .map(|x| format!("{where_}: {x}")),
        );
    }
    v
}

/// The violations of one container, given what the pod's securityContext
/// already settles.
fn container(c: &Value, pod_nonroot: bool, pod_seccomp: bool) -> Vec<String> {
    let mut v = Vec::new();
    let sc = &c["securityContext"];
    if sc["privileged"] == Value::Bool(true) {
        v.push("privileged (baseline)".to_string());
    }
    if sc["windowsOptions"]["hostProcess"] == Value::Bool(true) {
        v.push("windowsOptions.hostProcess (baseline)".to_string());
    }
    for p in list(&c["ports"]) {
        if !matches!(p["hostPort"].as_i64(), None | Some(0)) {
            v.push(format!("hostPort {} (baseline)", p["hostPort"]));
        }
    }
    if let Some(m) = sc["procMount"].as_str().filter(|m| *m != "Default") {
        v.push(format!("procMount {m} (baseline)"));
    }
    v.extend(common(sc));
    let caps = &sc["capabilities"];
    let added: Vec<&str> = list(&caps["add"])
        .iter()
        .map(text)
        .filter(|c| *c != "NET_BIND_SERVICE")
        .collect();
    if !added.is_empty() {
        v.push(format!(
            "capabilities.add {added:?} (restricted: only NET_BIND_SERVICE)"
        ));
    }
    if !list(&caps["drop"]).iter().any(|d| text(d) == "ALL") {
        v.push("capabilities.drop lacks ALL (restricted)".to_string());
    }
    if sc["allowPrivilegeEscalation"] != Value::Bool(false) {
        v.push("allowPrivilegeEscalation is not false (restricted)".to_string());
    }
    let nonroot = &sc["runAsNonRoot"];
    if *nonroot == Value::Bool(false) || !(pod_nonroot || *nonroot == Value::Bool(true)) {
        v.push("runAsNonRoot is not true, in the container or the pod (restricted)".to_string());
    }
    if sc["runAsUser"].as_i64() == Some(0) {
        v.push("runAsUser: 0 (restricted)".to_string());
    }
    match sc["seccompProfile"]["type"].as_str() {
        None if !pod_seccomp => {
            v.push("no seccompProfile, in the container or the pod (restricted)".to_string())
        }
        Some(t) if !matches!(t, "RuntimeDefault" | "Localhost") => v.push(format!(
            "seccompProfile.type {t} (restricted: RuntimeDefault or Localhost)"
        )),
        _ => {}
    }
    v
}

/// Baseline rules of the pod's and every container's securityContext.
fn common(sc: &Value) -> Vec<String> {
    let mut v = Vec::new();
    let se = &sc["seLinuxOptions"];
    if let Some(t) = se["type"].as_str().filter(|t| !SELINUX_TYPES.contains(t)) {
        v.push(format!("seLinuxOptions.type {t} (baseline)"));
    }
    for f in ["user", "role"] {
        if se[f].as_str().is_some_and(|s| !s.is_empty()) {
            v.push(format!("seLinuxOptions.{f} set (baseline)"));
        }
    }
    if let Some(t) = sc["appArmorProfile"]["type"]
        .as_str()
        .filter(|t| !matches!(*t, "RuntimeDefault" | "Localhost"))
    {
        v.push(format!("appArmorProfile.type {t} (baseline)"));
    }
    if sc["seccompProfile"]["type"].as_str() == Some("Unconfined") {
        v.push("seccompProfile Unconfined (baseline)".to_string());
    }
    v
}

/// A YAML sequence, or nothing.
pub fn list(v: &Value) -> &[Value] {
    v.as_array().map_or(&[], Vec::as_slice)
}

/// A YAML string, or "".
pub fn text(v: &Value) -> &str {
    v.as_str().unwrap_or("")
}
