#!/usr/bin/env bash
# Does the status page slow /readyz down? wrk loads /readyz of the release
# exporter (on member 1 of a local 3-member etcd cluster, default policy)
# alternately without and with a client fetching the full status page `/`
# once a second (as an open browser tab would, and more: the page's own
# script fetches only `?part=live`, every 5 s). ROUNDS rounds of each,
# interleaved (off, on, off, on, ...) so drift on a shared machine hits both
# alike; prints every run, then the median and the spread (min–max) of each.
# Usage: benches/http_page.sh [DURATION=10s] [ROUNDS=5] [THREADS=2] [CONNECTIONS=16]
# With PIN=1 (and at least 2 CPUs) the servers run on CPU 0 and wrk and the
# page client on CPU 1 (taskset).
# Needs: etcd, wrk, curl, python3, a release build (cargo build --release).
set -euo pipefail
dur=${1:-10s}; rounds=${2:-5}; threads=${3:-2}; conns=${4:-16}
root=$(cd "$(dirname "$0")/.." && pwd)
bin=${CARGO_TARGET_DIR:-$root/target}/release/etcd-readiness-exporter
[ -x "$bin" ] || { echo "no release build at $bin (cargo build --release)"; exit 1; }
dir=$(mktemp -d)
srv=(); cli=()
if [ "${PIN:-0}" = 1 ] && [ "$(nproc)" -ge 2 ]; then srv=(taskset -c 0); cli=(taskset -c 1); fi
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
pids=()
pager=
cleanup() {
  [ -n "$pager" ] && kill "$pager" 2>/dev/null || true
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$dir"
}
trap cleanup EXIT
declare -a C P
for i in 1 2 3; do C[$i]=$(free_port); P[$i]=$(free_port); done
initial="m1=http://127.0.0.1:${P[1]},m2=http://127.0.0.1:${P[2]},m3=http://127.0.0.1:${P[3]}"
for i in 1 2 3; do
  "${srv[@]}" etcd --name "m$i" --data-dir "$dir/m$i" \
    --listen-client-urls "http://127.0.0.1:${C[$i]}" --advertise-client-urls "http://127.0.0.1:${C[$i]}" \
    --listen-peer-urls "http://127.0.0.1:${P[$i]}" --initial-advertise-peer-urls "http://127.0.0.1:${P[$i]}" \
    --initial-cluster "$initial" --initial-cluster-state new >"$dir/m$i.log" 2>&1 &
  pids+=($!)
done
wport=$(free_port)
"${srv[@]}" "$bin" --etcd.endpoint "http://127.0.0.1:${C[1]}" --web.listen-address "127.0.0.1:$wport" --log.level warn >"$dir/exp.log" 2>&1 &
pids+=($!)
ready=
for _ in $(seq 150); do
  if curl -sf "http://127.0.0.1:$wport/readyz" >/dev/null; then ready=1; break; fi
  sleep 0.2
done
[ -n "$ready" ] || { echo "cluster/exporter not ready"; cat "$dir/exp.log"; exit 1; }
page_bytes=$(curl -sf "http://127.0.0.1:$wport/" | wc -c)
url="http://127.0.0.1:$wport/readyz"
# The page client: one full page a second, counted, every fetch checked.
start_pager() {
  : >"$dir/pager.log"
  ( while :; do
      if curl -sf -o /dev/null -w '%{http_code} %{time_total}\n' "http://127.0.0.1:$wport/" >>"$dir/pager.log"; then :; else echo fail >>"$dir/pager.log"; fi
      sleep 1
    done ) &
  pager=$!
}
stop_pager() { kill "$pager" 2>/dev/null || true; wait "$pager" 2>/dev/null || true; pager=; }
to_ms() { awk '{v=$1; if (v ~ /us$/) {sub(/us$/,"",v); v/=1000} else if (v ~ /ms$/) {sub(/ms$/,"",v)} else if (v ~ /s$/) {sub(/s$/,"",v); v*=1000}; printf "%.3f\n", v}'; }
echo "nproc=$(nproc) pinned=${PIN:-0} wrk -t$threads -c$conns -d$dur --latency $url; rounds=$rounds; page=$page_bytes bytes"
: >"$dir/off"; : >"$dir/on"
for r in $(seq "$rounds"); do
  for mode in off on; do
    [ "$mode" = on ] && start_pager
    out=$("${cli[@]}" wrk -t"$threads" -c"$conns" -d"$dur" --latency "$url")
    pages=
    if [ "$mode" = on ]; then
      stop_pager
      fails=$(grep -c fail "$dir/pager.log" || true)
      pages="pages=$(grep -c '^200 ' "$dir/pager.log" || true) page_fail=$fails page_max_s=$(awk '$1==200 {if ($2>m) m=$2} END {print m+0}' "$dir/pager.log")"
    fi
    rps=$(awk '/Requests\/sec/ {print $2}' <<<"$out")
    p99=$(awk '$1=="99%" {print $2}' <<<"$out" | to_ms)
    non2xx=$(awk '/Non-2xx/ {print $NF}' <<<"$out")
    echo "round $r page=$mode: req/s=$rps p99_ms=$p99 non2xx=${non2xx:-0} $pages"
    echo "$rps $p99" >>"$dir/$mode"
  done
done
summary() {
  python3 - "$dir/off" "$dir/on" <<'PY'
import statistics, sys
def load(p):
    rows = [l.split() for l in open(p) if l.strip()]
    return [float(r[0]) for r in rows], [float(r[1]) for r in rows]
(ro, po), (rn, pn) = load(sys.argv[1]), load(sys.argv[2])
m = statistics.median
for name, r, p in (("without page", ro, po), ("with page/1s", rn, pn)):
    print(f"{name}: req/s median {m(r):.0f} (min {min(r):.0f}, max {max(r):.0f}); p99 median {m(p):.3f} ms (min {min(p):.3f}, max {max(p):.3f})")
print(f"with/without: req/s {100*(m(rn)/m(ro)-1):+.1f} %, p99 {100*(m(pn)/m(po)-1):+.1f} % (medians)")
PY
}
summary
