#!/usr/bin/env python3
"""Check the Kubernetes manifests in deploy/kubernetes/ against the exporter's real flags (known_flags.txt).

Python 3 standard library only. Usage (from the repository root):

    tests/monitoring/check_manifests.py              # check, exit 1 on problems
    tests/monitoring/check_manifests.py --self-test  # prove the checks catch breakage

What it checks:
- every `--flag` in the manifests is a flag of the exporter (tests/monitoring/known_flags.txt),
  except in the command/args of containers that run another program (etcd), which
  are listed as skipped; every ERE_* environment variable maps to a known flag;
- there is at least one exporter container (name or image contains `etcd-readiness`);
- no volumeMount of the policy ConfigMap uses subPath/subPathExpr (a subPath mount
  never sees ConfigMap updates), and the --policy file lies directly in the
  directory where that ConfigMap is mounted, under a key the ConfigMap has;
- the ConfigMap's `policy` equals one of the files in policies/;
- the PrometheusRule is no longer a manifest here: the mixin renders it to
  dashboards/prometheusrule.yaml (.ci/mixin --check guards its drift); one
  still found under deploy/ is reported as a note naming it as stale.
"""

import argparse
import copy
import glob
import os
import posixpath
import re
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)
from check_dashboard import YamlError, load_yaml  # noqa: E402

FLAG_RE = re.compile(r"(?<![\w-])(--[a-z0-9][a-z0-9.\-]*)")
EXPORTER_MARK = "etcd-readiness"


def read_flags(path):
    with open(path) as f:
        return {ln.strip() for ln in f if ln.strip().startswith("--")}


def env_name(flag):
    return "ERE_" + re.sub(r"[.\-]", "_", flag[2:]).upper()


def pod_specs(doc):
    """(where, pod spec) for workloads and Pods in a document."""
    kind = doc.get("kind")
    name = (doc.get("metadata") or {}).get("name")
    if kind == "Pod":
        yield f"Pod/{name}", doc.get("spec") or {}
    elif kind in ("StatefulSet", "Deployment", "DaemonSet", "ReplicaSet", "Job"):
        yield f"{kind}/{name}", ((doc.get("spec") or {}).get("template") or {}).get("spec") or {}
    elif kind == "CronJob":
        job = ((doc.get("spec") or {}).get("jobTemplate") or {}).get("spec") or {}
        yield f"CronJob/{name}", (job.get("template") or {}).get("spec") or {}


def is_exporter(container):
    return EXPORTER_MARK in str(container.get("name", "")) or EXPORTER_MARK in str(container.get("image", ""))


def strings(node, path=""):
    """Every string value in a parsed document, with its path."""
    if isinstance(node, dict):
        for k, v in node.items():
            yield from strings(v, f"{path}.{k}")
    elif isinstance(node, list):
        for i, v in enumerate(node):
            yield from strings(v, f"{path}[{i}]")
    elif isinstance(node, str):
        yield path, node


def check(files, known_flags, policies, alerts_doc):
    """files: {basename: [documents]}. Returns (problems, notes)."""
    problems, notes = [], []
    exporters = 0
    configmaps = {}
    for fname, docs in files.items():
        for doc in docs:
            if doc.get("kind") == "ConfigMap":
                configmaps[(doc.get("metadata") or {}).get("name")] = doc.get("data") or {}

    for fname, docs in files.items():
        for di, doc in enumerate(docs):
            foreign = set()  # ids of the args/command lists of non-exporter containers
            for where, spec in pod_specs(doc):
                volumes = {v.get("name"): v for v in spec.get("volumes") or []}
                containers = (spec.get("containers") or []) + (spec.get("initContainers") or [])
                for c in containers:
                    cwhere = f"{fname}: {where} container {c.get('name')}"
                    if not is_exporter(c):
                        for key in ("command", "args"):
                            if c.get(key):
                                foreign.add(id(c[key]))
                        n = sum(len(FLAG_RE.findall(a)) for a in (c.get("command") or []) + (c.get("args") or [])
                                if isinstance(a, str))
                        notes.append(f"{cwhere}: not the exporter, its {n} flag(s) skipped")
                        continue
                    exporters += 1
                    for e in c.get("env") or []:
                        n = str(e.get("name", ""))
                        if n.startswith("ERE_") and n not in {env_name(f) for f in known_flags}:
                            problems.append(f"{cwhere}: env {n} is not the ERE_ form of any known flag")
                    args = [a for a in (c.get("command") or []) + (c.get("args") or []) if isinstance(a, str)]
                    policy_path = None
                    for a in args:
                        if a.startswith("--policy="):
                            policy_path = a.split("=", 1)[1]
                    for e in c.get("env") or []:
                        if e.get("name") == env_name("--policy") and "value" in e:
                            policy_path = e["value"]
                    mounts = c.get("volumeMounts") or []
                    policy_mounts = []
                    for m in mounts:
                        vol = volumes.get(m.get("name")) or {}
                        cm = (vol.get("configMap") or {}).get("name")
                        if cm is None:
                            continue
                        if "policy" in configmaps.get(cm, {}) or "policy" in str(m.get("name")) or (
                                policy_path and policy_path.startswith(str(m.get("mountPath")))):
                            policy_mounts.append((m, cm))
                            if "subPath" in m or "subPathExpr" in m:
                                problems.append(f"{cwhere}: volumeMount {m.get('name')} of the policy ConfigMap "
                                                f"{cm} uses subPath; subPath mounts never see ConfigMap updates")
                    if policy_path is None:
                        problems.append(f"{cwhere}: no --policy given")
                    elif not policy_mounts:
                        problems.append(f"{cwhere}: --policy={policy_path} but no ConfigMap volume is mounted for it")
                    else:
                        d, base = posixpath.split(policy_path)
                        ok = [m for m, cm in policy_mounts
                              if posixpath.normpath(str(m.get("mountPath"))) == posixpath.normpath(d)
                              and base in configmaps.get(cm, {base: None})]
                        if not ok:
                            problems.append(f"{cwhere}: --policy={policy_path} is not a key directly inside a "
                                            f"ConfigMap directory mount ({[m.get('mountPath') for m, _ in policy_mounts]})")

            for path, text in strings(doc):
                flags = FLAG_RE.findall(text)
                if not flags:
                    continue
                # Skip strings that belong to a foreign container's command/args.
                if _in_foreign(doc, path, foreign):
                    continue
                for flag in flags:
                    name = flag.split("=", 1)[0]
                    if name not in known_flags:
                        problems.append(f"{fname}: document {di + 1} {path}: flag {name} is not in known_flags.txt")
    if exporters == 0:
        problems.append("no exporter container found (name or image containing 'etcd-readiness')")

    if "policy" not in {k for data in configmaps.values() for k in data}:
        problems.append("no ConfigMap with a `policy` key")
    for name, data in configmaps.items():
        if "policy" in data and data["policy"] not in policies.values():
            problems.append(f"ConfigMap {name}: `policy` differs from every file in policies/ "
                            f"({', '.join(sorted(policies))})")

    for fname, docs in files.items():
        for doc in docs:
            if doc.get("kind") == "PrometheusRule":
                # The mixin renders it into the demo overlay too (kustomize
                # reads no file outside its directory); .ci/mixin --check
                # catches drift, and so does this.
                if doc.get("spec") != alerts_doc:
                    problems.append(f"{fname}: its PrometheusRule differs from the mixin's dashboards/alerts.yaml "
                                    "(run `bash .ci/mixin`)")
    return problems, notes


def _in_foreign(doc, path, foreign):
    """Whether the string at `path` sits in one of the lists whose ids are in `foreign`."""
    node = doc
    for part in re.findall(r"\.([^.\[]+)|\[(\d+)\]", path):
        key, idx = part
        if id(node) in foreign:
            return True
        node = node[key] if key else node[int(idx)]
    return False


def load_all(directory):
    files = {}
    for p in sorted(glob.glob(os.path.join(directory, "*.yaml"))):
        with open(p) as f:
            files[os.path.basename(p)] = load_yaml(f.read())
    return files


def self_test(files, known, policies, alerts_doc):
    def exporter(fs):
        for docs in fs.values():
            for doc in docs:
                for _, spec in pod_specs(doc):
                    for c in spec.get("containers") or []:
                        if is_exporter(c):
                            return c, spec
        raise AssertionError("no exporter container")

    def add_subpath(fs):
        c, _ = exporter(fs)
        for m in c["volumeMounts"]:
            if m["name"] == "policy":
                m["subPath"] = "policy"
                m["mountPath"] = m["mountPath"] + "/policy"

    def unknown_env(fs):
        c, _ = exporter(fs)
        c.setdefault("env", []).append({"name": "ERE_ETCD_ENDPONT", "value": "x"})

    def policy_elsewhere(fs):
        c, _ = exporter(fs)
        c["args"] = [a if not a.startswith("--policy=") else "--policy=/tmp/policy" for a in c["args"]]

    def edit_policy(fs):
        for docs in fs.values():
            for doc in docs:
                if doc.get("kind") == "ConfigMap":
                    doc["data"]["policy"] += "check extra: leader\n"

    cases = {
        "unknown flag": lambda fs: exporter(fs)[0]["args"].append("--etcd.endpiont=https://x"),
        "etcd-style flag in the exporter": lambda fs: exporter(fs)[0]["args"].append("--listen-client-urls=x"),
        "subPath policy mount": add_subpath,
        "unknown ERE_ env": unknown_env,
        "--policy outside the mount": policy_elsewhere,
        "ConfigMap policy edited": edit_policy,
        "no exporter container": lambda fs: exporter(fs)[0].update(name="x", image="y"),
    }
    failures = []
    base, _ = check(files, known, policies, alerts_doc)
    if base:
        failures.append(f"the unmodified manifests already have problems: {base}")
    for name, mutate in cases.items():
        fs = copy.deepcopy(files)
        mutate(fs)
        if not check(fs, known, policies, alerts_doc)[0]:
            failures.append(f"not detected: {name}")
    return failures, len(cases)


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--manifests", default=os.path.join(ROOT, "deploy", "kubernetes"))
    ap.add_argument("--known-flags", default=os.path.join(HERE, "known_flags.txt"))
    ap.add_argument("--policies", default=os.path.join(ROOT, "policies"))
    ap.add_argument("--alerts", default=os.path.join(ROOT, "dashboards", "alerts.yaml"))
    ap.add_argument("--self-test", action="store_true")
    ap.add_argument("-v", "--verbose", action="store_true")
    args = ap.parse_args(argv)
    try:
        files = load_all(args.manifests)
        with open(args.alerts) as f:
            alerts_doc = load_yaml(f.read())[0]
    except (OSError, YamlError) as e:
        print(f"cannot read manifests: {e}", file=sys.stderr)
        return 1
    if not files:
        print(f"no *.yaml in {args.manifests}", file=sys.stderr)
        return 1
    known = read_flags(args.known_flags)
    policies = {}
    for p in sorted(glob.glob(os.path.join(args.policies, "*.policy"))):
        with open(p) as f:
            policies[os.path.basename(p)] = f.read()

    if args.self_test:
        failures, n = self_test(files, known, policies, alerts_doc)
        for f in failures:
            print(f"SELF-TEST FAILED: {f}", file=sys.stderr)
        if failures:
            return 1
        print(f"self-test: all {n} deliberate breakages detected")
        return 0

    problems, notes = check(files, known, policies, alerts_doc)
    for n in notes:
        if args.verbose or "PrometheusRule in deploy/" in n:
            print(("WARNING: " if "STALE" in n else "") + n)
    for p in problems:
        print(p, file=sys.stderr)
    if problems:
        print(f"FAILED: {len(problems)} problem(s)", file=sys.stderr)
        return 1
    print(f"OK: {len(files)} manifest files, {sum(len(d) for d in files.values())} documents")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
