#!/usr/bin/env bash
# The example run of docs/replay.md: an hour of history for two members (the
# scenario of tests/serve/replay.rs: a short latency spike, a longer rise to 400 ms,
# an apply lag, a leader loss and a 10-minute scrape gap on etcd-0; etcd-1
# healthy), recorded under the reference policy `leader && qget_ms < 500`,
# built with promtool, served by Prometheus on a free loopback port, and
# replayed with a stricter candidate. Writes docs/replay-example.{text,json,svg}.
# Usage: docs/replay-example.sh [BINARY]   (default target/debug/etcd-readiness-exporter)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
bin=${1:-$root/target/debug/etcd-readiness-exporter}
dir=$(mktemp -d)
cleanup() { kill "${prom_pid:-}" 2>/dev/null || true; wait 2>/dev/null || true; rm -rf "$dir"; }
trap cleanup EXIT
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
# Fixed times, so the committed output does not change from run to run:
# 2026-11-30T06:00:00Z (Prometheus' retention counts back from its newest
# block, so old history stays); pass B=... to move it.
b=${B:-1796018400}

python3 - "$b" >"$dir/history.om" <<'PY'
import sys
b = int(sys.argv[1])
def sample(m, j):
    s = dict(leader=1, qget_ms=20, apply_lag=3)
    if m == "etcd-1":
        return s
    if 40 <= j <= 41: s["qget_ms"] = 800
    elif 80 <= j <= 99: s["qget_ms"] = 400
    elif 120 <= j <= 123: s["apply_lag"] = 500
    elif 150 <= j <= 159: s["leader"] = 0
    elif 180 <= j <= 219: return None
    return s
members = ["etcd-0", "etcd-1"]
lab = lambda m: f'instance="{m}:9379",job="etcd-readiness",pod="{m}"'
out = sys.stdout
out.write("# HELP etcd_readiness_ready ready\n# TYPE etcd_readiness_ready gauge\n")
for m in members:
    for j in range(241):
        s = sample(m, j)
        if s:
            r = int(s["leader"] == 1 and s["qget_ms"] < 500)
            out.write(f"etcd_readiness_ready{{{lab(m)}}} {r} {b + 15*j - 5}\n")
for fam in ["value", "known"]:
    out.write(f"# HELP etcd_readiness_signal_{fam} {fam}\n# TYPE etcd_readiness_signal_{fam} gauge\n")
    for m in members:
        for sig in ["leader", "qget_ms", "apply_lag"]:
            for j in range(241):
                s = sample(m, j)
                if s:
                    x = 1 if fam == "known" else s[sig]
                    out.write(f'etcd_readiness_signal_{fam}{{{lab(m)},signal="{sig}",source="etcd"}} {x} {b + 15*j - 5}\n')
out.write("# EOF\n")
PY
promtool tsdb create-blocks-from openmetrics "$dir/history.om" "$dir/data" >/dev/null
printf 'global:\n  scrape_interval: 15s\n' >"$dir/prometheus.yml"
prometheus --config.file="$dir/prometheus.yml" --storage.tsdb.path="$dir/data" \
  --web.listen-address="127.0.0.1:$port" --log.level=warn >"$dir/prometheus.log" 2>&1 &
prom_pid=$!
for _ in $(seq 150); do curl -sf "http://127.0.0.1:$port/-/ready" >/dev/null && break; sleep 0.2; done
cat >"$dir/candidate.policy" <<'POL'
check leader: leader
check fast: qget_ms < 300 for 1m
warn lag: apply_lag < 100
POL
cd "$dir"
for fmt in text json svg; do
  "$bin" replay --prometheus.url "http://127.0.0.1:$port" --policy candidate.policy \
    --selector '{job="etcd-readiness"}' --start "$b" --end $((b + 3600)) --step 15s \
    --format "$fmt" --output "$root/docs/replay-example.$fmt"
done
echo "wrote docs/replay-example.{text,json,svg}"
