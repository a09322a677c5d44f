#!/usr/bin/env bash
# RSS of the exporter after N seconds (default 600) of 1 s sampling against a
# local single-member etcd. Usage: benches/rss_10min.sh [SECONDS]
# Needs: etcd (Debian etcd-server), a release build (cargo build --release).
# Fails (exit 1) when the last VmRSS is over RSS_BUDGET_KIB (default 10240,
# 10 MiB: issue 48; the goal is 8 MiB).
secs=${1:-600}
. "$(dirname "$0")/lib.sh"
start_etcd 1
wport=$(free_port)
spawn "$bin" --etcd.endpoint "http://127.0.0.1:${C[1]}" --web.listen-address "127.0.0.1:$wport" \
  --sample.interval 1s --sample.timeout 500ms --log.level warn >"$dir/exp.log" 2>&1
exp_pid=$last_pid
wait_ok "http://127.0.0.1:$wport/readyz"
rss() { awk '/VmRSS/ {print $2}' "/proc/$exp_pid/status"; }
echo "rss_kib_after_start=$(rss)"
sleep 60
echo "rss_kib_after_60s=$(rss)"
sleep $((secs - 60))
last=$(rss)
echo "rss_kib_after_${secs}s=$last"
# Where it is: anonymous (heap, stacks) or file-backed, and of the latter
# how much is the binary's own code (its r-x mapping: pages the kernel
# faulted in around the code that ran, shared with the page cache).
grep -E '^(RssAnon|RssFile):' "/proc/$exp_pid/status" | tr -s ' \t' ' '
awk -v bin="$(readlink -f "$bin")" '$0 ~ /^[0-9a-f]+-[0-9a-f]+ / {m = ($2 ~ /x/ && $6 == bin)} m && /^Rss:/ {print "binary_text_rss_kib=" $2}' "/proc/$exp_pid/smaps"
echo "readyz=$(curl -s "http://127.0.0.1:$wport/readyz")"
curl -s "http://127.0.0.1:$wport/metrics" | grep -E '^etcd_readiness_sample_duration_seconds_count|^process_resident_memory_bytes'
budget=${RSS_BUDGET_KIB:-10240}
if [ "$last" -gt "$budget" ]; then
  echo "FAIL: VmRSS ${last} KiB is over the budget of ${budget} KiB (code resident: see binary_text_rss_kib; benches/text_order.sh)" >&2
  exit 1
fi
echo "ok: VmRSS ${last} KiB within ${budget} KiB"
