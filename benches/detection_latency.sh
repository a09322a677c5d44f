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
trials=${1:-10}
. "$(dirname "$0")/lib.sh"
start_etcd 3
W=$(free_port)
start_exporter "$W" "http://127.0.0.1:${C[1]}"
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
  kill -9 "${M[2]}" "${M[3]}"; wait "${M[2]}" "${M[3]}" 2>/dev/null || true
  quorum+=("$(wait_code 503 30)")
  start_member 2; start_member 3
  wait_code 200 60 >/dev/null
  kill -STOP "${M[1]}"
  frozen+=("$(wait_code 503 30)")
  kill -CONT "${M[1]}"
  wait_code 200 60 >/dev/null
done
echo "quorum lost -> 503: $(printf '%s\n' "${quorum[@]}" | stats)"
echo "member frozen -> 503: $(printf '%s\n' "${frozen[@]}" | stats)"
