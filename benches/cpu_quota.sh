#!/usr/bin/env bash
# Does a CPU limit make the exporter call a healthy member "not ready"? A
# Kubernetes CPU limit is a CFS quota; a process that spent its quota is
# frozen until the period ends, while etcd's answers wait in its socket.
# Runs the release exporter in a cgroup v1 `cpu` group with QUOTA_US per
# 100 ms period (10000 = a 100m limit) against member 1 of a healthy local
# 3-member etcd cluster, under LOAD for SECONDS, and counts the verdict's
# transitions to "not ready" after the first ready (from its log; each one is
# a false not-ready: nothing happens to etcd), the /readyz probes (every
# 50 ms) that were not 200, and the throttled periods (cpu.stat).
#   LOAD: idle | scrape (GET /metrics every 1 s) | burst (wrk -t1 -c4 on
#         /readyz for 2 s every 10 s: enough to spend the quota) | flood
#         (wrk -t1 -c2 on /readyz the whole time: throttled in every period)
# Usage (root; cgroup v1 cpu controller at /sys/fs/cgroup/cpu):
#   benches/cpu_quota.sh [QUOTA_US=10000] [SECONDS=60] [LOAD=burst]
quota=${1:-10000}; secs=${2:-60}; load=${3:-burst}
. "$(dirname "$0")/lib.sh"
cg=/sys/fs/cgroup/cpu/ere-cpu-quota-$$
mkdir "$cg" || { echo "cannot create $cg (root and cgroup v1 cpu needed)" >&2; exit 1; }
echo 100000 >"$cg/cpu.cfs_period_us"; echo "$quota" >"$cg/cpu.cfs_quota_us"
trap 'bench_cleanup; rmdir "$cg" 2>/dev/null || true' EXIT
start_etcd 3
w=$(free_port)
spawn sh -c "echo \$\$ > $cg/cgroup.procs; exec $bin --etcd.endpoint http://127.0.0.1:${C[1]} --web.listen-address 127.0.0.1:$w" >"$dir/exp.log" 2>&1
wait_ok "http://127.0.0.1:$w/readyz"
ready_lines=$(grep -c 'member is not ready' "$dir/exp.log" || true)
stat() { awk -v k="$1" '$1==k {print $2}' "$cg/cpu.stat"; }
t0=$(stat nr_throttled); tt0=$(stat throttled_time)
( end=$((SECONDS + secs)); while [ $SECONDS -lt $end ]; do
    case $load in
      scrape) curl -s -o /dev/null "http://127.0.0.1:$w/metrics" ;;
      burst) [ $((SECONDS % 10)) = 0 ] && wrk -t1 -c4 -d2s "http://127.0.0.1:$w/readyz" >/dev/null ;;
      flood) wrk -t1 -c2 -d"${secs}s" "http://127.0.0.1:$w/readyz" >/dev/null; break ;;
    esac
    sleep 1
  done ) &
loader=$!; pids+=("$loader")
bad=0; n=0; end=$((SECONDS + secs))
while [ $SECONDS -lt $end ]; do
  c=$(curl -s -o /dev/null -m 1 -w '%{http_code}' "http://127.0.0.1:$w/readyz" || true)
  n=$((n + 1)); [ "$c" = 200 ] || bad=$((bad + 1))
  sleep 0.05
done
wait "$loader" || true
t1=$(stat nr_throttled); tt1=$(stat throttled_time)
blips=$(( $(grep -c 'member is not ready' "$dir/exp.log" || true) - ready_lines ))
echo "quota=${quota}us per 100ms load=$load seconds=$secs: false not-ready transitions=$blips probes=$n non200=$bad throttled_periods=$((t1 - t0)) throttled_ms=$(((tt1 - tt0) / 1000000))"
grep 'member is not ready' "$dir/exp.log" | tail -n "$blips" | cut -c1-220 || true
