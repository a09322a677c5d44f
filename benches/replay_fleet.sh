#!/usr/bin/env bash
# replay of a synthetic fleet (etcd_readiness_testkit::fleet: members in
# clusters of three, leader and qget_ms, values and knownness as the
# exporter exports them, one day at 15 s) from each store,
# written through its own ingestion path: Prometheus 3.5 (promtool blocks,
# one 2 h file at a time) and VictoriaMetrics 1.145 (/api/v1/import/prometheus).
# For each fleet size and store prints replay's wall time, user + system CPU,
# peak RSS (GNU time), the share of the wall time it did not compute,
# i.e. waited on the store: 1 - CPU / wall (replay runs on one thread), and
# the store's own CPU time meanwhile (/proc/PID/stat): on one machine the
# two share its cores, so replay's CPU next to the store's says which of
# them the run waited for.
# Then the same requests (recorded by strace from an untimed replay run
# first, which also warms the store as the timed one finds it) are only
# downloaded, by curl, as many at once as replay has batches in flight, to
# /dev/null: its wall time is what the store alone takes to answer them,
# and its CPU what merely receiving the answers costs a client. Replay's
# wall over that wall is what replay adds to the store's time.
#
# Usage: benches/replay_fleet.sh [MEMBERS...]   (default: 100 1000 5000)
# STORES: which (default "prometheus victoria-metrics").
# Needs: a release build (cargo build --release), the generator
# (cargo build -p etcd-readiness-testkit --bin fleet-history), GNU time,
# curl, strace, bookworm's promtool, .ci/fetch-binaries prometheus-3 victoria-metrics.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
target=${CARGO_TARGET_DIR:-$root/target}
bin=${BIN:-$target/release/etcd-readiness-exporter}
gen=${GEN:-$target/debug/fleet-history}
for x in "$bin" "$gen" /usr/bin/time /usr/bin/promtool /usr/bin/strace; do
  [ -x "$x" ] || { echo "missing $x (see Needs: above)" >&2; exit 1; }
done
prom=$(bash "$root/.ci/fetch-binaries" prometheus-3 | awk '{print $2}')/usr/bin/prometheus
vm=$(bash "$root/.ci/fetch-binaries" victoria-metrics | awk '{print $2}')/usr/bin/victoria-metrics
sizes=("$@"); [ ${#sizes[@]} -gt 0 ] || sizes=(100 1000 5000)
stores=${STORES:-prometheus victoria-metrics}
dir=$(mktemp -d)
pid=
cleanup() { [ -n "$pid" ] && kill "$pid" 2>/dev/null; wait 2>/dev/null || true; rm -rf "$dir"; }
trap cleanup EXIT
trap "exit 1" INT TERM
port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
wait_up() { for _ in $(seq 600); do curl -sf -o /dev/null "$1" && return 0; sleep 0.5; done; echo "not up: $1" >&2; exit 1; }
step=15 steps=5760
end=$(( $(date +%s) / 3600 * 3600 - 3600 ))
start=$(( end - step * steps ))
printf 'check leader: leader\ncheck fast: qget_ms < 300\n' >"$dir/candidate.policy"
echo "nproc=$(nproc) load=$(cut -d' ' -f1-3 /proc/loadavg) start=$start end=$end step=${step}s"
echo "| members | store | wall | CPU (user + sys) | peak RSS | waiting on the store | the store's CPU | download only: wall, curl's CPU, the store's CPU | replay's wall / download's |"
echo "|---|---|---|---|---|---|---|---|---|"
tick=$(getconf CLK_TCK)
store_cpu() { awk -v t="$tick" '{printf "%.2f", ($14 + $15) / t}' "/proc/$pid/stat"; }
for n in "${sizes[@]}"; do
  for store in $stores; do
    rm -rf "$dir/data"; mkdir -p "$dir/data"
    p=$(port)
    if [ "$store" = prometheus ]; then
      # promtool reads its whole input once per 2 h block: feed it one block at a time.
      for ((first = 0; first <= steps; first += 480)); do
        "$gen" openmetrics "$n" "$start" "$step" "$steps" "$first" $((first + 479)) >"$dir/block.om"
        promtool tsdb create-blocks-from openmetrics "$dir/block.om" "$dir/data" >/dev/null
      done
      rm -f "$dir/block.om"
      printf 'global:\n  scrape_interval: 15s\n' >"$dir/prometheus.yml"
      "$prom" --config.file="$dir/prometheus.yml" --storage.tsdb.path="$dir/data" \
        --web.listen-address="127.0.0.1:$p" --log.level=warn >"$dir/store.log" 2>&1 &
      pid=$!
      wait_up "http://127.0.0.1:$p/-/ready"
    else
      "$vm" -storageDataPath="$dir/data" -httpListenAddr="127.0.0.1:$p" -retentionPeriod=10y \
        -loggerLevel=WARN >"$dir/store.log" 2>&1 &
      pid=$!
      wait_up "http://127.0.0.1:$p/health"
      # Streamed (chunked): --data-binary would hold the whole body in memory.
      "$gen" promtext "$n" "$start" "$step" "$steps" |
        curl -sf -X POST -T - "http://127.0.0.1:$p/api/v1/import/prometheus"
      curl -sf "http://127.0.0.1:$p/internal/force_flush"
    fi
    replay=("$bin" replay --prometheus.url "http://127.0.0.1:$p" \
      --policy "$dir/candidate.policy" --start "$start" --end "$end" --step "${step}s" \
      --cluster-label namespace --format jsonl --output "$dir/out.jsonl")
    # The requests replay sends, as curl's configuration (untimed run).
    strace -f -qq -e trace=sendto,write,writev -s 65536 -o "$dir/requests.strace" "${replay[@]}" 2>"$dir/err" ||
      { echo "replay failed: $(cat "$dir/err")" >&2; exit 1; }
    grep -o 'GET /api/v1/[^ ]*' "$dir/requests.strace" |
      sed "s|^GET \(.*\)|url = \"http://127.0.0.1:$p\1\"\noutput = \"/dev/null\"|" >"$dir/curl.cfg"
    before=$(store_cpu)
    /usr/bin/time -f '%e %U %S %M' -o "$dir/time" "${replay[@]}" 2>"$dir/err" ||
      { echo "replay failed: $(cat "$dir/err")" >&2; exit 1; }
    after=$(store_cpu)
    read -r wall user sys kib <"$dir/time"
    # Replay's default --concurrency: 4 batches in flight, one request each.
    /usr/bin/time -f '%e %U %S' -o "$dir/dtime" curl -sS --no-progress-meter --fail --parallel --parallel-max 4 -K "$dir/curl.cfg"
    downloaded=$(store_cpu)
    read -r dwall duser dsys <"$dir/dtime"
    lines=$(wc -l <"$dir/out.jsonl")
    [ "$lines" = $((n + 1)) ] || { echo "$lines lines for $n members" >&2; exit 1; }
    requests=$(grep -c '^url' "$dir/curl.cfg")
    python3 - "$n" "$store" "$wall" "$user" "$sys" "$kib" "$before" "$after" "$dwall" "$duser" "$dsys" "$downloaded" "$requests" <<'PY'
import sys
n, store, wall, user, sys_, kib, before, after, dwall, duser, dsys, downloaded, requests = sys.argv[1:]
wall, cpu = float(wall), float(user) + float(sys_)
store_cpu = float(after) - float(before)
dwall, dcpu, dstore = float(dwall), float(duser) + float(dsys), float(downloaded) - float(after)
print(f"| {int(n):,} | {store} | {wall:.1f} s | {cpu:.2f} s ({user} + {sys_}) | {int(kib) / 1024:.1f} MiB | {1 - cpu / wall:.0%} | {store_cpu:.1f} s "
      f"| {dwall:.1f} s, {dcpu:.2f} s ({dcpu / dwall:.0%}), {dstore:.1f} s ({requests} requests) | {wall / dwall:.2f} |")
PY
    kill "$pid"; wait "$pid" 2>/dev/null || true; pid=
  done
done
