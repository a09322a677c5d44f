#!/usr/bin/env python3
"""One look at a real Prometheus: do the dashboard's cluster row and the
cluster alerts show what a 3-member (N-member) etcd cluster in a given state
must show? prometheus_it.sh polls this until it passes or its deadline ends.

Python 3 standard library only. Usage:

    cluster_checks.py PROM_URL QUERIES_JSON MEMBERS STATE

QUERIES_JSON is the output of `check_dashboard.py --emit-queries` (so the
expressions are exactly the dashboard's, variables at All); STATE is one of

    healthy  one cluster, MEMBERS members, quorum MEMBERS//2+1, all ready, all
             on one policy version, MEMBERS rows in the members table; no
             EtcdCluster* alert firing;
    member   as healthy, but MEMBERS-1 ready (one member stopped; its exporter
             keeps its identity) and no EtcdCluster* alert firing;
    drift    as healthy, but two policy versions (MEMBERS-1 and 1 members) and
             EtcdClusterPolicyDrift firing;
    quorum   0 ready, members and quorum unchanged (a stopped member keeps its
             identity), EtcdClusterReadyMembersBelowQuorum and
             EtcdClusterAllMembersNotReady firing.

In `quorum` the dashboard's "Readiness transitions" annotation and in `drift`
its "Policy reloads" annotation must mark an event (their queries return data).

The rules Prometheus evaluates are the mixin's, rendered with short `for:`
(run.sh), so an alert fires within seconds of its condition.

Exit 0 when every expectation holds; else 1, printing each that does not.
"""

import json
import sys
import urllib.error
import urllib.parse
import urllib.request

READY = "panel:Ready members vs quorum:A"
QUORUM = "panel:Ready members vs quorum:B"
MEMBERS = "panel:Ready members vs quorum:C"
POLICY = "panel:Members per policy version:A"
TABLE = "panel:Members of the cluster:A"
CLUSTERS = "variable:cluster_id"
ALERTS = ("EtcdClusterReadyMembersBelowQuorum", "EtcdClusterAllMembersNotReady", "EtcdClusterPolicyDrift")


def get(url, params=None):
    if params:
        url += "?" + urllib.parse.urlencode(params)
    try:
        with urllib.request.urlopen(url, timeout=5) as r:
            return json.load(r)
    except urllib.error.HTTPError as e:
        return json.load(e)


def main(argv):
    if len(argv) != 4 or argv[3] not in ("healthy", "member", "drift", "quorum"):
        print(__doc__.split("\n\n")[1], file=sys.stderr)
        return 2
    prom, queries_file, n, state = argv[0], argv[1], int(argv[2]), argv[3]
    exprs = {q["id"]: q["expr"] for q in json.load(open(queries_file))}
    problems = []

    def series(qid):
        if qid not in exprs:
            problems.append(f"{qid}: no such query in the dashboard (renamed panel?)")
            return []
        resp = get(f"{prom}/api/v1/query", {"query": exprs[qid]})
        if resp.get("status") != "success":
            problems.append(f"{qid}: {resp.get('error')}")
            return []
        return resp["data"]["result"]

    def one_value(qid, want):
        got = series(qid)
        values = [float(s["value"][1]) for s in got]
        if values != [want]:
            problems.append(f"{qid}: want one series = {want}, got {values or 'no data'}")

    quorum = n // 2 + 1
    ready_now = {"quorum": 0, "member": n - 1}.get(state, n)
    one_value(READY, ready_now)
    one_value(QUORUM, quorum)
    one_value(MEMBERS, n)

    clusters = {s["metric"].get("cluster_id") for s in series(CLUSTERS)}
    if len(clusters) != 1 or None in clusters:
        problems.append(f"{CLUSTERS}: want one cluster_id, got {sorted(map(str, clusters))}")

    versions = sorted(float(s["value"][1]) for s in series(POLICY))
    want_versions = sorted([float(n - 1), 1.0]) if state == "drift" else [float(n)]
    if versions != want_versions:
        problems.append(f"{POLICY}: want members per version {want_versions}, got {versions}")

    rows = series(TABLE)
    ids = {s["metric"].get("member_id") for s in rows}
    names = {s["metric"].get("name") for s in rows}
    ready = sorted(float(s["value"][1]) for s in rows)
    want_ready = sorted([1.0] * ready_now + [0.0] * (n - ready_now))
    if len(rows) != n or len(ids) != n or len(names) != n or "" in names or ready != want_ready:
        problems.append(f"{TABLE}: want {n} members with distinct IDs and names, ready {want_ready}; "
                        f"got {[(s['metric'].get('name'), s['metric'].get('member_id'), s['value'][1]) for s in rows]}")

    # The dashboard's annotations mark what the faults did: readiness flips
    # while the quorum is lost, the reload of the changed policy.
    for state_, qid in (("quorum", "annotation:Readiness transitions"), ("drift", "annotation:Policy reloads")):
        if state == state_ and not series(qid):
            problems.append(f"{qid}: no event marked")

    resp = get(f"{prom}/api/v1/alerts")
    firing = {a["labels"]["alertname"] for a in resp.get("data", {}).get("alerts", [])
              if a["state"] == "firing" and a["labels"]["alertname"] in ALERTS}
    want_firing = {
        "healthy": set(),
        "member": set(),
        "drift": {"EtcdClusterPolicyDrift"},
        "quorum": {"EtcdClusterReadyMembersBelowQuorum", "EtcdClusterAllMembersNotReady"},
    }[state]
    if firing != want_firing:
        problems.append(f"alerts: want firing {sorted(want_firing)}, got {sorted(firing)}")

    for p in problems:
        print(f"  not yet: {p}")
    if not problems:
        print(f"ok:   cluster state {state}: {n} members, quorum {quorum}, "
              f"{ready_now} ready, policy versions {versions}, firing {sorted(firing)}")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
