#!/usr/bin/env bash
# Serving cost: the exporter's /readyz vs etcd 3.4's own /health, loaded the
# same way on the same machine, in one run. Starts a local 3-member etcd
# cluster (free ports, temp dirs) and the release exporter on member 1.
# Usage: benches/http_readyz.sh [DURATION=10s] [THREADS=2] [CONNECTIONS=16]
# With PIN=1 (and at least 2 CPUs) the servers run on CPU 0 and wrk on CPU 1
# (taskset), so client and servers do not compete for the same core.
# Needs: etcd, etcdctl (etcd-server/etcd-client), wrk, a release build.
. "$(dirname "$0")/lib.sh"
dur=${1:-10s}; threads=${2:-2}; conns=${3:-16}
start_etcd 3
wport=$(free_port)
start_exporter "$wport" "http://127.0.0.1:${C[1]}"
wait_ok "http://127.0.0.1:$wport/readyz" "http://127.0.0.1:${C[1]}/health"
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
