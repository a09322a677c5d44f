//! The findings for each fixture of tests/kustomize/lint/ (one defect
//! each, `clean.yaml` none), as `lint` prints them: snapshots. Then, per
//! rule, what it reports and what it must not (a small pod built by
//! `pod_with`, the rules found by `rules_of`).

use super::*;

fn lint_fixture(path: &std::path::Path) -> (String, Report) {
    let text = std::fs::read_to_string(path).unwrap();
    let name = format!(
        "tests/kustomize/lint/{}",
        path.file_name().unwrap().to_string_lossy()
    );
    let report = lint(&name, &text).unwrap();
    (render(&name, &report), report)
}

#[test]
fn each_fixture_reports_its_defect_and_only_it() {
    insta::glob!("../../tests/kustomize/lint", "*.yaml", |path| {
        let (text, report) = lint_fixture(path);
        let stem = path.file_stem().unwrap().to_string_lossy().into_owned();
        let rules: Vec<&str> = report.findings.iter().map(|f| f.rule.id()).collect();
        if stem == "clean" {
            assert!(rules.is_empty(), "{text}");
        } else {
            assert!(!rules.is_empty(), "{stem}: no finding\n{text}");
            assert!(
                rules.iter().all(|r| *r == stem),
                "{stem}: {rules:?}\n{text}"
            );
        }
        insta::assert_snapshot!("lint__fixtures", text);
    });
}

#[test]
fn invalid_yaml_is_an_error_naming_the_file_and_line() {
    let e = lint("x.yaml", "kind: Pod\nspec: [\n").unwrap_err();
    assert!(e.to_string().starts_with("x.yaml:"), "{e}");
}

#[test]
fn lists_and_empty_documents_are_read() {
    let text = "---\n---\napiVersion: v1\nkind: List\nitems:\n  - apiVersion: v1\n    kind: Pod\n    metadata: {name: p}\n    spec:\n      containers: [{name: c}]\n";
    let r = lint("x.yaml", text).unwrap();
    assert_eq!(r.objects, 1);
    assert!(r.findings.iter().any(|f| f.rule == Rule::NoImage), "{r:?}");
}

#[test]
fn a_pdb_keeps_a_quorum_by_integer_percent_or_max_unavailable() {
    let sts = |n: i64| {
        format!(
            "apiVersion: apps/v1\nkind: StatefulSet\nmetadata: {{name: e}}\nspec:\n  replicas: {n}\n  podManagementPolicy: Parallel\n  template:\n    metadata: {{labels: {{app: e}}}}\n    spec:\n      containers: [{{name: etcd-readiness-exporter, image: x}}]\n"
        )
    };
    let pdb = |field: &str| {
        format!(
            "---\napiVersion: policy/v1\nkind: PodDisruptionBudget\nmetadata: {{name: b}}\nspec:\n  {field}\n  selector: {{matchExpressions: [{{key: app, operator: In, values: [e]}}]}}\n"
        )
    };
    let quorum_kept = |n: i64, field: &str| {
        let r = lint("x", &(sts(n) + &pdb(field))).unwrap();
        !r.findings.iter().any(|f| f.rule == Rule::PdbQuorum)
    };
    for n in [1, 3, 5, 7, 49] {
        assert!(quorum_kept(n, "minAvailable: 51%"), "{n}");
        assert!(
            quorum_kept(n, &format!("minAvailable: {}", n / 2 + 1)),
            "{n}"
        );
        assert!(
            quorum_kept(n, &format!("maxUnavailable: {}", (n - 1) / 2)),
            "{n}"
        );
    }
    assert!(!quorum_kept(3, "minAvailable: 1"));
    assert!(!quorum_kept(4, "minAvailable: 50%"));
    assert!(!quorum_kept(5, "maxUnavailable: 3"));
    assert!(!quorum_kept(5, "maxUnavailable: 50%"));
}

/// The known-bad pods of `.ci/pod-security --self-test`, each refused for
/// its rule; the compliant pod passes. Long because the table is one
/// mutation per rule, read side by side with that self-test.
#[test]
fn pod_security_refuses_each_known_bad_pod_as_ci_pod_security_does() {
    use serde_json::json;
    let good = json!({
        "metadata": {},
        "spec": {
            "securityContext": {"runAsNonRoot": true, "runAsUser": 1000, "seccompProfile": {"type": "RuntimeDefault"}},
            "containers": [{"name": "c", "image": "x", "ports": [{"containerPort": 80}],
                "securityContext": {"allowPrivilegeEscalation": false,
                    "capabilities": {"drop": ["ALL"], "add": ["NET_BIND_SERVICE"]}}}],
            "volumes": [{"name": "v", "configMap": {"name": "x"}}, {"name": "d", "emptyDir": {}}],
        }
    });
    let check = |p: &serde_json::Value| pod_security::violations(&p["metadata"], &p["spec"]);
    assert_eq!(check(&good), Vec::<String>::new());
    type Mutation = fn(&mut serde_json::Value);
    let bad: &[(&str, Mutation)] = &[
        ("hostNetwork", |p| p["spec"]["hostNetwork"] = json!(true)),
        ("hostPID", |p| p["spec"]["hostPID"] = json!(true)),
        ("hostIPC", |p| p["spec"]["hostIPC"] = json!(true)),
        ("privileged", |p| {
            p["spec"]["containers"][0]["securityContext"]["privileged"] = json!(true)
        }),
        ("hostPath", |p| {
            p["spec"]["volumes"]
                .as_array_mut()
                .unwrap()
                .push(json!({"name": "h", "hostPath": {"path": "/"}}))
        }),
        ("nfs", |p| {
            p["spec"]["volumes"]
                .as_array_mut()
                .unwrap()
                .push(json!({"name": "n", "nfs": {"server": "s", "path": "/"}}))
        }),
        ("hostPort", |p| {
            p["spec"]["containers"][0]["ports"][0]["hostPort"] = json!(80)
        }),
        ("SYS_ADMIN", |p| {
            p["spec"]["containers"][0]["securityContext"]["capabilities"]["add"] =
                json!(["SYS_ADMIN"])
        }),
        ("drop ALL", |p| {
            p["spec"]["containers"][0]["securityContext"]["capabilities"]["drop"] =
                json!(["NET_RAW"])
        }),
        ("allowPrivilegeEscalation", |p| {
            p["spec"]["containers"][0]["securityContext"]
                .as_object_mut()
                .unwrap()
                .remove("allowPrivilegeEscalation");
        }),
        ("runAsNonRoot", |p| {
            p["spec"]["securityContext"]
                .as_object_mut()
                .unwrap()
                .remove("runAsNonRoot");
        }),
        ("container runAsNonRoot false", |p| {
            p["spec"]["containers"][0]["securityContext"]["runAsNonRoot"] = json!(false)
        }),
        ("runAsUser 0", |p| {
            p["spec"]["containers"][0]["securityContext"]["runAsUser"] = json!(0)
        }),
        ("seccomp unset", |p| {
            p["spec"]["securityContext"]
                .as_object_mut()
                .unwrap()
                .remove("seccompProfile");
        }),
        ("seccomp Unconfined", |p| {
            p["spec"]["containers"][0]["securityContext"]["seccompProfile"] =
                json!({"type": "Unconfined"})
        }),
        ("sysctl", |p| {
            p["spec"]["securityContext"]["sysctls"] =
                json!([{"name": "kernel.msgmax", "value": "1"}])
        }),
        ("procMount", |p| {
            p["spec"]["containers"][0]["securityContext"]["procMount"] = json!("Unmasked")
        }),
        ("SELinux user", |p| {
            p["spec"]["containers"][0]["securityContext"]["seLinuxOptions"] =
                json!({"user": "system_u"})
        }),
        (
            "AppArmor",
            |p| {
                p["metadata"]["annotations"] =
                    json!({"container.apparmor.security.beta.kubernetes.io/c": "unconfined"})
            },
        ),
        ("hostProcess", |p| {
            p["spec"]["containers"][0]["securityContext"]["windowsOptions"] =
                json!({"hostProcess": true})
        }),
        ("init container", |p| {
            p["spec"]["initContainers"] = json!([{"name": "i", "image": "x"}])
        }),
    ];
    for (name, mutate) in bad {
        let mut p = good.clone();
        mutate(&mut p);
        assert!(!check(&p).is_empty(), "not refused: {name}");
    }
}

/// A 3-member Parallel StatefulSet named `etcd` whose etcd container gets
/// `etcd` (YAML lines under `- name: etcd`) and whose exporter gets
/// `exporter`, and further documents after it.
fn pod_with(etcd: &str, exporter: &str, more: &str) -> String {
    let indent = |s: &str| {
        s.lines()
            .map(|l| format!("          {l}\n"))
            .collect::<String>()
    };
    format!(
        "apiVersion: apps/v1\nkind: StatefulSet\nmetadata: {{name: etcd}}\nspec:\n  replicas: 3\n  podManagementPolicy: Parallel\n  template:\n    metadata: {{labels: {{app: etcd}}}}\n    spec:\n      containers:\n        - name: etcd\n          image: registry.k8s.io/etcd:3.5.16-0\n{}        - name: etcd-readiness-exporter\n          image: x\n{}{more}",
        indent(etcd),
        indent(exporter)
    )
}

/// The rules reported, but Pod Security's (these pods have no securityContext).
fn rules_of(text: &str) -> Vec<Rule> {
    let r = lint("x.yaml", text).unwrap();
    r.findings
        .iter()
        .map(|f| f.rule)
        .filter(|r| *r != Rule::PodSecurity)
        .collect()
}

#[test]
fn etcd_access_needs_tls_only_when_etcd_listens_on_https_only() {
    let tls = "command: [etcd, --listen-client-urls=https://0.0.0.0:2379]";
    assert_eq!(rules_of(&pod_with(tls, "", "")), [Rule::EtcdAccess]);
    let given = "env:\n  - {name: ERE_ETCD_ENDPOINT, value: \"https://127.0.0.1:2379\"}\n  - {name: ERE_ETCD_CACERT, value: /ca.crt}";
    assert_eq!(rules_of(&pod_with(tls, given, "")), []);
    // A plain listener next to the TLS one: the default endpoint reaches it.
    let both = "command: [etcd, --listen-client-urls, \"https://0.0.0.0:2379,http://127.0.0.1:2379\", --client-cert-auth]";
    assert_eq!(rules_of(&pod_with(both, "", "")), []);
    // Unset: etcd listens on http://localhost:2379, whatever it advertises.
    let unset = "command: [etcd, --advertise-client-urls=https://e:2379, --cert-file=/c]";
    assert_eq!(rules_of(&pod_with(unset, "", "")), []);
}

#[test]
fn flags_inside_a_shell_command_line_are_read() {
    let shell = "command: [/bin/sh, -ec, \"exec etcd --name $(HOSTNAME) --listen-client-urls https://0.0.0.0:2379\"]";
    assert_eq!(rules_of(&pod_with(shell, "", "")), [Rule::EtcdAccess]);
}

#[test]
fn a_client_certificate_whose_cn_is_the_user_is_enough_for_auth() {
    let etcd = "command: [etcd, --listen-client-urls=https://0.0.0.0:2379, --client-cert-auth=true, --auth-token=simple]";
    let tls = "args: [--etcd.endpoint=https://127.0.0.1:2379, --etcd.cacert=/ca]";
    let pair = "\n  - --etcd.cert=/c\n  - --etcd.key=/k";
    let pair_args = tls
        .replace(']', "")
        .replace("args: [", "args:\n  - ")
        .replace(", ", "\n  - ")
        + pair;
    assert_eq!(rules_of(&pod_with(etcd, &pair_args, "")), []);
    // Without client certificates a pair is no identity: a user is needed.
    let no_cca = "command: [etcd, --listen-client-urls=https://0.0.0.0:2379, --auth-token=simple]";
    assert_eq!(
        rules_of(&pod_with(no_cca, &pair_args, "")),
        [Rule::EtcdAccess]
    );
    let login = format!("{pair_args}\n  - --etcd.user=probe\n  - --etcd.password-file=/p");
    assert_eq!(rules_of(&pod_with(no_cca, &login, "")), []);
}

#[test]
fn settings_the_manifest_cannot_show_are_never_reported() {
    let etcd = "env:\n  - {name: ETCD_LISTEN_CLIENT_URLS, value: \"https://0.0.0.0:2379\"}\n  - {name: ALLOW_NONE_AUTHENTICATION, value: \"no\"}";
    assert_eq!(rules_of(&pod_with(etcd, "", "")), [Rule::EtcdAccess]);
    let from_secret = "envFrom:\n  - secretRef: {name: exporter-settings}";
    assert_eq!(rules_of(&pod_with(etcd, from_secret, "")), []);
    // Nor does an etcd whose settings come from an envFrom demand anything.
    let etcd_from = "envFrom:\n  - configMapRef: {name: etcd-settings}";
    assert_eq!(rules_of(&pod_with(etcd_from, "", "")), []);
    // A config file makes etcd ignore its flags and variables; it is not in the input.
    let by_file = format!("{etcd}\n  - {{name: ETCD_CONFIG_FILE, value: /etc/etcd.yaml}}");
    assert_eq!(rules_of(&pod_with(&by_file, "", "")), []);
}

#[test]
fn etcd_timing_is_reported_both_ways_by_flag_or_env() {
    let timing = |etcd: &str, exporter: &str| rules_of(&pod_with(etcd, exporter, ""));
    let env = |var: &str, v: &str| format!("env:\n  - {{name: {var}, value: \"{v}\"}}");
    let longer = env("ETCD_ELECTION_TIMEOUT", "5000");
    // etcd's longer election timeout, the exporter left at the default 1000.
    assert_eq!(timing(&longer, ""), [Rule::EtcdTiming]);
    // The same env entry, or the exporter's flag, makes them agree.
    assert_eq!(timing(&longer, &longer), []);
    assert_eq!(
        timing(&longer, "args: [serve, --etcd.election-timeout=5000]"),
        []
    );
    // The reverse: the exporter told more than etcd's default.
    assert_eq!(timing("command: [etcd]", &longer), [Rule::EtcdTiming]);
    // etcd's flag wins over its variable, the exporter's over its own.
    let flag_5000 = format!(
        "command: [etcd, --election-timeout, \"5000\"]\n{}",
        env("ETCD_ELECTION_TIMEOUT", "1000")
    );
    assert_eq!(timing(&flag_5000, ""), [Rule::EtcdTiming]);
    assert_eq!(timing(&flag_5000, &longer), []);
    let overridden = format!("args: [serve, --etcd.election-timeout=1000]\n{longer}");
    assert_eq!(timing(&longer, &overridden), [Rule::EtcdTiming]);
    // The heartbeat interval, each setting its own finding.
    let both = "command: [etcd, --heartbeat-interval=500, --election-timeout=5000]";
    assert_eq!(timing(both, ""), [Rule::EtcdTiming, Rule::EtcdTiming]);
    let given = "args: [serve, --etcd.heartbeat-interval=500, --etcd.election-timeout=5000]";
    assert_eq!(timing(both, given), []);
    // Inside a shell command line.
    let shell = "command: [/bin/sh, -ec, \"exec etcd --name $(HOSTNAME) --election-timeout=5000\"]";
    let custom =
        pod_with(shell, "", "").replace("registry.k8s.io/etcd:3.5.16-0", "example.com/custom:1");
    assert_eq!(rules_of(&custom), [Rule::EtcdTiming]);
}

#[test]
fn etcd_timing_the_manifest_cannot_show_is_never_reported() {
    let timing = |etcd: &str, exporter: &str| rules_of(&pod_with(etcd, exporter, ""));
    let longer = "env:\n  - {name: ETCD_ELECTION_TIMEOUT, value: \"5000\"}";
    // Defaults on both sides agree.
    assert_eq!(timing("", ""), []);
    assert_eq!(timing("command: [etcd, --name=e]", "args: [serve]"), []);
    // A valueFrom or an envFrom, on either side.
    let secret = "env:\n  - name: ETCD_ELECTION_TIMEOUT\n    valueFrom: {configMapKeyRef: {name: t, key: e}}";
    assert_eq!(timing(secret, ""), []);
    assert_eq!(timing(longer, secret), []);
    let from = "envFrom:\n  - configMapRef: {name: etcd-timing}";
    assert_eq!(timing(from, ""), []);
    assert_eq!(timing(longer, from), []);
    // Not a plain number: a $(VAR) reference, an octal or hex value, a bare flag.
    assert_eq!(
        timing("command: [etcd, \"--election-timeout=$(T)\"]", ""),
        []
    );
    assert_eq!(timing("command: [etcd, --election-timeout=05000]", ""), []);
    assert_eq!(timing("command: [etcd, --election-timeout=0x1388]", ""), []);
    assert_eq!(timing("command: [etcd, --election-timeout]", ""), []);
    // A config file may hold etcd's timing.
    let by_file = "command: [etcd, --config-file=/etc/etcd/etcd.yaml, --election-timeout=5000]";
    assert_eq!(timing(by_file, ""), []);
    let by_file_env = format!("{longer}\n  - {{name: ETCD_CONFIG_FILE, value: /e.yaml}}");
    assert_eq!(timing(&by_file_env, ""), []);
    // A container only named etcd runs a wrapper (etcd-druid's etcd-wrapper).
    let wrapper = format!("args: [start-etcd]\n{longer}");
    let wrapped =
        pod_with(&wrapper, "", "").replace("registry.k8s.io/etcd:3.5.16-0", "etcd-wrapper:v0.2.0");
    assert_eq!(rules_of(&wrapped), []);
}

#[test]
fn only_probes_that_need_a_quorum_are_liveness_findings() {
    let probe = |p: &str| rules_of(&pod_with(&format!("livenessProbe:\n  {p}"), "", ""));
    assert_eq!(probe("httpGet: {path: /livez, port: 2379}"), []);
    assert_eq!(
        probe("httpGet: {path: /health?serializable=true, port: 2381}"),
        []
    );
    assert_eq!(
        probe("httpGet: {path: \"/readyz?exclude=linearizable_read\", port: 2381}"),
        []
    );
    assert_eq!(
        probe("httpGet: {path: /health, port: 2381}"),
        [Rule::LivenessQuorum]
    );
    assert_eq!(
        probe("httpGet: {path: /readyz, port: 2381}"),
        [Rule::LivenessQuorum]
    );
    assert_eq!(
        probe("httpGet: {path: /readyz/linearizable_read, port: 2381}"),
        [Rule::LivenessQuorum]
    );
    assert_eq!(
        probe("httpGet: {path: /readyz/serializable_read, port: 2381}"),
        []
    );
    assert_eq!(
        probe("httpGet: {path: /readyz, port: 9379}"),
        [Rule::LivenessQuorum]
    );
    assert_eq!(
        probe("exec: {command: [/opt/bitnami/scripts/etcd/healthcheck.sh]}"),
        [Rule::LivenessQuorum]
    );
    assert_eq!(probe("exec: {command: [etcdctl, endpoint, status]}"), []);
    let sidecar = "livenessProbe: {exec: {command: [etcdctl, endpoint, health]}}";
    assert_eq!(rules_of(&pod_with("", sidecar, "")), []);
}

#[test]
fn ordered_ready_is_reported_for_etcds_own_quorum_gated_probe_without_the_exporter() {
    let sts = |probe: &str| {
        format!(
            "apiVersion: apps/v1\nkind: StatefulSet\nmetadata: {{name: e}}\nspec:\n  replicas: 3\n  template:\n    spec:\n      containers:\n        - name: etcd\n          image: quay.io/coreos/etcd:v3.5.30\n          readinessProbe: {{httpGet: {{path: {probe}, port: 2379}}}}\n"
        )
    };
    assert_eq!(rules_of(&sts("/health")), [Rule::OrderedReady]);
    assert_eq!(rules_of(&sts("/readyz")), [Rule::OrderedReady]);
    assert_eq!(rules_of(&sts("/livez")), []);
}

#[test]
fn budgets_overlap_only_on_the_same_pods_in_the_same_namespace() {
    let pdb = |name: &str, ns: &str, app: &str| {
        format!(
            "---\napiVersion: policy/v1\nkind: PodDisruptionBudget\nmetadata: {{name: {name}, namespace: {ns}}}\nspec:\n  minAvailable: 51%\n  selector: {{matchLabels: {{app: {app}}}}}\n"
        )
    };
    let sts = pod_with("", "", "").replace(
        "metadata: {name: etcd}",
        "metadata: {name: etcd, namespace: a}",
    );
    let two = format!(
        "{sts}{}{}",
        pdb("one", "a", "etcd"),
        pdb("two", "a", "etcd")
    );
    assert_eq!(rules_of(&two), [Rule::PdbOverlap]);
    let elsewhere = format!(
        "{sts}{}{}",
        pdb("one", "a", "etcd"),
        pdb("two", "b", "etcd")
    );
    assert_eq!(rules_of(&elsewhere), []);
    let others = format!("{sts}{}{}", pdb("one", "a", "etcd"), pdb("two", "a", "web"));
    assert_eq!(rules_of(&others), []);
}

#[test]
fn a_networkpolicy_opens_a_port_by_number_range_name_or_a_rule_without_ports() {
    let etcd =
        "ports:\n  - {name: client, containerPort: 2379}\n  - {name: br, containerPort: 8080}";
    let policy = |ingress: &str| {
        pod_with(
            etcd,
            "",
            &format!(
                "---\napiVersion: networking.k8s.io/v1\nkind: NetworkPolicy\nmetadata: {{name: np}}\nspec:\n  podSelector: {{}}\n  ingress: {ingress}\n"
            ),
        )
    };
    assert_eq!(
        rules_of(&policy("[{ports: [{port: 2379}]}]")),
        [Rule::NetworkPolicyPort]
    );
    assert_eq!(
        rules_of(&policy("[{ports: [{port: 2379}, {port: br}]}]")),
        []
    );
    assert_eq!(
        rules_of(&policy("[{ports: [{port: 2000, endPort: 9000}]}]")),
        []
    );
    assert_eq!(rules_of(&policy("[{from: [{podSelector: {}}]}]")), []);
    assert_eq!(
        rules_of(&policy(
            "[{ports: [{port: 2379}, {port: 8080, protocol: UDP}]}]"
        )),
        [Rule::NetworkPolicyPort]
    );
    // The exporter's own ports are not checked: its probe port is meant to be closed.
    assert_eq!(
        rules_of(&policy("[{ports: [{port: 2379}, {port: 8080}]}]").replace(
            "          image: x\n",
            "          image: x\n          ports: [{containerPort: 9380}]\n"
        )),
        []
    );
}

/// kubeadm's etcd: a static Pod in kube-system, on the host's network with
/// hostPath volumes and root by design; kube-system does not enforce
/// "restricted", so Pod Security is not its standard — every other rule is.
#[test]
fn a_control_plane_static_pod_is_not_held_to_restricted_but_to_every_other_rule() {
    let pod = |ns: &str, startup: &str| {
        format!(
            "apiVersion: v1\nkind: Pod\nmetadata: {{name: etcd, namespace: {ns}}}\nspec:\n  hostNetwork: true\n  volumes: [{{name: d, hostPath: {{path: /var/lib/etcd}}}}]\n  containers:\n    - name: etcd\n      image: registry.k8s.io/etcd:3.6.9-0\n      startupProbe: {{httpGet: {{host: 127.0.0.1, path: {startup}, port: 2381}}}}\n"
        )
    };
    let rules = |text: &str| -> Vec<Rule> {
        lint("x.yaml", text)
            .unwrap()
            .findings
            .iter()
            .map(|f| f.rule)
            .collect()
    };
    assert_eq!(rules(&pod("kube-system", "/livez")), []);
    assert_eq!(
        rules(&pod("kube-system", "/readyz")),
        [Rule::LivenessQuorum]
    );
    assert!(rules(&pod("etcd", "/livez")).contains(&Rule::PodSecurity));
}
