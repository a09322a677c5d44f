#!/usr/bin/env bash
# /readyz latency while clients misbehave. Starts one local etcd
# member (free ports, temp dir) and the release exporter under
# `prlimit --nofile=1024:1024`, then:
#   idle: a Python client opens and holds 1,100 idle TCP connections (the
#         exporter's timeouts are set to 1h, so only the connection cap and
#         eviction protect the probe) while curl probes /readyz;
#   h2c:  h2load floods /readyz with 100 connections x 100 streams while curl
#         probes /readyz over HTTP/1.
# Each probe is one curl (new connection, like the kubelet) with --max-time 5;
# figures are curl's time_total. Prints p50/p95/p99/max and non-200 count.
# Usage: benches/http_hardening.sh [PROBES=300] [FLOOD_SECONDS=10]
# Needs: etcd, curl, python3, h2load (nghttp2-client), prlimit, a release build.
probes=${1:-300}; flood=${2:-10}
. "$(dirname "$0")/lib.sh"
start_etcd 1
cport=${C[1]}; wport=$(free_port)
spawn prlimit --nofile=1024:1024 -- "$bin" --etcd.endpoint "http://127.0.0.1:$cport" \
  --web.listen-address "127.0.0.1:$wport" --log.level warn \
  --web.max-connections 5000 --web.read-header-timeout 1h --web.idle-timeout 1h >"$dir/exp.log" 2>&1
exporter=$last_pid
url="http://127.0.0.1:$wport"
wait_ok "$url/readyz"

# Run $probes probes 20 ms apart; print the summary line.
probe() {
  local out=$dir/probe.txt; : >"$out"
  for _ in $(seq "$probes"); do
    curl -s -o /dev/null --max-time 5 -w '%{http_code} %{time_total}\n' "$url/readyz" >>"$out" || echo "000 5" >>"$out"
    sleep 0.02
  done
  python3 - "$out" <<'EOF'
import sys
rows = [l.split() for l in open(sys.argv[1]) if l.strip()]
t = sorted(float(r[1]) * 1000 for r in rows)
q = lambda p: t[min(len(t) - 1, int(p * len(t)))]
bad = sum(1 for r in rows if r[0] != "200")
print(f"probes={len(t)} p50={q(.5):.2f}ms p95={q(.95):.2f}ms p99={q(.99):.2f}ms max={t[-1]:.2f}ms non200={bad}")
EOF
}
metrics() {
  curl -s "$url/metrics" | grep -E '^etcd_readiness_http_(connections|connections_limit|connections_evicted_total|connections_rejected_total|accept_errors_total) ' | tr '\n' ' '
  echo "fds=$(ls /proc/$exporter/fd | wc -l)"
}

echo "nproc=$(nproc) load=$(cut -d' ' -f1 /proc/loadavg) nofile=$(awk '/Max open files/ {print $4}' /proc/$exporter/limits)"
echo "baseline: $(probe)"

python3 - "$wport" >"$dir/held.txt" 2>&1 <<'EOF' &
import socket, sys, time
port = int(sys.argv[1]); held = []
for _ in range(1100):
    s = socket.create_connection(("127.0.0.1", port), timeout=5)
    held.append(s)
print("held", len(held), flush=True)
time.sleep(3600)
EOF
holder=$!; pids+=($holder)
for _ in $(seq 100); do grep -q held "$dir/held.txt" && break; sleep 0.1; done
cat "$dir/held.txt"
echo "idle x1100: $(probe)"
echo "  $(metrics)"
kill "$holder"; wait "$holder" 2>/dev/null || true

h2load -D "$flood" -c 100 -m 100 "$url/readyz" >"$dir/h2load.txt" 2>&1 &
h2=$!; pids+=($h2)
sleep 1
echo "h2c 100x100: $(probe)"
wait "$h2" || true
grep -E '^(finished|requests|status codes)' "$dir/h2load.txt" | sed 's/^/  h2load: /'
echo "  $(metrics)"
kill -0 "$exporter" && echo "exporter alive"
