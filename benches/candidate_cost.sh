#!/usr/bin/env bash
# Does a candidate policy slow /readyz down? (The aim: with a candidate as
# large as the live policy, /readyz throughput and p99 within the resolution
# of the paired-rounds method of without.)
#
# benches/ab_rounds.py's simultaneous design with no page (--control): two
# exporters on member 1 of a local 3-member cluster, both with the default
# policy, A also with `--policy.candidate` naming a copy of it (as large as
# the live policy, evaluated at every evaluation), B without; both loaded by
# their own wrk at once in every round, so whatever slows the machine slows
# both and cancels. The figure is "A vs B" (req/s, p99, server CPU per
# request) with a 95 % bootstrap interval over the rounds.
# AA=1 gives neither a candidate: the same figure is then the method's own
# resolution for this machine and moment.
# Usage: benches/candidate_cost.sh [ROUNDS=30] [SECONDS_PER_ROUND=3] [THREADS=1] [CONNECTIONS=8]
# With PIN=1 (and at least 2 CPUs) the servers run on CPU 0, wrk on CPU 1.
# Needs: etcd, wrk, curl, python3, a release build (cargo build --release).
rounds=${1:-30}; secs=${2:-3}; threads=${3:-1}; conns=${4:-8}
. "$(dirname "$0")/lib.sh"
start_etcd 3
cp "$root/policies/default.policy" "$dir/candidate.policy"
a=$(free_port); b=$(free_port)
if [ "${AA:-0}" = 1 ]; then
  start_exporter "$a" "http://127.0.0.1:${C[1]}"; pid_a=$last_pid
else
  start_exporter "$a" "http://127.0.0.1:${C[1]}" --policy.candidate "$dir/candidate.policy"; pid_a=$last_pid
fi
start_exporter "$b" "http://127.0.0.1:${C[1]}"; pid_b=$last_pid
wait_ok "http://127.0.0.1:$a/readyz" "http://127.0.0.1:$b/readyz"
if [ "${AA:-0}" != 1 ]; then
  code=$(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$a/readyz?policy=candidate")
  [ "$code" = 409 ] || { echo "A has no candidate in force (/readyz?policy=candidate answered $code)" >&2; exit 1; }
fi
echo "nproc=$(nproc) pinned=${PIN:-0} A: candidate=$([ "${AA:-0}" = 1 ] && echo none || echo default.policy) B: none; load average $(cut -d' ' -f1-3 /proc/loadavg)"
python3 "$root/benches/ab_rounds.py" --control \
  --url "http://127.0.0.1:$a/readyz" --page-url "http://127.0.0.1:$a/" --server-pid "$pid_a" \
  --url-b "http://127.0.0.1:$b/readyz" --page-url-b "http://127.0.0.1:$b/" --server-pid-b "$pid_b" \
  --pairs "$rounds" --duration "$secs" --threads "$threads" --conns "$conns" --client-prefix "${cli[*]}"
echo "load average at the end $(cut -d' ' -f1-3 /proc/loadavg)"
