#!/usr/bin/env bash
# How long `replay` takes over a day of history at 15 s steps for 3 members.
# Builds the history with promtool (the 7 signals policies/default.policy reads
# plus the recorded verdict, one sample every 15 s, with seeded random latency
# spikes and flaps), starts Prometheus on it on a free loopback port, and times
# the release binary with hyperfine.
# Usage: benches/replay_day.sh [RUNS]   (default 10)
# Needs: prometheus, promtool, hyperfine, python3, a release build
# (cargo build --release).
set -euo pipefail
runs=${1:-10}
root=$(cd "$(dirname "$0")/.." && pwd)
bin=$root/target/release/etcd-readiness-exporter
dir=$(mktemp -d)
cleanup() { kill "${prom_pid:-}" 2>/dev/null || true; wait 2>/dev/null || true; rm -rf "$dir"; }
trap cleanup EXIT
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
# A whole day ending at least an hour ago, on an hour boundary.
end=$(( $(date +%s) / 3600 * 3600 - 3600 ))
start=$(( end - 86400 ))

python3 - "$start" "$end" >"$dir/day.om" <<'PY'
import random, sys
start, end = int(sys.argv[1]), int(sys.argv[2])
random.seed(15)
members = ["etcd-0", "etcd-1", "etcd-2"]
times = list(range(start - 5, end + 1, 15))
signals = ["leader", "qget_ms", "sget_ms", "learner", "alarm_corrupt", "alarm_nospace", "apply_lag"]
hist = {}
for m in members:
    rows = []
    leaderless = 0
    for t in times:
        if leaderless == 0 and random.random() < 0.002:
            leaderless = random.randint(1, 8)
        leader = 0 if leaderless > 0 else 1
        leaderless = max(0, leaderless - 1)
        q = random.uniform(2, 20) if random.random() > 0.01 else random.uniform(900, 3000)
        s = random.uniform(0.5, 3)
        lag = random.randint(0, 50) if random.random() > 0.005 else random.randint(5000, 20000)
        v = dict(leader=leader, qget_ms=round(q, 3), sget_ms=round(s, 3), learner=0,
                 alarm_corrupt=0, alarm_nospace=0, apply_lag=lag)
        ready = int(leader == 1 and q < 1000 and s < 1000)
        rows.append((t, v, ready))
    hist[m] = rows
lab = lambda m: f'instance="{m}:9379",job="etcd-readiness",namespace="prod",pod="{m}"'
out = sys.stdout
out.write("# HELP etcd_readiness_ready ready\n# TYPE etcd_readiness_ready gauge\n")
for m in members:
    for t, v, r in hist[m]:
        out.write(f"etcd_readiness_ready{{{lab(m)}}} {r} {t}\n")
for fam in ["value", "known"]:
    out.write(f"# HELP etcd_readiness_signal_{fam} {fam}\n# TYPE etcd_readiness_signal_{fam} gauge\n")
    for m in members:
        for s in signals:
            for t, v, r in hist[m]:
                x = 1 if fam == "known" else v[s]
                out.write(f'etcd_readiness_signal_{fam}{{{lab(m)},signal="{s}",source="etcd"}} {x} {t}\n')
out.write("# EOF\n")
PY
echo "history: $(wc -l <"$dir/day.om") samples lines, $(du -h "$dir/day.om" | cut -f1) of OpenMetrics"
promtool tsdb create-blocks-from openmetrics "$dir/day.om" "$dir/data" >/dev/null
printf 'global:\n  scrape_interval: 15s\n' >"$dir/prometheus.yml"
prometheus --config.file="$dir/prometheus.yml" --storage.tsdb.path="$dir/data" \
  --web.listen-address="127.0.0.1:$port" --log.level=warn >"$dir/prometheus.log" 2>&1 &
prom_pid=$!
for _ in $(seq 150); do curl -sf "http://127.0.0.1:$port/-/ready" >/dev/null && break; sleep 0.2; done
cmd="$bin replay --prometheus.url http://127.0.0.1:$port --policy $root/policies/default.policy \
--selector '{namespace=\"prod\"}' --start $start --end $end --step 15s --format json --output $dir/out.json"
bash -c "$cmd"
python3 -c "import json,sys; d=json.load(open('$dir/out.json')); print('members', len(d['members']), 'steps', (d['end'] - d['start']) // d['step'] + 1, '(pod, flips, differences from recorded):', [(m['labels']['pod'], m['flips'], len(m['differs_from_recorded'])) for m in d['members']])"
hyperfine --warmup 2 --runs "$runs" --export-markdown "$dir/hyperfine.md" "$cmd"
cat "$dir/hyperfine.md"
