#!/usr/bin/env bash
# Does a healthy member stay ready while its node is CPU-contended for
# moments? A local 3-member etcd cluster, the exporter (default policy and
# sampling) on member 1, and a CPU hog at the same priority (nice 0) as both:
# 2 × nproc busy-loop processes, resumed for a burst of 100–500 ms, then
# stopped for 0.5–2 s (random, seeded), for DURATION seconds; every
# CHROMIUM_EVERY seconds a headless Chromium also starts and loads the
# exporter's status page (the start that made healthy members flap).
# Counts readiness transitions (etcd_readiness_transitions_total, and the
# exporter's transition log lines) over the run: a healthy member must show
# 0. Also prints the bursts, their total time, and the node's contended CPU
# time over the run (PSI `some`), so a quiet run cannot pass for a loaded one.
# Usage: benches/cpu_contention.sh [DURATION=600] [CHROMIUM_EVERY=60]
# Environment: BIN (the exporter binary; default the release build), SEED,
# HOGS (busy processes; default 2 × nproc).
duration=${1:-600}
chromium_every=${2:-60}
. "$(dirname "$0")/lib.sh"
load=
contention_cleanup() {
  [ -z "$load" ] || kill "$load" 2>/dev/null || true
  bench_cleanup
}
trap contention_cleanup EXIT

start_etcd 3
W=$(free_port)
# Info level: one log line per readiness or check transition.
spawn "$bin" --etcd.endpoint "http://127.0.0.1:${C[1]}" --web.listen-address "127.0.0.1:$W" \
  --log.level info >>"$dir/exporter.log" 2>&1
wait_ok "http://127.0.0.1:$W/readyz"
# Settle: the first healthy verdict, then a few seconds.
sleep 5
metric() { curl -sf -m 2 "http://127.0.0.1:$W/metrics" | awk -v m="$1" '$1 == m {print $2}'; }
psi() { awk '/^some/ {for (i = 1; i <= NF; i++) if ($i ~ /^total=/) {sub("total=", "", $i); print $i}}' /proc/pressure/cpu 2>/dev/null || echo 0; }
t0_transitions=$(metric etcd_readiness_transitions_total)
log_lines0=$(wc -l <"$dir/exporter.log")
psi0=$(psi)

# The load: benches/bursty_load.sh (HOGS, SEED), beside the Chromium starts.
"$(dirname "$0")/bursty_load.sh" "$duration" >"$dir/load.log" 2>&1 &
load=$!

chromium_run() {
  local ud
  ud=$(mktemp -d "$dir/chromium.XXXXXX")
  timeout 60 chromium --headless --no-sandbox --disable-gpu --disable-quic --no-first-run \
    --disable-background-networking --disable-component-update --disable-sync \
    --user-data-dir="$ud" --screenshot="$ud/shot.png" --window-size=1200,900 \
    "http://127.0.0.1:$W/" >/dev/null 2>&1 || true
}

chromiums=0
start=$SECONDS; next_chromium=$((SECONDS + chromium_every))
while kill -0 "$load" 2>/dev/null; do
  if command -v chromium >/dev/null && [ "$SECONDS" -ge "$next_chromium" ]; then
    chromium_run & chromiums=$((chromiums + 1)); next_chromium=$((SECONDS + chromium_every))
  fi
  sleep 1
done
wait_chromium() { for _ in $(seq 60); do pgrep -f "user-data-dir=$dir/chromium" >/dev/null || return 0; sleep 1; done; }
wait_chromium
sleep 2
t1_transitions=$(metric etcd_readiness_transitions_total)
psi1=$(psi)
transitions=$(( ${t1_transitions%.*} - ${t0_transitions%.*} ))
echo "duration=$((SECONDS - start)) s  $(cat "$dir/load.log")  chromium starts=$chromiums"
echo "node CPU contended (PSI some) during the run: $(( (psi1 - psi0) / 1000 )) ms"
echo "binary: $bin"
echo "readiness transitions: $transitions"
echo "transition log lines:"
tail -n +"$((log_lines0 + 1))" "$dir/exporter.log" | grep -E 'transition|not ready|ready' | head -20 || true
echo "readyz at the end: $(curl -s -m 2 -o /dev/null -w '%{http_code}' "http://127.0.0.1:$W/readyz")"
