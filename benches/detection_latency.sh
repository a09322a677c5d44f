#!/usr/bin/env bash
# How fast does /readyz notice? A local 3-member etcd 3.4 cluster (default
# heartbeat 100ms / election timeout 1000ms), the release exporter on member 1
# with the default policy and default sampling (--sample.interval 1s,
# --sample.timeout 500ms). Per trial, the time from the fault to the first
# 503 of /readyz (polled every 10 ms), for:
#   quorum:  members 2 and 3 killed (SIGKILL)
#   frozen:  member 1 itself frozen (SIGSTOP: its port stays open, nothing answers)
# then the cluster is restored and the next trial waits for 200 again.
# The bound the design promises is 2 intervals + the timeout (2.5 s).
# Usage: benches/detection_latency.sh [TRIALS=10]
set -euo pipefail
trials=${1:-10}
root=$(cd "$(dirname "$0")/.." && pwd)
bin=$root/target/release/etcd-readiness-exporter
dir=$(mktemp -d)
free_ports() { python3 -c 'import socket,sys
ss=[socket.socket() for _ in range(int(sys.argv[1]))]
[s.bind(("127.0.0.1",0)) for s in ss]
print(" ".join(str(s.getsockname()[1]) for s in ss))' "$1"; }
read -r C1 C2 C3 P1 P2 P3 W <<<"$(free_ports 7)"
C=("" "$C1" "$C2" "$C3"); P=("" "$P1" "$P2" "$P3"); declare -a PID
initial="m1=http://127.0.0.1:$P1,m2=http://127.0.0.1:$P2,m3=http://127.0.0.1:$P3"
start_member() {
  etcd --name "m$1" --data-dir "$dir/m$1" \
    --listen-client-urls "http://127.0.0.1:${C[$1]}" --advertise-client-urls "http://127.0.0.1:${C[$1]}" \
    --listen-peer-urls "http://127.0.0.1:${P[$1]}" --initial-advertise-peer-urls "http://127.0.0.1:${P[$1]}" \
    --initial-cluster "$initial" --initial-cluster-state new >>"$dir/m$1.log" 2>&1 &
  PID[$1]=$!
}
EXP=
cleanup() {
  for i in 1 2 3; do [ -n "${PID[$i]:-}" ] && { kill -CONT "${PID[$i]}" 2>/dev/null; kill "${PID[$i]}" 2>/dev/null; } || true; done
  [ -n "$EXP" ] && kill "$EXP" 2>/dev/null || true
  wait 2>/dev/null || true
  rm -rf "$dir"
}
trap cleanup EXIT
for i in 1 2 3; do start_member "$i"; done
"$bin" --etcd.endpoint "http://127.0.0.1:$C1" --web.listen-address "127.0.0.1:$W" --log.level warn >"$dir/exp.log" 2>&1 &
EXP=$!
code() { curl -s -o /dev/null -m 2 -w '%{http_code}' "http://127.0.0.1:$W/readyz" || true; }
wait_code() { # wait_code CODE SECONDS -> prints elapsed ms, fails on deadline
  local want=$1 limit=$2 t0 now
  t0=$(date +%s%N)
  while :; do
    [ "$(code)" = "$want" ] && break
    now=$(date +%s%N)
    if [ $(( (now - t0) / 1000000 )) -gt $((limit * 1000)) ]; then echo "no $want within ${limit}s" >&2; return 1; fi
    sleep 0.01
  done
  echo $(( ($(date +%s%N) - t0) / 1000000 ))
}
wait_code 200 60 >/dev/null
stats() { sort -n | awk '{a[NR]=$1} END {printf "min %d ms  median %d ms  max %d ms  (n=%d)\n", a[1], a[int((NR+1)/2)], a[NR], NR}'; }
echo "trials=$trials interval=1s timeout=500ms, polled every 10 ms"
quorum=(); frozen=()
for t in $(seq "$trials"); do
  kill -9 "${PID[2]}" "${PID[3]}"; wait "${PID[2]}" "${PID[3]}" 2>/dev/null || true
  quorum+=("$(wait_code 503 30)")
  start_member 2; start_member 3
  wait_code 200 60 >/dev/null
  kill -STOP "${PID[1]}"
  frozen+=("$(wait_code 503 30)")
  kill -CONT "${PID[1]}"
  wait_code 200 60 >/dev/null
done
echo "quorum lost -> 503: $(printf '%s\n' "${quorum[@]}" | stats)"
echo "member frozen -> 503: $(printf '%s\n' "${frozen[@]}" | stats)"
