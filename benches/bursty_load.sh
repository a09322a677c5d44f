#!/usr/bin/env bash
# A node busy for moments, beside another benchmark: HOGS busy-loop
# processes at nice 0 (default 2 × nproc), resumed for a burst of 100–500 ms,
# then stopped for 0.5–2 s (seeded, SEED), for DURATION seconds — the load
# of benches/cpu_contention.sh without its exporter and cluster, so that the
# fault benchmark can be run on a busy node (docs/BENCHMARKS.md):
#
#   benches/bursty_load.sh 900 & sudo python3 benches/fault_accuracy.py …; kill %1
#
# Prints the bursts and the node's contended CPU time (PSI `some`) at the
# end; every hog is killed on exit, whatever ends it.
set -euo pipefail
duration=${1:-600}
n=${HOGS:-$((2 * $(nproc)))}
hogs=()
cleanup() {
  for p in "${hogs[@]}"; do kill -CONT "$p" 2>/dev/null || true; kill "$p" 2>/dev/null || true; done
}
trap cleanup EXIT
trap 'exit 0' TERM INT
psi() { awk '/^some/ {for (i = 1; i <= NF; i++) if ($i ~ /^total=/) {sub("total=", "", $i); print $i}}' /proc/pressure/cpu 2>/dev/null || echo 0; }
psi0=$(psi)
# Each hog ignores SIGHUP: a stopped process whose group is orphaned (the
# shell that started this one exited) is sent SIGHUP by the kernel.
for _ in $(seq "$n"); do
  python3 -c $'import signal\nsignal.signal(signal.SIGHUP, signal.SIG_IGN)\nwhile True: pass' &
  hogs+=("$!")
done
kill -STOP "${hogs[@]}"
schedule=$(python3 -c "
import random, sys
r = random.Random(int(sys.argv[1])); t = 0; out = []
while t < int(sys.argv[2]) * 1000:
    b = r.randint(100, 500); g = r.randint(500, 2000); out.append(f'{b} {g}'); t += b + g
print('\n'.join(out))" "${SEED:-20}" "$duration")
bursts=0; burst_ms=0
start=$SECONDS
while read -r b g; do
  [ $((SECONDS - start)) -ge "$duration" ] && break
  kill -CONT "${hogs[@]}"
  sleep "$(awk -v b="$b" 'BEGIN {printf "%.3f", b / 1000}')"
  kill -STOP "${hogs[@]}"
  bursts=$((bursts + 1)); burst_ms=$((burst_ms + b))
  sleep "$(awk -v g="$g" 'BEGIN {printf "%.3f", g / 1000}')"
done <<<"$schedule"
echo "bursty_load: $n hogs (nice 0), $bursts bursts of 100-500 ms ($burst_ms ms in all) in $((SECONDS - start)) s; PSI some $(( ($(psi) - psi0) / 1000 )) ms"
