#!/usr/bin/env bash
# Real-Prometheus integration test of the dashboard and alert rules against a
# running etcd-readiness-exporter.
#
# Usage (from anywhere):
#   tests/monitoring/prometheus_it.sh [--cluster-members N [--fault-script FILE]]
#                                     [--rules FILE] [--alertmanager BIN] HOST:PORT...
#   HOST:PORT  each exporter's --web.listen-address as reachable from here,
#              e.g. 127.0.0.1:9379. Each exporter must be connected to a running
#              etcd member (a fresh single-member etcd is enough); backup and owner
#              sources need not be configured.
#   --cluster-members N  the exporters watch the N members of one etcd cluster:
#              check the values of the dashboard's cluster row (step 7).
#   --fault-script FILE  with --cluster-members: FILE member|drift|quorum|heal
#              stops one etcd member / makes one member's policy differ / stops
#              enough etcd members that none is ready / undoes all; the alerts
#              must fire (step 8).
#   --rules FILE  the rule file Prometheus loads (default dashboards/alerts.yaml);
#              run.sh passes the mixin's rules rendered with short `for:`.
#   --alertmanager BIN  with --fault-script: also run a real Alertmanager
#              (BIN) with the mixin's example routing and inhibition
#              (docs/alertmanager-example.yaml, the mixin's alertmanagerExample
#              as `.ci/mixin` renders it), whose
#              webhook receiver is a small HTTP server of this script that
#              records every POST; step 9 checks what it delivers.
# Environment: PROMETHEUS (default /usr/bin/prometheus), PROMTOOL (/usr/bin/promtool),
#              IT_DEADLINE_SECONDS (default 90) bounds every wait. Prometheus 3
#              (detected from --version) scrapes the first exporters with
#              OpenMetrics only and the last with text 0.0.4 only (two scrape
#              configs, one job); 2.x negotiates as it does (OpenMetrics first).
#              Which format each target got is checked (step 3) from the
#              metadata Prometheus keeps of each target.
#
# What it does:
#  1. scrapes each exporter once: `promtool check metrics` must print nothing, exit 0;
#  2. sends a few /readyz and /livez requests (so the HTTP metrics have series);
#  3. starts a real Prometheus on a free loopback port (temp storage, scrape and
#     evaluate every 1s, job `etcd` with target labels as the Prometheus Operator
#     sets them: container, namespace, pod, and a `cluster` label), the rule file,
#     waits for every target to be up and for at least 5 scrapes of each, and
#     checks the negotiated format of each target;
#  4. runs every expression from `check_dashboard.py --emit-queries` through
#     /api/v1/query: each must parse (status success), and each dashboard query must
#     return data, except the EXCEPTIONS below (each with its reason);
#  5. checks that Prometheus loaded every rule with health ok, and that the alerts
#     that must be quiet for a healthy exporter are neither pending nor firing;
#  6. runs `promtool check rules` and `promtool test rules`;
#  7. (--cluster-members N) the cluster row's queries give one cluster with N
#     members, quorum N/2+1, N ready, N members on one policy version, N rows in
#     the members table;
#  8. (--fault-script) member: N-1 ready, no cluster alert; heal; quorum:
#     EtcdClusterReadyMembersBelowQuorum and EtcdClusterAllMembersNotReady fire,
#     0 ready, members and quorum unchanged; heal: as in 7, none firing; drift:
#     EtcdClusterPolicyDrift fires and the policy panel shows two versions; heal.
#  9. (--alertmanager) the member fault's EtcdMemberNotReady reaches the webhook
#     with cluster_id, namespace, cluster, pod and runbook_url; the quorum loss's
#     EtcdClusterAllMembersNotReady reaches it too, while Alertmanager's
#     /api/v2/alerts shows every EtcdMemberNotReady and the
#     EtcdClusterReadyMembersBelowQuorum suppressed (inhibitedBy), and the
#     webhook receives none of them while the inhibition holds.
# Every wait has a deadline (IT_DEADLINE_SECONDS, per phase).
# Prometheus is killed on exit (trap), whatever happens. Exit 0 only if all pass.
set -euo pipefail

usage() {
    echo "usage: $0 [--cluster-members N [--fault-script FILE]] HOST:PORT...   (exporters, e.g. 127.0.0.1:9379)" >&2
    exit 2
}
CLUSTER_MEMBERS=
FAULT_SCRIPT=
RULES=
ALERTMANAGER=
while [ $# -gt 0 ]; do
    case "$1" in
        --rules) [ $# -ge 2 ] && [ -f "$2" ] || usage; RULES=$2; shift 2 ;;
        --alertmanager) [ $# -ge 2 ] && [ -x "$2" ] || usage; ALERTMANAGER=$2; shift 2 ;;
        --cluster-members) [ $# -ge 2 ] && [[ "$2" =~ ^[1-9][0-9]*$ ]] || usage; CLUSTER_MEMBERS=$2; shift 2 ;;
        --fault-script) [ $# -ge 2 ] && [ -x "$2" ] || usage; FAULT_SCRIPT=$2; shift 2 ;;
        --*) usage ;;
        *) break ;;
    esac
done
[ $# -ge 1 ] || usage
for e in "$@"; do [[ "$e" == *:* ]] || usage; done
if [ -n "$FAULT_SCRIPT" ] && [ -z "$CLUSTER_MEMBERS" ]; then usage; fi
if [ -n "$ALERTMANAGER" ] && [ -z "$FAULT_SCRIPT" ]; then usage; fi
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
RULES=${RULES:-$ALERTS}
JOB=etcd
PROM_MAJOR=$("$PROMETHEUS" --version 2>&1 | sed -n 's/^prometheus, version \([0-9]*\)\..*/\1/p' | head -1)
[ -n "$PROM_MAJOR" ] || { echo "cannot tell the version of $PROMETHEUS" >&2; exit 1; }

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
panel:Sample errors per source:A	errors_total{source,reason} gets a series at the first error; none in a healthy run
EOF
)
# Alerts that must be neither pending nor firing while the exporters are scraped and healthy.
QUIET_ALERTS="EtcdReadinessExporterDown EtcdReadinessPolicyReloadFailing EtcdOwnerCheckFailing EtcdRevisionLagHigh
  EtcdMemberNotReady EtcdClusterReadyMembersBelowQuorum EtcdClusterAllMembersNotReady EtcdClusterPolicyDrift"

TMP=$(mktemp -d "${TMPDIR:-/tmp}/prometheus-it.XXXXXX")
PROM_PID=
AM_PID=
HOOK_PID=
stop() { # stop PID: TERM, up to 5 s, then KILL
    local pid=$1
    [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null || return 0
    kill "$pid" 2>/dev/null || true
    for _ in $(seq 1 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -9 "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
}
# On failure: the logs that explain it.
show_logs() {
    for f in prometheus.log alertmanager.log webhook.log webhook.jsonl am-check.txt hook-check.txt; do
        [ -s "$TMP/$f" ] || continue
        echo "---- last lines of $f" >&2; tail -n 30 "$TMP/$f" >&2
    done
}
cleanup() {
    local rc=$?
    [ "$rc" -eq 0 ] || show_logs
    stop "$PROM_PID"; stop "$AM_PID"; stop "$HOOK_PID"
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
            exit 1
        fi
        if [ -n "$PROM_PID" ] && ! kill -0 "$PROM_PID" 2>/dev/null; then
            echo "FAIL: prometheus exited while waiting for $what" >&2
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
free_port() { python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
PORT=$(free_port)
PROM=http://127.0.0.1:$PORT

# The Alertmanager first (with its webhook receiver), so that Prometheus
# delivers from its first evaluation on.
ALERTING=
if [ -n "$ALERTMANAGER" ]; then
    HOOK_PORT=$(free_port); AM_PORT=$(free_port)
    AM=http://127.0.0.1:$AM_PORT
    # The webhook receiver: every POST body as one JSON line, with the time it came.
    python3 -u - "$HOOK_PORT" "$TMP/webhook.jsonl" >"$TMP/webhook.log" 2>&1 <<'PY' &
import http.server, json, sys, time
port, out = int(sys.argv[1]), sys.argv[2]
class Hook(http.server.BaseHTTPRequestHandler):
    def do_POST(self):
        body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
        with open(out, "a") as f:
            f.write(json.dumps({"received": time.time(), "path": self.path, "body": json.loads(body)}) + "\n")
        self.send_response(200); self.end_headers()
    def log_message(self, fmt, *args):
        print(fmt % args, flush=True)
http.server.HTTPServer(("127.0.0.1", port), Hook).serve_forever()
PY
    HOOK_PID=$!
    : >"$TMP/webhook.jsonl"
    # The mixin's example config (alertmanagerExample: grouping and inhibition),
    # with this test's receiver and short group timings: the committed
    # rendering, which `.ci/mixin --check` holds equal to the mixin's output
    # (rendering it again here cost a jsonnet run per Prometheus version).
    python3 - "$ROOT/docs/alertmanager-example.yaml" "$TMP/alertmanager.yml" "http://127.0.0.1:$HOOK_PORT/hook" <<'PY'
import re, sys
src, dst, url = sys.argv[1:]
text = open(src).read()
subs = [(r'url: "[^"]*"', f'url: "{url}"'), (r'group_wait: "[^"]*"', 'group_wait: "1s"'),
        (r'group_interval: "[^"]*"', 'group_interval: "1s"'), (r'repeat_interval: "[^"]*"', 'repeat_interval: "1h"')]
for pat, rep in subs:
    text, n = re.subn(pat, rep, text)
    if n != 1:
        sys.exit(f"{src}: expected one {pat!r}, found {n}")
open(dst, "w").write(text)
PY
    AM_CMD=("$ALERTMANAGER" --config.file="$TMP/alertmanager.yml" --storage.path="$TMP/am-data"
        --web.listen-address="127.0.0.1:$AM_PORT" --cluster.listen-address= --log.level=warn)
    # Debian's Alertmanager reads its default notification templates from
    # /usr/share/prometheus/alertmanager (not embedded; no flag moves them).
    # A binary fetched by .ci/fetch-binaries has them next to it: without the
    # package installed, the Alertmanager runs in a mount namespace of its own
    # where that directory is a bind mount of them (the host is not changed).
    AM_ASSETS=$(cd "$(dirname "$ALERTMANAGER")/.." && pwd)/share/prometheus/alertmanager
    if [ -f /usr/share/prometheus/alertmanager/default.tmpl ] || [ ! -f "$AM_ASSETS/default.tmpl" ]; then
        "${AM_CMD[@]}" >"$TMP/alertmanager.log" 2>&1 &
    else
        over=/usr/share/prometheus; [ -d "$over" ] || over=/usr/share
        unshare --mount --propagation private sh -c 'set -e
            mount -t tmpfs ere-alertmanager "$1"; mkdir -p /usr/share/prometheus/alertmanager
            mount --bind "$2" /usr/share/prometheus/alertmanager; shift 2; exec "$@"' sh "$over" "$AM_ASSETS" "${AM_CMD[@]}" \
            >"$TMP/alertmanager.log" 2>&1 &
    fi
    AM_PID=$!
    am_ready() { curl -sf --max-time 2 -o /dev/null "$AM/-/ready"; }
    wait_for "alertmanager to be ready on $AM" am_ready
    pass "alertmanager $("$ALERTMANAGER" --version 2>&1 | sed -n 's/.*version \([^ ]*\).*/\1/p' | head -1) on $AM, webhook receiver on 127.0.0.1:$HOOK_PORT"
    ALERTING="alerting:
  alertmanagers:
    - static_configs:
        - targets: ['127.0.0.1:$AM_PORT']"
fi

# Targets labelled as the Prometheus Operator labels them, pod etcd-<i>.
target_entry() { # target_entry INDEX
    printf "      - targets: ['%s']\n        labels: {container: etcd-readiness-exporter, namespace: etcd-test, cluster: ci, pod: etcd-%s}\n" "${EXPORTERS[$1]}" "$1"
}
N=${#EXPORTERS[@]}
if [ "$PROM_MAJOR" -ge 3 ] && [ "$N" -ge 2 ]; then
    # Both formats at once, one job: the last exporter by text 0.0.4 only, the
    # others by OpenMetrics only. fallback_scrape_protocol is only used for a
    # response without a valid Content-Type: the exporter always sends one.
    OM_TARGETS=$(for i in $(seq 0 $((N - 2))); do target_entry "$i"; done)
    SCRAPE="  - job_name: $JOB
    scrape_protocols: [OpenMetricsText1.0.0]
    fallback_scrape_protocol: PrometheusText0.0.4
    static_configs:
$OM_TARGETS
  - job_name: $JOB-text
    scrape_protocols: [PrometheusText0.0.4]
    fallback_scrape_protocol: PrometheusText0.0.4
    relabel_configs:
      - {target_label: job, replacement: $JOB}
    static_configs:
$(target_entry $((N - 1)))"
    WANT_FORMATS=$(for i in $(seq 0 $((N - 2))); do echo "${EXPORTERS[$i]} openmetrics"; done; echo "${EXPORTERS[$((N - 1))]} text")
else
    SCRAPE="  - job_name: $JOB
    static_configs:
$(for i in $(seq 0 $((N - 1))); do target_entry "$i"; done)"
    # Prometheus 2 asks for OpenMetrics first (and cannot be told otherwise).
    WANT_FORMATS=$(for e in "${EXPORTERS[@]}"; do echo "$e openmetrics"; done)
fi
cat >"$TMP/prometheus.yml" <<EOF
global:
  scrape_interval: 1s
  scrape_timeout: 1s
  evaluation_interval: 1s
rule_files:
  - $RULES
$ALERTING
scrape_configs:
$SCRAPE
EOF
"$PROMETHEUS" --config.file="$TMP/prometheus.yml" --storage.tsdb.path="$TMP/data" \
    --web.listen-address="127.0.0.1:$PORT" --rules.alert.resend-delay=1s --log.level=warn >"$TMP/prometheus.log" 2>&1 &
PROM_PID=$!

ready() { curl -sf --max-time 2 -o /dev/null "$PROM/-/ready"; }
target_up() {
    curl -sf --max-time 2 "$PROM/api/v1/targets?state=active" | python3 -c '
import json, sys
ts = json.load(sys.stdin)["data"]["activeTargets"]
sys.exit(0 if sum(t["labels"].get("job") == sys.argv[2] and t["health"] == "up" for t in ts) >= int(sys.argv[1]) else 1)' "${#EXPORTERS[@]}" "$JOB"
}
enough_scrapes() {
    curl -sf --max-time 2 "$PROM/api/v1/query" \
        --data-urlencode "query=count_over_time(up{job=\"$JOB\"}[1m]) >= 5" | python3 -c '
import json, sys
sys.exit(0 if len(json.load(sys.stdin)["data"]["result"]) >= int(sys.argv[1]) else 1)' "${#EXPORTERS[@]}"
}
wait_for "prometheus to be ready on $PROM" ready
wait_for "targets ${EXPORTERS[*]} to be up" target_up
wait_for "5 scrapes of each of ${EXPORTERS[*]}" enough_scrapes
pass "prometheus $("$PROMETHEUS" --version 2>&1 | sed -n 's/^prometheus, version \([^ ]*\).*/\1/p') on 127.0.0.1:$PORT scrapes ${EXPORTERS[*]} (job $JOB)"

# Which format each target was answered in, from the metadata Prometheus keeps
# per target: OpenMetrics names a counter family without `_total` in its
# # TYPE line (etcd_readiness_transitions), text 0.0.4 with it.
curl -sf --max-time 5 -o "$TMP/metadata.json" "$PROM/api/v1/targets/metadata?metric=" ||
    curl -sf --max-time 5 -o "$TMP/metadata.json" "$PROM/api/v1/targets/metadata?match_target=%7Bjob%3D%22$JOB%22%7D" || fail "GET /api/v1/targets/metadata"
set +e
printf '%s\n' "$WANT_FORMATS" | python3 -c '
import json, sys
entries = json.load(open(sys.argv[1]))["data"]
bad = 0
for line in sys.stdin:
    target, want = line.split()
    names = {e["metric"] for e in entries if e["target"].get("instance") == target}
    got = ("openmetrics" if "etcd_readiness_transitions" in names else
           "text" if "etcd_readiness_transitions_total" in names else f"unknown ({len(names)} families)")
    if got != want:
        print(f"FAIL: {target} was scraped as {got}, want {want}", file=sys.stderr); bad += 1
    else:
        print(f"ok:   {target} scraped as {got} ({len(names)} metric families in its metadata)")
sys.exit(1 if bad else 0)' "$TMP/metadata.json"
[ $? -eq 0 ] || fail "negotiated scrape formats (see above)"
set -e

# --- 4. every expression parses; dashboard queries return data ------------------
python3 "$HERE/check_dashboard.py" --rate-interval 30s --emit-queries "$DASHBOARD" "$RULES" >"$TMP/queries.json"
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

# --- 8. real faults: the alerts fire ------------------------------------------------
fault() { # fault WHAT: run the fault script, a failure of it is a failure of the test
    if "$FAULT_SCRIPT" "$1" >"$TMP/fault.txt" 2>&1; then echo "      fault: $1"; else fail "$FAULT_SCRIPT $1"; cat "$TMP/fault.txt" >&2; fi
}
# --- 9. what the Alertmanager makes of them ------------------------------------------
# webhook_has SINCE ALERTNAME [LABEL=VALUE...]: a firing ALERTNAME with those
# labels and a runbook_url annotation for its section reached the webhook
# after line SINCE of webhook.jsonl; prints what it saw.
webhook_has() {
    python3 - "$TMP/webhook.jsonl" "$@" <<'PY'
import json, sys
path, since, name, *want = sys.argv[1:]
want = dict(w.split("=", 1) for w in want)
lines = open(path).read().splitlines()[int(since):]
seen = []
for line in lines:
    for a in json.loads(line)["body"]["alerts"]:
        if a["status"] != "firing" or a["labels"].get("alertname") != name:
            continue
        seen.append(a["labels"])
        if all(a["labels"].get(k) == v for k, v in want.items()) and \
                a["annotations"].get("runbook_url", "").endswith("#" + name.lower()):
            print(f"ok:   webhook received {name} {json.dumps(a['labels'], sort_keys=True)}, "
                  f"runbook_url {a['annotations']['runbook_url']}, summary: {a['annotations'].get('summary')}")
            sys.exit(0)
print(f"  not yet: {name} with {want} and its runbook_url; firing {name} seen: {seen}")
sys.exit(1)
PY
}
webhook_lines() { wc -l <"$TMP/webhook.jsonl"; }
# am_suppressed NAME COUNT SOURCE: Alertmanager holds COUNT alerts NAME, every
# one suppressed by an inhibition whose source is the (one) alert SOURCE
# (status.inhibitedBy holds SOURCE's fingerprint). What is not yet so goes to
# am-check.txt (shown on failure).
am_suppressed() {
    curl -sf --max-time 2 "$AM/api/v2/alerts" >"$TMP/am-alerts.json" || return 1
    python3 - "$TMP/am-alerts.json" "$@" 2>"$TMP/am-check.txt" <<'PY'
import json, sys
path, name, n, source = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
every = json.load(open(path))
alerts = [a for a in every if a["labels"].get("alertname") == name]
# SOURCE may name several inhibiting alerts (a|b): Alertmanager reports one
# of the firing sources that match a rule, whichever it found, and a source
# inhibited itself still inhibits.
names = set(source.split("|"))
sources = [a["fingerprint"] for a in every if a["labels"].get("alertname") in names
           and a["status"]["state"] in ("active", "suppressed")]
sup = [a for a in alerts if a["status"]["state"] == "suppressed" and a["status"]["inhibitedBy"]
       and set(a["status"]["inhibitedBy"]) <= set(sources)]
if sources and len(alerts) == n and len(sup) == n:
    print(f"ok:   alertmanager holds {n} {name}, all suppressed, inhibitedBy {source} ({sources[0]})")
    sys.exit(0)
print(f"  not yet: {name}: {[(a['labels'].get('pod'), a['status']) for a in alerts]}; active {source}: {sources}", file=sys.stderr)
sys.exit(1)
PY
}
webhook_wait() { # webhook_wait SINCE ALERTNAME LABEL=VALUE...: poll webhook_has to the deadline
    deadline=$((SECONDS + DEADLINE_SECONDS))
    until webhook_has "$@" >"$TMP/hook-check.txt" 2>&1; do
        if [ "$SECONDS" -ge "$deadline" ]; then cat "$TMP/hook-check.txt" >&2; fail "webhook: no $2 within ${DEADLINE_SECONDS}s"; return 1; fi
        sleep 1
    done
    cat "$TMP/hook-check.txt"
}
if [ -n "$FAULT_SCRIPT" ] && [ "$FAILURES" -eq 0 ]; then
    CLUSTER_ID=$(curl -sf --max-time 5 "$PROM/api/v1/query" --data-urlencode 'query=etcd_readiness_member_info' |
        python3 -c 'import json, sys; print(" ".join(sorted({r["metric"]["cluster_id"] for r in json.load(sys.stdin)["data"]["result"]})))')
    LAST_POD="etcd-$((N - 1))"
    mark=0; [ -z "$ALERTMANAGER" ] || mark=$(webhook_lines)
    fault member; cluster_state member || true
    if [ -n "$ALERTMANAGER" ]; then
        # The member fault: the member alert, routed with its cluster's labels.
        webhook_wait "$mark" EtcdMemberNotReady "cluster_id=$CLUSTER_ID" namespace=etcd-test cluster=ci "pod=$LAST_POD" || true
    fi
    fault heal; cluster_state healthy || true
    [ -z "$ALERTMANAGER" ] || mark=$(webhook_lines)
    fault quorum; cluster_state quorum || true
    if [ -n "$ALERTMANAGER" ]; then
        # The quorum loss: the cluster alert is delivered; every member alert and
        # the below-quorum alert are held back by the inhibition.
        webhook_wait "$mark" EtcdClusterAllMembersNotReady "cluster_id=$CLUSTER_ID" namespace=etcd-test cluster=ci || true
        deadline=$((SECONDS + DEADLINE_SECONDS))
        # Both cluster alerts are sources of the member alerts' inhibition.
        member_sources="EtcdClusterAllMembersNotReady|EtcdClusterReadyMembersBelowQuorum"
        wait_for "alertmanager to hold $N EtcdMemberNotReady, inhibited" \
            am_suppressed EtcdMemberNotReady "$N" "$member_sources"
        wait_for "alertmanager to hold EtcdClusterReadyMembersBelowQuorum, inhibited" \
            am_suppressed EtcdClusterReadyMembersBelowQuorum 1 EtcdClusterAllMembersNotReady
        # A group's notification goes out after group_wait (1s), then every
        # group_interval (1s): 3 s after the member alerts are held, one that
        # was not inhibited would have been delivered.
        sleep 3
        am_suppressed EtcdMemberNotReady "$N" "$member_sources" >/dev/null ||
            { fail "the member alerts did not stay suppressed for 3 s"; cat "$TMP/am-check.txt" >&2; }
        for name in EtcdMemberNotReady EtcdClusterReadyMembersBelowQuorum; do
            if webhook_has "$mark" "$name" >"$TMP/hook-check.txt" 2>&1; then
                fail "webhook received $name while the inhibition holds:"; cat "$TMP/hook-check.txt" >&2
            else
                pass "webhook received no $name while inhibited ($(( $(webhook_lines) - mark )) notification(s) since the quorum loss)"
            fi
        done
    fi
    fault heal; cluster_state healthy || true
    fault drift; cluster_state drift || true
    fault heal; cluster_state healthy || true
fi

if [ "$FAILURES" -ne 0 ]; then
    echo "prometheus_it: $FAILURES failure(s)" >&2
    exit 1
fi
echo "prometheus_it: all checks passed against ${EXPORTERS[*]}"
