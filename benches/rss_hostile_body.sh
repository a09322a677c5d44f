#!/usr/bin/env bash
# Peak RSS of the exporter (release build, a separate process) while its
# backup sidecar and a --config scrape source each serve a 500 MB /metrics
# body (benches/hostile_sidecar.py: one without a length, one with), next to
# a local single-member etcd. Samples /proc/PID/status VmRSS every 100 ms
# for SECONDS (default 30). Usage: benches/rss_hostile_body.sh [SECONDS]
# Needs: etcd, python3, a release build (cargo build --release).
secs=${1:-30}
. "$(dirname "$0")/lib.sh"
start_etcd 1
cport=${C[1]}; wport=$(free_port); hport=$(free_port)
spawn python3 "$root/benches/hostile_sidecar.py" "$hport" >"$dir/sidecar.log" 2>&1
cat >"$dir/sources.yaml" <<YAML
sources:
- name: declared
  url: http://127.0.0.1:$hport/declared
  interval: 1s
  timeout: 1s
  signals:
    declared_value: {metric: m}
YAML
for _ in $(seq 50); do curl -sf "http://127.0.0.1:$hport/healthz" >/dev/null && break; sleep 0.1; done
spawn "$bin" serve --etcd.endpoint "http://127.0.0.1:$cport" --web.listen-address "127.0.0.1:$wport" \
  --sample.interval 1s --sample.timeout 1s --log.level warn \
  --backup.url "http://127.0.0.1:$hport" --config "$dir/sources.yaml" >"$dir/exp.log" 2>&1
exp_pid=$last_pid
wait_ok "http://127.0.0.1:$wport/livez"
rss() { awk '/VmRSS/ {print $2}' "/proc/$exp_pid/status"; }
echo "rss_kib_after_start=$(rss)"
peak=0
end=$((SECONDS + secs))
while [ $SECONDS -lt $end ]; do
  r=$(rss); [ "$r" -gt "$peak" ] && peak=$r
  sleep 0.1
done
echo "rss_kib_peak_${secs}s=$peak"
echo "rss_kib_end=$(rss)"
echo "livez=$(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$wport/livez") readyz=$(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$wport/readyz")"
curl -s "http://127.0.0.1:$wport/signals" | python3 -c '
import json,sys
for s in json.load(sys.stdin):
    if s["name"] in ("snapshot_revision","declared_value"): print(s["name"], "->", s["last_error"])'
echo "sidecar responses: $(grep -c bytes_written "$dir/sidecar.log"), most bytes written on one: $(awk -F= "/bytes_written/ {if (\$2>m) m=\$2} END {print m+0}" "$dir/sidecar.log")"
curl -s "http://127.0.0.1:$wport/metrics" | grep -E '^etcd_readiness_sample_errors_total' || true
