#!/usr/bin/env bash
# RSS of the exporter after N seconds (default 600) of 1 s sampling against a
# local single-member etcd. Usage: benches/rss_10min.sh [SECONDS]
# Needs: etcd (Debian etcd-server), a release build (cargo build --release).
set -euo pipefail
secs=${1:-600}
root=$(cd "$(dirname "$0")/.." && pwd)
bin=$root/target/release/etcd-readiness-exporter
dir=$(mktemp -d)
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
cport=$(free_port); pport=$(free_port); wport=$(free_port)
cleanup() { kill "${exp_pid:-}" "${etcd_pid:-}" 2>/dev/null || true; wait 2>/dev/null || true; rm -rf "$dir"; }
trap cleanup EXIT
etcd --name b --data-dir "$dir/d" \
  --listen-client-urls "http://127.0.0.1:$cport" --advertise-client-urls "http://127.0.0.1:$cport" \
  --listen-peer-urls "http://127.0.0.1:$pport" --initial-advertise-peer-urls "http://127.0.0.1:$pport" \
  --initial-cluster "b=http://127.0.0.1:$pport" >"$dir/etcd.log" 2>&1 &
etcd_pid=$!
"$bin" --etcd.endpoint "http://127.0.0.1:$cport" --web.listen-address "127.0.0.1:$wport" \
  --sample.interval 1s --sample.timeout 500ms --log.level warn >"$dir/exp.log" 2>&1 &
exp_pid=$!
for _ in $(seq 50); do curl -sf "http://127.0.0.1:$wport/readyz" >/dev/null && break; sleep 0.2; done
rss() { awk '/VmRSS/ {print $2}' "/proc/$exp_pid/status"; }
echo "rss_kib_after_start=$(rss)"
sleep 60
echo "rss_kib_after_60s=$(rss)"
sleep $((secs - 60))
echo "rss_kib_after_${secs}s=$(rss)"
echo "readyz=$(curl -s "http://127.0.0.1:$wport/readyz")"
curl -s "http://127.0.0.1:$wport/metrics" | grep -E '^etcd_readiness_sample_duration_seconds_count|^process_resident_memory_bytes'
