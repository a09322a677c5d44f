#!/usr/bin/env bash
# What does the costliest valid policy cost? Two release exporters beside
# one real etcd member, measured in the same run: D with the default policy,
# W with benches/worst_policy.py's policy as both --policy and
# --policy.candidate. For each, in two phases:
#   healthy  etcd serving: the engine evaluates on every sample (10 rounds
#            a second at the default --sample.interval 1s) and every 250 ms
#   frozen   etcd stopped (SIGSTOP): every call is pending, so the engine
#            evaluates every 20 ms (its highest rate) and every check
#            fails and is explained
# the exporter's CPU as CPU-seconds per wall second (utime + stime of the
# process from /proc/PID/stat, so other load on a shared machine does not
# count), idle; then /readyz under wrk (req/s and p99; W answers 503, D 200
# while healthy, both 503 while frozen: what is compared is the latency).
# Usage: benches/policy_cost.sh [SECONDS=20] [WRK_DURATION=10s] [THREADS=1] [CONNECTIONS=8]
# With PIN=1 (and at least 2 CPUs) the servers run on CPU 0, wrk on CPU 1.
# Needs: etcd, wrk, curl, python3, a release build (cargo build --release).
secs=${1:-20}; wdur=${2:-10s}; threads=${3:-1}; conns=${4:-8}
. "$(dirname "$0")/lib.sh"
python3 "$root/benches/worst_policy.py" --check "$bin" >"$dir/worst.policy"
start_etcd 1
d=$(free_port); w=$(free_port)
start_exporter "$d" "http://127.0.0.1:${C[1]}"; pid_d=$last_pid
start_exporter "$w" "http://127.0.0.1:${C[1]}" --policy "$dir/worst.policy" --policy.candidate "$dir/worst.policy"; pid_w=$last_pid
wait_ok "http://127.0.0.1:$d/readyz" "http://127.0.0.1:$w/livez"
code=$(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$w/readyz?policy=candidate")
[ "$code" = 409 ] || { echo "W has no candidate in force (/readyz?policy=candidate answered $code)" >&2; exit 1; }
echo "nproc=$(nproc) pinned=${PIN:-0} worst policy: $(wc -c <"$dir/worst.policy") bytes, $(grep -c '^check' "$dir/worst.policy") checks, $(grep -c '^let' "$dir/worst.policy") lets; load average $(cut -d' ' -f1-3 /proc/loadavg)"
# CPU-seconds (utime + stime) of PID so far.
cpu() { python3 -c 'import os,sys; f=open(f"/proc/{sys.argv[1]}/stat").read().rsplit(")",1)[1].split(); print((int(f[11])+int(f[12]))/os.sysconf("SC_CLK_TCK"))' "$1"; }
phase() {
  local name=$1 t0 t1 cd0 cd1 cw0 cw1
  sleep 2
  cd0=$(cpu "$pid_d"); cw0=$(cpu "$pid_w"); t0=$(date +%s.%N)
  sleep "$secs"
  cd1=$(cpu "$pid_d"); cw1=$(cpu "$pid_w"); t1=$(date +%s.%N)
  python3 -c 'import sys; n,t0,t1,a0,a1,b0,b1=sys.argv[1],*map(float,sys.argv[2:]); w=t1-t0; print(f"{n}: idle CPU-s/s default={(a1-a0)/w:.4f} worst={(b1-b0)/w:.4f} over {w:.1f} s")' "$name" "$t0" "$t1" "$cd0" "$cd1" "$cw0" "$cw1"
  for target in "default|$d" "worst|$w"; do
    local who=${target%%|*} port=${target#*|} out
    out=$("${cli[@]}" wrk -t"$threads" -c"$conns" -d"$wdur" --latency "http://127.0.0.1:$port/readyz")
    echo "$name: $who /readyz req/s=$(awk '/Requests\/sec/ {print $2}' <<<"$out") p50=$(awk '$1=="50%" {print $2}' <<<"$out") p99=$(awk '$1=="99%" {print $2}' <<<"$out") non2xx=$(awk '/Non-2xx/ {print $NF}' <<<"$out")"
  done
}
phase healthy
kill -STOP "${M[1]}"
phase frozen
kill -CONT "${M[1]}"
echo "load average at the end $(cut -d' ' -f1-3 /proc/loadavg)"
