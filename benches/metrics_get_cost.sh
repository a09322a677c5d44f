#!/usr/bin/env bash
# What reading the member's own /metrics costs (the default of
# --etcd.metrics-url): the same exporter against member 1 of a local
# 3-member etcd cluster, first with --etcd.metrics-url= (off), then with the
# default (the client port's /metrics), T seconds each. Prints GETs of
# /metrics per second, the body's size, and CPU-seconds per second of the
# exporter and of the etcd member (utime+stime from /proc/PID/stat).
#   BIN=target/release/etcd-readiness-exporter T=60 bash benches/metrics_get_cost.sh
source "$(dirname "$0")/lib.sh"
T=${T:-60}
start_etcd 3
wait_ok "http://127.0.0.1:${C[1]}/health"
hz=$(getconf CLK_TCK)
cpu() { awk -v hz="$hz" '{print ($14 + $15) / hz}' "/proc/$1/stat"; }
gets() {
  curl -fsS "http://127.0.0.1:$1/metrics" |
    awk '/^etcd_readiness_sample_duration_seconds_count\{source="etcd_metrics"\}/ {print $2; f=1} END {if (!f) print 0}'
}
run() {
  local what=$1; shift
  local port; port=$(free_port)
  start_exporter "$port" "http://127.0.0.1:${C[1]}" "$@"
  local pid=$last_pid
  wait_ok "http://127.0.0.1:$port/readyz"
  sleep 2
  local e0 m0 g0 e1 m1 g1
  e0=$(cpu "$pid"); m0=$(cpu "${M[1]}"); g0=$(gets "$port")
  sleep "$T"
  e1=$(cpu "$pid"); m1=$(cpu "${M[1]}"); g1=$(gets "$port")
  kill "$pid"; wait "$pid" 2>/dev/null || true
  awk -v w="$what" -v t="$T" -v e="$(echo "$e1 - $e0" | bc)" -v m="$(echo "$m1 - $m0" | bc)" -v g="$(echo "$g1 - $g0" | bc)" \
    'BEGIN {printf "%-34s /metrics GETs/s %.2f   exporter CPU-s/s %.4f   etcd member CPU-s/s %.4f\n", w, g/t, e/t, m/t}'
}
echo "etcd $(etcd --version | head -1 | awk '{print $3}'), /metrics body $(curl -fsS "http://127.0.0.1:${C[1]}/metrics" | wc -c) bytes, ${T}s each"
run "without (--etcd.metrics-url=)" --etcd.metrics-url=
run "with (the default)"
