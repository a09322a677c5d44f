#!/usr/bin/env bash
# Real-Prometheus integration test of the dashboard and alert rules against a
# running etcd-readiness-exporter.
#
# Usage (from anywhere):
#   tests/monitoring/prometheus_it.sh [--cluster-members N [--fault-script FILE]] HOST:PORT...
#   HOST:PORT  each exporter's --web.listen-address as reachable from here,
#              e.g. 127.0.0.1:9379. Each exporter must be connected to a running
#              etcd member (a fresh single-member etcd is enough); backup and owner
#              sources need not be configured.
#   --cluster-members N  the exporters watch the N members of one etcd cluster:
#              check the values of the dashboard's cluster row (step 7).
#   --fault-script FILE  with --cluster-members: FILE drift|quorum|heal makes
#              one member's policy differ / stops enough etcd members that none
#              is ready / undoes both; the cluster alerts must fire (step 8).
# Environment: PROMETHEUS (default /usr/bin/prometheus), PROMTOOL (/usr/bin/promtool),
#              IT_DEADLINE_SECONDS (default 90) bounds every wait.
#
# What it does:
#  1. scrapes each exporter once: `promtool check metrics` must print nothing, exit 0;
#  2. sends a few /readyz and /livez requests (so the HTTP metrics have series);
#  3. starts a real Prometheus on a free loopback port (temp storage, scrape every
#     1s, job `etcd-readiness`, alerts.yaml as rule file, and with --fault-script a
#     copy of the EtcdCluster* alerts with `for: 3s` and the label for_test="short"),
#     waits for every target to be up and for at least 5 scrapes of each;
#  4. runs every expression from `check_dashboard.py --emit-queries` through
#     /api/v1/query: each must parse (status success), and each dashboard query must
#     return data, except the EXCEPTIONS below (each with its reason);
#  5. checks that Prometheus loaded every rule with health ok, and that the alerts
#     that must be quiet for a healthy exporter are neither pending nor firing;
#  6. runs `promtool check rules` and `promtool test rules`;
#  7. (--cluster-members N) the cluster row's queries give one cluster with N
#     members, quorum N/2+1, N ready, N members on one policy version, N rows in
#     the members table;
#  8. (--fault-script) quorum: EtcdClusterReadyMembersBelowQuorum and
#     EtcdClusterAllMembersNotReady (short copies) fire, 0 ready, members and
#     quorum unchanged; heal: as in 7, none firing; drift: EtcdClusterPolicyDrift
#     (short copy) fires and the policy panel shows two versions; heal again.
# Every wait has a deadline (IT_DEADLINE_SECONDS, per phase).
# Prometheus is killed on exit (trap), whatever happens. Exit 0 only if all pass.
set -euo pipefail

usage() {
    echo "usage: $0 [--cluster-members N [--fault-script FILE]] HOST:PORT...   (exporters, e.g. 127.0.0.1:9379)" >&2
    exit 2
}
CLUSTER_MEMBERS=
FAULT_SCRIPT=
while [ $# -gt 0 ]; do
    case "$1" in
        --cluster-members) [ $# -ge 2 ] && [[ "$2" =~ ^[1-9][0-9]*$ ]] || usage; CLUSTER_MEMBERS=$2; shift 2 ;;
        --fault-script) [ $# -ge 2 ] && [ -x "$2" ] || usage; FAULT_SCRIPT=$2; shift 2 ;;
        --*) usage ;;
        *) break ;;
    esac
done
[ $# -ge 1 ] || usage
for e in "$@"; do [[ "$e" == *:* ]] || usage; done
if [ -n "$FAULT_SCRIPT" ] && [ -z "$CLUSTER_MEMBERS" ]; then usage; fi
EXPORTERS=("$@")
EXPORTER=$1
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
PROMETHEUS=${PROMETHEUS:-/usr/bin/prometheus}
PROMTOOL=${PROMTOOL:-/usr/bin/promtool}
DEADLINE_SECONDS=${IT_DEADLINE_SECONDS:-90}
DASHBOARD=$ROOT/dashboards/etcd-readiness.json
ALERTS=$ROOT/dashboards/alerts.yaml
ALERTS_TEST=$ROOT/dashboards/alerts.test.yaml

# Dashboard queries allowed to return no data in a healthy run (run.sh configures every
# source on all three exporters; a standalone run against one exporter may not).
# Format: <query id as printed by check_dashboard.py --emit-queries><TAB><reason>.
# Every id here must exist (a renamed panel makes the test fail, not skip).
EXCEPTIONS=$(cat <<'EOF'
panel:Failing checks now:A	lists only checks that are not passing; empty when the member is healthy
panel:Check transitions:A	per-check transition counters may only get a series at a check's first state change
panel:Revisions not in any backup (rev_lag):A	rev_lag comes from the backup source, not configured without --backup.url
panel:Snapshot age:A	snapshot_age comes from the backup source, not configured without --backup.url
panel:Snapshot age:B	full_snapshot_age comes from the backup source, not configured without --backup.url
panel:Owner check:A	owner_ok comes from the owner source, not configured without --owner.name/--owner.id
panel:Policy reloads by result:A	reloads_total{result} may only get a series at the first reload after start
panel:Sample errors per source:A	errors_total{source,reason} gets a series at the first error; none in a healthy run
EOF
)
# Alerts that must be neither pending nor firing while the exporters are scraped and healthy.
QUIET_ALERTS="EtcdReadinessExporterDown EtcdReadinessPolicyReloadFailing EtcdOwnerCheckFailing EtcdRevisionLagHigh
  EtcdClusterReadyMembersBelowQuorum EtcdClusterAllMembersNotReady EtcdClusterPolicyDrift"

TMP=$(mktemp -d "${TMPDIR:-/tmp}/prometheus-it.XXXXXX")
PROM_PID=
cleanup() {
    if [ -n "$PROM_PID" ] && kill -0 "$PROM_PID" 2>/dev/null; then
        kill "$PROM_PID" 2>/dev/null || true
        for _ in $(seq 1 50); do kill -0 "$PROM_PID" 2>/dev/null || break; sleep 0.1; done
        kill -9 "$PROM_PID" 2>/dev/null || true
        wait "$PROM_PID" 2>/dev/null || true
    fi
    rm -rf "$TMP"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

FAILURES=0
fail() { echo "FAIL: $*" >&2; FAILURES=$((FAILURES + 1)); }
pass() { echo "ok:   $*"; }
deadline=$((SECONDS + DEADLINE_SECONDS))
# wait_for DESCRIPTION COMMAND...: poll COMMAND until it succeeds or the deadline passes.
wait_for() {
    local what=$1; shift
    until "$@"; do
        if [ "$SECONDS" -ge "$deadline" ]; then
            echo "FAIL: timed out after ${DEADLINE_SECONDS}s waiting for $what" >&2
            [ -f "$TMP/prometheus.log" ] && tail -n 20 "$TMP/prometheus.log" >&2
            exit 1
        fi
        if [ -n "$PROM_PID" ] && ! kill -0 "$PROM_PID" 2>/dev/null; then
            echo "FAIL: prometheus exited while waiting for $what" >&2
            tail -n 20 "$TMP/prometheus.log" >&2
            exit 1
        fi
        sleep 0.5
    done
}

# --- 1. promtool check metrics on a real scrape of each exporter ------------------
for EXPORTER in "${EXPORTERS[@]}"; do
    if ! curl -sS --max-time 5 -o "$TMP/scrape.txt" "http://$EXPORTER/metrics"; then
        echo "FAIL: cannot scrape http://$EXPORTER/metrics" >&2
        exit 1
    fi
    set +e
    "$PROMTOOL" check metrics <"$TMP/scrape.txt" >"$TMP/lint.txt" 2>&1
    lint_rc=$?
    set -e
    if [ "$lint_rc" -ne 0 ] || [ -s "$TMP/lint.txt" ]; then
        fail "promtool check metrics $EXPORTER (exit $lint_rc):"; sed 's/^/      /' "$TMP/lint.txt" >&2
    else
        pass "promtool check metrics $EXPORTER: no problems in $(grep -vc '^#' "$TMP/scrape.txt") samples"
    fi
done

# --- 2. probe traffic, so the http_* series exist --------------------------------
for EXPORTER in "${EXPORTERS[@]}"; do
    for _ in 1 2 3; do
        for path in /readyz /livez; do
            curl -s --max-time 2 -o /dev/null "http://$EXPORTER$path" || fail "GET $EXPORTER$path did not answer"
        done
    done
done
TARGETS=$(printf "'%s', " "${EXPORTERS[@]}")

# --- 3. a real Prometheus scraping the exporter ----------------------------------
PORT=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
PROM=http://127.0.0.1:$PORT
cat >"$TMP/prometheus.yml" <<EOF
global:
  scrape_interval: 1s
  scrape_timeout: 1s
  evaluation_interval: 1s
rule_files:
  - $ALERTS
$([ -n "$FAULT_SCRIPT" ] && echo "  - $TMP/short_for_rules.yml")
scrape_configs:
  - job_name: etcd-readiness
    static_configs:
      - targets: [${TARGETS%, }]
EOF
if [ -n "$FAULT_SCRIPT" ]; then
    # The cluster alerts as they are, but with `for: 3s`, so that the fault
    # phase sees them fire within seconds (JSON is YAML).
    python3 - "$ALERTS" "$TMP/short_for_rules.yml" "$HERE" <<'PY'
import json, sys
sys.path.insert(0, sys.argv[3])
from check_dashboard import alert_rules, load_yaml
doc = load_yaml(open(sys.argv[1]).read())[0]
rules = []
for _, rule in alert_rules(doc):
    if str(rule.get("alert", "")).startswith("EtcdCluster"):
        rule = dict(rule, labels=dict(rule.get("labels") or {}, for_test="short"))
        rule["for"] = "3s"
        rules.append(rule)
if len(rules) < 3:
    sys.exit(f"expected the 3 EtcdCluster* alerts in {sys.argv[1]}, found {len(rules)}")
json.dump({"groups": [{"name": "etcd-readiness-cluster-short-for", "rules": rules}]}, open(sys.argv[2], "w"), indent=1)
PY
fi
"$PROMETHEUS" --config.file="$TMP/prometheus.yml" --storage.tsdb.path="$TMP/data" \
    --web.listen-address="127.0.0.1:$PORT" --log.level=warn >"$TMP/prometheus.log" 2>&1 &
PROM_PID=$!

ready() { curl -sf --max-time 2 -o /dev/null "$PROM/-/ready"; }
target_up() {
    curl -sf --max-time 2 "$PROM/api/v1/targets?state=active" | python3 -c '
import json, sys
ts = json.load(sys.stdin)["data"]["activeTargets"]
sys.exit(0 if sum(t["labels"].get("job") == "etcd-readiness" and t["health"] == "up" for t in ts) >= int(sys.argv[1]) else 1)' "${#EXPORTERS[@]}"
}
enough_scrapes() {
    curl -sf --max-time 2 "$PROM/api/v1/query" \
        --data-urlencode 'query=count_over_time(up{job="etcd-readiness"}[1m]) >= 5' | python3 -c '
import json, sys
sys.exit(0 if len(json.load(sys.stdin)["data"]["result"]) >= int(sys.argv[1]) else 1)' "${#EXPORTERS[@]}"
}
wait_for "prometheus to be ready on $PROM" ready
wait_for "targets ${EXPORTERS[*]} to be up" target_up
wait_for "5 scrapes of each of ${EXPORTERS[*]}" enough_scrapes
pass "prometheus 127.0.0.1:$PORT scrapes ${EXPORTERS[*]} (job etcd-readiness)"

# --- 4. every expression parses; dashboard queries return data ------------------
python3 "$HERE/check_dashboard.py" --rate-interval 30s --emit-queries "$DASHBOARD" "$ALERTS" >"$TMP/queries.json"
printf '%s\n' "$EXCEPTIONS" >"$TMP/exceptions.tsv"
set +e
python3 - "$PROM" "$TMP/queries.json" "$TMP/exceptions.tsv" <<'PY'
import json, sys, urllib.parse, urllib.request
prom, queries_file, exceptions_file = sys.argv[1:]
queries = json.load(open(queries_file))
exceptions = {}
for line in open(exceptions_file):
    if line.strip():
        qid, reason = line.rstrip("\n").split("\t", 1)
        exceptions[qid] = reason
failures = 0
ids = {q["id"] for q in queries}
for qid in sorted(set(exceptions) - ids):
    print(f"FAIL: exception {qid!r} names no emitted query (renamed panel?)", file=sys.stderr)
    failures += 1
for q in queries:
    body = urllib.parse.urlencode({"query": q["expr"]}).encode()
    try:
        with urllib.request.urlopen(urllib.request.Request(f"{prom}/api/v1/query", data=body), timeout=10) as r:
            resp = json.load(r)
    except urllib.error.HTTPError as e:
        resp = json.load(e)
    except Exception as e:  # connection trouble is a failure, not a crash
        resp = {"status": "error", "error": str(e)}
    if resp.get("status") != "success":
        print(f"FAIL: {q['id']}: {resp.get('errorType', '')} {resp.get('error')}\n      {q['expr']}", file=sys.stderr)
        failures += 1
        continue
    n = len(resp["data"]["result"]) if resp["data"]["resultType"] in ("vector", "matrix") else 1
    if q["source"] != "dashboard":
        print(f"ok:   {q['id']}: parses ({n} series now)")
    elif n > 0:
        print(f"ok:   {q['id']}: {n} series")
    elif q["id"] in exceptions:
        print(f"ok:   {q['id']}: no data, allowed: {exceptions[q['id']]}")
    else:
        print(f"FAIL: {q['id']}: no data\n      {q['expr']}", file=sys.stderr)
        failures += 1
print(f"{len(queries)} queries, {failures} failure(s)")
sys.exit(1 if failures else 0)
PY
[ $? -eq 0 ] || fail "queries (see above)"
set -e

# --- 5. the rules as Prometheus loaded and evaluated them ------------------------
rules_evaluated() {
    curl -sf --max-time 2 "$PROM/api/v1/rules" | python3 -c '
import json, sys
rules = [r for g in json.load(sys.stdin)["data"]["groups"] for r in g["rules"]]
sys.exit(0 if rules and all(r.get("lastEvaluation", "").startswith("20") and r.get("evaluationTime", 0) >= 0
                            and r.get("health") != "unknown" for r in rules) else 1)'
}
wait_for "every rule to be evaluated" rules_evaluated
curl -sf --max-time 5 -o "$TMP/rules.json" "$PROM/api/v1/rules" || fail "GET /api/v1/rules"
set +e
python3 - "$TMP/rules.json" "$QUIET_ALERTS" <<'PY'
import json, sys
quiet = set(sys.argv[2].split())
rules = [r for g in json.load(open(sys.argv[1]))["data"]["groups"] for r in g["rules"]]
bad = 0
for r in rules:
    name, health, state = r["name"], r.get("health"), r.get("state", "recording")
    if health != "ok":
        print(f"FAIL: rule {name}: health {health}: {r.get('lastError')}", file=sys.stderr)
        bad += 1
    elif name in quiet and state != "inactive":
        print(f"FAIL: alert {name} is {state} against a healthy exporter", file=sys.stderr)
        bad += 1
    else:
        print(f"ok:   rule {name}: health ok, {state}")
for name in sorted(quiet - {r["name"] for r in rules}):
    print(f"FAIL: alert {name} not loaded", file=sys.stderr)
    bad += 1
sys.exit(1 if bad else 0)
PY
[ $? -eq 0 ] || fail "rules as loaded by prometheus (see above)"
set -e

# --- 6. promtool on the rule files ------------------------------------------------
if "$PROMTOOL" check rules "$ALERTS" >"$TMP/rules.txt" 2>&1; then pass "promtool check rules"; else fail "promtool check rules"; cat "$TMP/rules.txt" >&2; fi
if (cd "$(dirname "$ALERTS_TEST")" && "$PROMTOOL" test rules "$(basename "$ALERTS_TEST")") >"$TMP/test.txt" 2>&1; then
    pass "promtool test rules"
else
    fail "promtool test rules"; cat "$TMP/test.txt" >&2
fi

# --- 7. the cluster row against a real N-member cluster --------------------------
# cluster_checks.py prints what is not (yet) as expected; poll it to a deadline.
cluster_state() { # cluster_state STATE: wait until the cluster row and alerts show STATE
    local state=$1
    deadline=$((SECONDS + DEADLINE_SECONDS))
    until python3 "$HERE/cluster_checks.py" "$PROM" "$TMP/queries.json" "$CLUSTER_MEMBERS" "$state" >"$TMP/cluster.txt" 2>&1; do
        if [ "$SECONDS" -ge "$deadline" ]; then
            cat "$TMP/cluster.txt" >&2
            fail "cluster state $state not reached within ${DEADLINE_SECONDS}s"
            return 1
        fi
        sleep 1
    done
    cat "$TMP/cluster.txt"
}
if [ -n "$CLUSTER_MEMBERS" ]; then
    cluster_state healthy || true
fi

# --- 8. real faults: the cluster alerts fire ---------------------------------------
fault() { # fault WHAT: run the fault script, a failure of it is a failure of the test
    if "$FAULT_SCRIPT" "$1" >"$TMP/fault.txt" 2>&1; then echo "      fault: $1"; else fail "$FAULT_SCRIPT $1"; cat "$TMP/fault.txt" >&2; fi
}
if [ -n "$FAULT_SCRIPT" ] && [ "$FAILURES" -eq 0 ]; then
    fault quorum; cluster_state quorum || true
    fault heal; cluster_state healthy || true
    fault drift; cluster_state drift || true
    fault heal; cluster_state healthy || true
fi

if [ "$FAILURES" -ne 0 ]; then
    echo "prometheus_it: $FAILURES failure(s)" >&2
    exit 1
fi
echo "prometheus_it: all checks passed against ${EXPORTERS[*]}"
