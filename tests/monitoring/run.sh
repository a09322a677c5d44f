#!/usr/bin/env bash
# The monitoring checks of .ci/test, end to end with real parts:
#  - offline: dashboard conventions, manifests vs real flags, promtool rules;
#  - live: a real 3-member etcd cluster, a real dnsmasq answering the owner
#    TXT record, a small stand-in for the backup sidecar (the testkit's
#    fake-backup-sidecar, speaking its documented /metrics and /healthz),
#    and three exporters (`serve`, one per member) sampling them; each
#    exporter's member_info is compared with etcdctl; then prometheus_it.sh
#    runs, once with Prometheus 2.42 (Debian's /usr/bin/prometheus) and once
#    with Prometheus 3.5.3 (.ci/fetch-binaries prometheus-3), each with a real
#    Alertmanager 0.28.1 (.ci/fetch-binaries alertmanager): every query, the
#    negotiated scrape formats, the values of the dashboard's cluster row, the
#    alerts firing after real faults, and what Alertmanager delivers to a
#    webhook (member alert with cluster_id and runbook_url; on quorum loss the
#    cluster alert, with the member alerts inhibited).
# The rules Prometheus evaluates are the mixin's (`.ci/mixin --render`) with a
# test-only _config that shortens the `for:` of the alerts the faults cause;
# they are checked to differ from the shipped dashboards/alerts.yaml in their
# `for:` lines only. Likewise the exporters' policy is policies/gardener.policy
# with its `recover` holds at 3 s, checked to differ in those only.
# Every child is killed on exit; every wait has a deadline.
set -euo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
cd "$ROOT"

# The checkers first prove they catch deliberate breakages, then check.
# The manifests are a kustomize overlay now: the checker reads its rendering
# (.ci/kustomize --render-demo, a real kubectl).
python3 tests/monitoring/check_dashboard.py --self-test
python3 tests/monitoring/check_dashboard.py
rendered=$(mktemp -d)
bash .ci/kustomize --render-demo "$rendered" >/dev/null
python3 tests/monitoring/check_manifests.py --manifests "$rendered" --self-test
python3 tests/monitoring/check_manifests.py --manifests "$rendered"
rm -rf "$rendered"
# The rendered files have no drift, promtool on default and custom _config,
# runbook anchors (.ci/mixin --check).
bash .ci/mixin --check

cargo build --quiet --bin etcd-readiness-exporter
cargo build --quiet -p etcd-readiness-testkit --bin fake-backup-sidecar
BIN=$ROOT/target/debug/etcd-readiness-exporter

# The allow-lists the checkers use must describe the real binary: every flag
# in known_flags.txt exists in `serve --help`.
help=$("$BIN" serve --help)
while read -r flag; do
  case "$flag" in ''|'#'*) continue ;; esac
  grep -qE -- "^ +$flag( |$)" <<<"$help" || { echo "known_flags.txt: $flag is not a flag of serve" >&2; exit 1; }
done < tests/monitoring/known_flags.txt
echo "ok:   every flag in known_flags.txt exists in serve --help"

TMP=$(mktemp -d "${TMPDIR:-/tmp}/ere-monitoring.XXXXXX")
PIDS=()
cleanup() {
  for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
  for p in "${PIDS[@]}"; do wait "$p" 2>/dev/null || true; done
  rm -rf "$TMP"
}
trap cleanup EXIT INT TERM

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
wait_for() { # wait_for DESCRIPTION SECONDS COMMAND...
  local what=$1 secs=$2; shift 2
  local deadline=$((SECONDS + secs))
  until "$@" >/dev/null 2>&1; do
    if [ $SECONDS -ge $deadline ]; then echo "timed out waiting for $what" >&2; return 1; fi
    sleep 0.2
  done
}

# A real 3-member etcd cluster and one exporter per member (as the sidecars of
# a StatefulSet), all three with every source: one dnsmasq answering the owner
# TXT record and one backup sidecar stand-in serve all three, as the policy
# (policies/gardener.policy) needs them. Each exporter reads its own copy of
# the policy, so the fault phase can change one member's policy.
DNS=$(free_port); BACKUP=$(free_port)
NAMES=(m1 m2 m3)
CLIENTS=(); PEERS=(); WEBS=(); ETCD_PIDS=()
for i in 0 1 2; do CLIENTS+=("$(free_port)"); PEERS+=("$(free_port)"); WEBS+=("$(free_port)"); done
INITIAL="m1=http://127.0.0.1:${PEERS[0]},m2=http://127.0.0.1:${PEERS[1]},m3=http://127.0.0.1:${PEERS[2]}"
# The members are throwaway: SIGKILL, which also ends one stopped by the
# fault phase. (SIGTERM to all three at once took 7 s: each leader tries to
# hand over its leadership to members that are shutting down too.)
cleanup_etcd() { [ ${#ETCD_PIDS[@]} -eq 0 ] || kill -KILL "${ETCD_PIDS[@]}" 2>/dev/null || true; cleanup; }
trap cleanup_etcd EXIT INT TERM
for i in 0 1 2; do
  etcd --name "${NAMES[$i]}" --data-dir "$TMP/etcd-$i" \
    --listen-client-urls "http://127.0.0.1:${CLIENTS[$i]}" --advertise-client-urls "http://127.0.0.1:${CLIENTS[$i]}" \
    --listen-peer-urls "http://127.0.0.1:${PEERS[$i]}" --initial-advertise-peer-urls "http://127.0.0.1:${PEERS[$i]}" \
    --initial-cluster "$INITIAL" --initial-cluster-token "ere-monitoring-$$" >"$TMP/etcd-$i.log" 2>&1 &
  PIDS+=($!); ETCD_PIDS+=($!)
done

/usr/sbin/dnsmasq --keep-in-foreground --no-resolv --no-hosts --bind-interfaces \
  --listen-address=127.0.0.1 --port="$DNS" --user=root --pid-file="$TMP/dnsmasq.pid" \
  --txt-record=etcd-main.example.test,cluster-a >"$TMP/dnsmasq.log" 2>&1 &
PIDS+=($!)

"$ROOT/target/debug/fake-backup-sidecar" "$BACKUP" >"$TMP/backup.log" 2>&1 &
PIDS+=($!)

# The policy for the live test: policies/gardener.policy with its `recover`
# holds at 3 s instead of 30 s, as the rules get short `for:` below. The
# start, and each heal of a stopped member (two per Prometheus version), waits
# out caught_up's hold (an unknown sample restarts its count) before the
# member is ready: 30 s each, where this test proves what the dashboard and
# alerts show, not how long the hold is (the policy's own tests do:
# policies/gardener.test.yaml). Checked to differ in those holds only.
sed -E 's/ recover [0-9]+[smh]\b/ recover 3s/' policies/gardener.policy >"$TMP/test.policy"
recover_out() { sed -E 's/ recover [0-9]+[smh]\b/ recover D/' "$1"; }
if ! diff <(recover_out policies/gardener.policy) <(recover_out "$TMP/test.policy") >/dev/null ||
    [ "$(diff policies/gardener.policy "$TMP/test.policy" | grep -c '^>')" -eq 0 ]; then
  echo "the test's policy differs from policies/gardener.policy in more than its recover holds (or not at all):" >&2
  diff policies/gardener.policy "$TMP/test.policy" >&2; exit 1
fi
echo "ok:   the test's policy is policies/gardener.policy with $(diff policies/gardener.policy "$TMP/test.policy" | grep -c '^>') recover holds at 3s"
for i in 0 1 2; do
  cp "$TMP/test.policy" "$TMP/policy-$i"
  # The same policy as candidate, so the candidate's families are scraped too.
  cp "$TMP/test.policy" "$TMP/candidate-$i"
  "$BIN" serve --policy "$TMP/policy-$i" --policy.candidate "$TMP/candidate-$i" \
    --etcd.endpoint "http://127.0.0.1:${CLIENTS[$i]}" \
    --backup.url "http://127.0.0.1:$BACKUP" \
    --owner.name etcd-main.example.test --owner.id cluster-a --owner.nameserver "127.0.0.1:$DNS" \
    --owner.interval 2s --owner.timeout 1s \
    --web.enable-lifecycle \
    --web.listen-address "127.0.0.1:${WEBS[$i]}" >"$TMP/exporter-$i.log" 2>&1 &
  PIDS+=($!)
done

for i in 0 1 2; do
  WEB=${WEBS[$i]}
  if ! wait_for "exporter $i to be ready" 60 curl -sf "http://127.0.0.1:$WEB/readyz"; then
    curl -s "http://127.0.0.1:$WEB/readyz?verbose" || true
    tail -20 "$TMP/exporter-$i.log" "$TMP/etcd-$i.log" >&2
    exit 1
  fi
done
echo "3 exporters ready on 127.0.0.1:${WEBS[0]},${WEBS[1]},${WEBS[2]} (3-member etcd cluster, owner via dnsmasq, backup sidecar stand-in)"

# ...and every metric name in known_metrics.txt is in a real scrape (with all
# sources configured), so the dashboard and alerts cannot name a metric that
# does not exist. Wait for one owner and one backup round first.
WEB=${WEBS[0]}
wait_for "owner and backup samples" 30 sh -c "curl -sf http://127.0.0.1:$WEB/metrics | grep -q 'etcd_readiness_signal_value{signal=\"owner_ok\"'"
scrape=$(curl -sf "http://127.0.0.1:$WEB/metrics")
while read -r name; do
  case "$name" in ''|'#'*|up) continue ;; esac
  grep -q "^$name[{ ]" <<<"$scrape" || { echo "known_metrics.txt: $name is not in a real scrape" >&2; exit 1; }
done < tests/monitoring/known_metrics.txt
echo "ok:   every metric in known_metrics.txt is in a real scrape"

# Each exporter's etcd_readiness_member_info names its member as etcd does:
# member ID and name as `etcdctl member list -w simple` prints them, the
# cluster ID of `etcdctl endpoint status -w json` (decimal there) in hex, and
# both as etcd's own log prints them ("starting member X in cluster Y").
for i in 0 1 2; do
  ep="http://127.0.0.1:${CLIENTS[$i]}"
  etcdctl --endpoints "$ep" member list -w simple >"$TMP/members-$i.txt"
  etcdctl --endpoints "$ep" endpoint status -w json >"$TMP/status-$i.json"
  wait_for "member_info on exporter $i" 30 sh -c "curl -sf http://127.0.0.1:${WEBS[$i]}/metrics | grep -q '^etcd_readiness_member_info{.*name=\"${NAMES[$i]}\"'"
  curl -sf "http://127.0.0.1:${WEBS[$i]}/metrics" | grep '^etcd_readiness_member_info' >"$TMP/info-$i.txt" || true
  python3 - "$TMP/members-$i.txt" "$TMP/status-$i.json" "$TMP/info-$i.txt" "${NAMES[$i]}" "$TMP/etcd-$i.log" <<'PY'
import json, re, sys
members_file, status_file, info_file, name, log_file = sys.argv[1:]
header = json.load(open(status_file))[0]["Status"]["header"]
member_hex = {}
for line in open(members_file):
    fields = [x.strip() for x in line.split(",")]
    member_hex[fields[2]] = fields[0]
lines = open(info_file).read().splitlines()
if len(lines) != 1:
    sys.exit(f"FAIL: expected one etcd_readiness_member_info series for {name}, got {lines}")
labels = dict(re.findall(r'(\w+)="([^"]*)"', lines[0]))
want = {"cluster_id": "%x" % header["cluster_id"], "member_id": member_hex[name], "name": name}
if labels != want or not lines[0].endswith(" 1"):
    sys.exit(f"FAIL: member_info of {name} is {lines[0]!r}, want labels {want}")
m = re.search(r"starting member (\w+) in cluster (\w+)", open(log_file).read())
if not m or (m.group(1), m.group(2)) != (want["member_id"], want["cluster_id"]):
    sys.exit(f"FAIL: etcd's log of {name} names {m and m.groups()}, the exporter {want}")
print(f"ok:   member_info of {name}: cluster_id={want['cluster_id']} member_id={want['member_id']}, as etcdctl and etcd's log print them")
PY
done

# The fault phase of prometheus_it.sh calls this with one argument:
#   member  SIGSTOP of etcd member m3: its exporter says not ready, quorum stays;
#   drift   member m3 gets a different policy (one comment line more), reloaded;
#   quorum  SIGSTOP of etcd members m2 and m3: m1 loses its leader, no member is ready;
#   heal    SIGCONT of both, and m3's policy back as it was, reloaded.
cat >"$TMP/fault.sh" <<EOF
#!/usr/bin/env bash
set -euo pipefail
case "\$1" in
  member) kill -STOP ${ETCD_PIDS[2]} ;;
  drift)  echo "# a changed policy on m3 only" >>"$TMP/policy-2"
          curl -sf --max-time 5 -X POST "http://127.0.0.1:${WEBS[2]}/-/reload" >/dev/null ;;
  quorum) kill -STOP ${ETCD_PIDS[1]} ${ETCD_PIDS[2]} ;;
  heal)   kill -CONT ${ETCD_PIDS[1]} ${ETCD_PIDS[2]}
          cp "$TMP/test.policy" "$TMP/policy-2"
          curl -sf --max-time 5 -X POST "http://127.0.0.1:${WEBS[2]}/-/reload" >/dev/null ;;
  *) echo "usage: \$0 member|drift|quorum|heal" >&2; exit 2 ;;
esac
EOF
chmod +x "$TMP/fault.sh"

# The rules for the live test: the mixin with short holds for the alerts the
# faults cause (member alerts longer than the cluster alerts, so that the
# cluster alert is in Alertmanager before its members' alerts arrive and the
# inhibition is in place), everything else as shipped.
TEST_CONFIG="{ alertFor+: { EtcdMemberNotReady: '10s', EtcdClusterAllMembersNotReady: '1s',
  EtcdClusterReadyMembersBelowQuorum: '4s', EtcdClusterPolicyDrift: '3s' } }"
bash .ci/mixin --render "$TMP/rules" --config "$TEST_CONFIG"
RULES=$TMP/rules/dashboards/alerts.yaml
# holds_out FILE: the rules without their for: lines and with the hold each
# description quotes ("for 5m") as "for D".
holds_out() { grep -v '^        for: ' "$1" | sed -E '/^ +description: /s/ for [0-9]+[smh]\b/ for D/g'; }
if ! diff <(holds_out dashboards/alerts.yaml) <(holds_out "$RULES") >"$TMP/rules.diff"; then
  echo "the test's rules differ from dashboards/alerts.yaml in more than their for: holds:" >&2
  cat "$TMP/rules.diff" >&2; exit 1
fi
echo "ok:   the test's rules are the shipped ones with $(diff dashboards/alerts.yaml "$RULES" | grep -c '^>') shorter for: holds"

read -r _ P3 < <(bash .ci/fetch-binaries prometheus-3)
read -r _ AMDIR < <(bash .ci/fetch-binaries alertmanager)
for prom in /usr/bin/prometheus "$P3/usr/bin/prometheus"; do
  start=$SECONDS
  echo "== prometheus_it.sh with $("$prom" --version 2>&1 | head -1) and a real Alertmanager"
  PROMETHEUS=$prom "$HERE/prometheus_it.sh" --cluster-members 3 --fault-script "$TMP/fault.sh" \
    --rules "$RULES" --alertmanager "$AMDIR/usr/bin/prometheus-alertmanager" \
    "127.0.0.1:${WEBS[0]}" "127.0.0.1:${WEBS[1]}" "127.0.0.1:${WEBS[2]}"
  echo "   ($prom: $((SECONDS - start)) s)"
done
