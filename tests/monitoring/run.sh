#!/usr/bin/env bash
# The monitoring checks of .ci/test, end to end with real parts:
#  - offline: dashboard conventions, manifests vs real flags, promtool rules;
#  - live: a real single-member etcd, a real dnsmasq answering the owner TXT
#    record, a small stand-in for the backup sidecar (tests/monitoring/
#    fake_backup_sidecar.py, speaking its documented /metrics and /healthz),
#    and the exporter itself (`serve`) sampling all three; then
#    prometheus_it.sh runs a real Prometheus against the exporter.
# Every child is killed on exit; every wait has a deadline.
set -euo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
cd "$ROOT"

# The checkers first prove they catch deliberate breakages, then check.
python3 tests/monitoring/check_dashboard.py --self-test
python3 tests/monitoring/check_manifests.py --self-test
python3 tests/monitoring/check_dashboard.py
python3 tests/monitoring/check_manifests.py
promtool check rules dashboards/alerts.yaml
promtool test rules dashboards/alerts.test.yaml

cargo build --quiet
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

CLIENT=$(free_port); PEER=$(free_port); DNS=$(free_port); BACKUP=$(free_port); WEB=$(free_port)

etcd --name m1 --data-dir "$TMP/etcd" \
  --listen-client-urls "http://127.0.0.1:$CLIENT" --advertise-client-urls "http://127.0.0.1:$CLIENT" \
  --listen-peer-urls "http://127.0.0.1:$PEER" --initial-advertise-peer-urls "http://127.0.0.1:$PEER" \
  --initial-cluster "m1=http://127.0.0.1:$PEER" >"$TMP/etcd.log" 2>&1 &
PIDS+=($!)

/usr/sbin/dnsmasq --keep-in-foreground --no-resolv --no-hosts --bind-interfaces \
  --listen-address=127.0.0.1 --port="$DNS" --user=root --pid-file="$TMP/dnsmasq.pid" \
  --txt-record=etcd-main.example.test,cluster-a >"$TMP/dnsmasq.log" 2>&1 &
PIDS+=($!)

python3 "$HERE/fake_backup_sidecar.py" "$BACKUP" >"$TMP/backup.log" 2>&1 &
PIDS+=($!)

"$BIN" serve --policy policies/gardener.policy \
  --etcd.endpoint "http://127.0.0.1:$CLIENT" \
  --backup.url "http://127.0.0.1:$BACKUP" \
  --owner.name etcd-main.example.test --owner.id cluster-a --owner.nameserver "127.0.0.1:$DNS" \
  --owner.interval 2s --owner.timeout 1s \
  --web.listen-address "127.0.0.1:$WEB" >"$TMP/exporter.log" 2>&1 &
PIDS+=($!)

if ! wait_for "the exporter to be ready" 60 curl -sf "http://127.0.0.1:$WEB/readyz"; then
  curl -s "http://127.0.0.1:$WEB/readyz?verbose" || true
  tail -20 "$TMP/exporter.log" >&2
  exit 1
fi
echo "exporter ready on 127.0.0.1:$WEB (etcd, owner via dnsmasq, backup sidecar stand-in)"

# ...and every metric name in known_metrics.txt is in a real scrape (with all
# sources configured), so the dashboard and alerts cannot name a metric that
# does not exist. Wait for one owner and one backup round first.
wait_for "owner and backup samples" 30 sh -c "curl -sf http://127.0.0.1:$WEB/metrics | grep -q 'etcd_readiness_signal_value{signal=\"owner_ok\"'"
scrape=$(curl -sf "http://127.0.0.1:$WEB/metrics")
while read -r name; do
  case "$name" in ''|'#'*|up) continue ;; esac
  grep -q "^$name[{ ]" <<<"$scrape" || { echo "known_metrics.txt: $name is not in a real scrape" >&2; exit 1; }
done < tests/monitoring/known_metrics.txt
echo "ok:   every metric in known_metrics.txt is in a real scrape"
"$HERE/prometheus_it.sh" "127.0.0.1:$WEB"
