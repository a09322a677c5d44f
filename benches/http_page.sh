#!/usr/bin/env bash
# Does the status page slow /readyz down? (/readyz throughput and
# p99 with the page fetched every second within 5 % of without.)
#
# Two designs, both on a local 3-member etcd cluster with the release exporter
# (default policy), the "page" being a client fetching the full status page
# `/` once a second (as an open browser tab would, and more: the page's own
# script fetches only `?part=live`, every 5 s); benches/ab_rounds.py runs the
# rounds and prints each change with a 95 % bootstrap interval, for req/s,
# p99 and the server's CPU per request:
#   simultaneous (default)  two identical exporters on member 1, A and B,
#       loaded by two wrk at once (THREADS and CONNECTIONS each); the page is
#       fetched from A in odd rounds and from B in even ones; each round
#       compares the paged exporter with the other one. Whatever slows the
#       shared machine during a round slows both, so it cancels.
#   SEQUENTIAL=1  one exporter, rounds in pairs without and with the page,
#       alternating the order within pairs (drift between rounds does not
#       cancel as well: single rounds vary by 15-25 % on this machine).
# CONTROL=1 runs the same rounds without ever fetching the page (an A/A run:
# the method's own resolution).
# Usage: benches/http_page.sh [ROUNDS=30] [SECONDS_PER_ROUND=3] [THREADS] [CONNECTIONS]
#   (THREADS/CONNECTIONS default to 1/8 per wrk when simultaneous, 2/16 when sequential)
# With PIN=1 (and at least 2 CPUs) the servers run on CPU 0 and wrk and the
# page client on CPU 1 (taskset).
# Needs: etcd, wrk, curl, python3, a release build (cargo build --release).
rounds=${1:-30}; secs=${2:-3}
if [ "${SEQUENTIAL:-0}" = 1 ]; then threads=${3:-2}; conns=${4:-16}; else threads=${3:-1}; conns=${4:-8}; fi
. "$(dirname "$0")/lib.sh"
start_etcd 3
a=$(free_port); b=$(free_port)
start_exporter "$a" "http://127.0.0.1:${C[1]}"; pid_a=$last_pid
start_exporter "$b" "http://127.0.0.1:${C[1]}"; pid_b=$last_pid
wait_ok "http://127.0.0.1:$a/readyz" "http://127.0.0.1:$b/readyz"
echo "nproc=$(nproc) pinned=${PIN:-0} page=$(curl -sf "http://127.0.0.1:$a/" | wc -c) bytes; load average $(cut -d' ' -f1-3 /proc/loadavg)"
args=(--url "http://127.0.0.1:$a/readyz" --page-url "http://127.0.0.1:$a/" --server-pid "$pid_a"
  --pairs "$rounds" --duration "$secs" --threads "$threads" --conns "$conns" --client-prefix "${cli[*]}")
[ "${SEQUENTIAL:-0}" = 1 ] || args+=(--url-b "http://127.0.0.1:$b/readyz" --page-url-b "http://127.0.0.1:$b/" --server-pid-b "$pid_b")
[ "${CONTROL:-0}" = 1 ] && args+=(--control)
python3 "$root/benches/ab_rounds.py" "${args[@]}"
echo "load average at the end $(cut -d' ' -f1-3 /proc/loadavg)"
