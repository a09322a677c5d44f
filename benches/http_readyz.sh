#!/usr/bin/env bash
# Serving cost: the exporter's /readyz vs etcd 3.4's own /health, loaded the
# same way on the same machine, in one run. Starts a local 3-member etcd
# cluster (free ports, temp dirs) and the release exporter on member 1.
# Usage: benches/http_readyz.sh [DURATION=10s] [THREADS=2] [CONNECTIONS=16]
# With PIN=1 (and at least 2 CPUs) the servers run on CPU 0 and wrk on CPU 1
# (taskset), so client and servers do not compete for the same core.
# Needs: etcd, etcdctl (etcd-server/etcd-client), wrk, a release build.
set -euo pipefail
dur=${1:-10s}; threads=${2:-2}; conns=${3:-16}
root=$(cd "$(dirname "$0")/.." && pwd)
bin=$root/target/release/etcd-readiness-exporter
dir=$(mktemp -d)
srv=(); cli=()
if [ "${PIN:-0}" = 1 ] && [ "$(nproc)" -ge 2 ]; then srv=(taskset -c 0); cli=(taskset -c 1); fi
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; rm -rf "$dir"; }
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
  if curl -sf "http://127.0.0.1:$wport/readyz" >/dev/null && curl -sf "http://127.0.0.1:${C[1]}/health" >/dev/null; then ready=1; break; fi
  sleep 0.2
done
[ -n "$ready" ] || { echo "cluster/exporter not ready"; cat "$dir/exp.log"; exit 1; }
status() { ETCDCTL_API=3 etcdctl --endpoints "http://127.0.0.1:${C[1]}" endpoint status -w json | python3 -c 'import json,sys; print(json.load(sys.stdin)[0]["Status"]["raftIndex"])'; }
echo "nproc=$(nproc) pinned=${PIN:-0} wrk -t$threads -c$conns -d$dur --latency"
for target in "exporter /readyz|http://127.0.0.1:$wport/readyz" "etcd /health|http://127.0.0.1:${C[1]}/health"; do
  name=${target%%|*}; url=${target#*|}
  before=$(status)
  out=$("${cli[@]}" wrk -t"$threads" -c"$conns" -d"$dur" --latency "$url")
  after=$(status)
  rps=$(awk '/Requests\/sec/ {print $2}' <<<"$out")
  p99=$(awk '$1=="99%" {print $2}' <<<"$out")
  non2xx=$(awk '/Non-2xx/ {print $NF}' <<<"$out")
  echo "$name: req/s=$rps p99=$p99 non2xx=${non2xx:-0} raft_index_growth=$((after - before))"
done
