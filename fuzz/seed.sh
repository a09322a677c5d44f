#!/usr/bin/env bash
# Regenerates the seed corpora (fuzz/corpus/<target>/seed-*) from the files
# the project ships: policies, test files and config examples in policies/,
# docs/ and deploy/, plus a real etcd /metrics page for the Prometheus text
# parser. Run from the repository root: fuzz/seed.sh
set -euo pipefail
cd "$(dirname "$0")/.."
C=fuzz/corpus
rm -f $C/*/seed-*
mkdir -p $C/policy $C/policy_test_yaml $C/sources_config $C/promtext $C/readyz_query

# Fenced blocks of a markdown file with a given tag ("" = untagged), one file each.
blocks() { # file tag outdir prefix
  awk -v tag="$2" -v out="$3" -v pre="$4" '
    /^```/ { if (open) { open = 0; if (inblock) { inblock = 0; close(f) }; next }
             open = 1; t = substr($0, 4)
             if (t == tag) { n++; f = sprintf("%s/seed-%s-%02d", out, pre, n); inblock = 1; printf "" > f }
             next }
    inblock { print >> f }' "$1"
}

# Policies: the shipped ones, the language doc's examples, a 40-deep chain.
for f in policies/*.policy; do cp "$f" "$C/policy/seed-$(basename "$f")"; done
blocks docs/policy-language.md "" $C/policy doc
grep -l '^error:\|unknown: ' $C/policy/seed-doc-* | xargs -r rm -f
{
  echo "let a0 = qget_ms < 1000"
  for i in $(seq 1 40); do echo "let a$i = a$((i - 1)) && a$((i - 1))"; done
  echo "check deep: a40 for 30s"
} > $C/policy/seed-doubling-chain-40
printf 'check a: leader for 168h\ncheck b: db_size_bytes < 2GiB && age(leader) < 1e3s ?? true\ncheck c: leader for 10s recover 1h\n' > $C/policy/seed-limits

# Stepping over settled steps: the policies above, and some that read their
# signals every way the language can (thresholds either side, arithmetic,
# lets, `??`, `known()`, `age()`, holds).
mkdir -p $C/stepping_over
cp $C/policy/seed-* $C/stepping_over/
printf 'check q: qget_ms < 300 for 30s\ncheck l: leader recover 45s\nwarn w: -rev_lag > -5000\n' > $C/stepping_over/seed-thresholds
printf 'let slow = qget_ms >= 1000\nlet q = sget_ms\ncheck a: !slow && known(apply_lag) && q * 2 < 50\ncheck b: (qget_ms ?? 0) < max(sget_ms, 5) || age(leader) < 10s\n' > $C/stepping_over/seed-every-use

# `test` YAML: the shipped test files and the doc's example.
for f in policies/*.test.yaml; do cp "$f" "$C/policy_test_yaml/seed-$(basename "$f")"; done
blocks docs/policy-language.md yaml $C/policy_test_yaml doc

# --config sources files.
blocks docs/sources.md yaml $C/sources_config doc
for f in deploy/*sources*.yaml; do [ -f "$f" ] && cp "$f" "$C/sources_config/seed-$(basename "$f")"; done

# /readyz query strings, as clients send them.
i=0
for q in "" verbose "verbose=false" "format=json" "exclude=leader" \
  "verbose&exclude=linearizable_read&exclude=nope" "exclude=a%20b&format=json" \
  "exclude=%zz&verbose=0" "exclude=%E2%9C%93+x&&&verbose=1"; do
  i=$((i + 1)); printf '%s' "$q" > "$C/readyz_query/seed-$i"
done

# Prometheus text: a real etcd's /metrics (first 64 KiB), and the
# backup-sidecar stand-in's exposition used by the monitoring tests.
dir=$(mktemp -d)
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
peer=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
etcd --data-dir "$dir/data" --listen-client-urls "http://127.0.0.1:$port" \
  --advertise-client-urls "http://127.0.0.1:$port" --listen-peer-urls "http://127.0.0.1:$peer" \
  --initial-advertise-peer-urls "http://127.0.0.1:$peer" --initial-cluster "default=http://127.0.0.1:$peer" \
  >"$dir/log" 2>&1 &
pid=$!
for _ in $(seq 1 100); do
  curl -sf "http://127.0.0.1:$port/metrics" -o "$dir/metrics" && break
  sleep 0.1
done
kill "$pid"; wait "$pid" 2>/dev/null || true
head -c 65536 "$dir/metrics" > $C/promtext/seed-etcd-metrics
rm -rf "$dir"
printf '# HELP x A.\n# TYPE x gauge\nx{kind="Full",a="\\\\\\"\\n"} 42 1700000000000\ny NaN\nz +Inf\nw -Inf\n# EOF\n' > $C/promtext/seed-escapes
# query_range answers as Prometheus 3.5 and VictoriaMetrics 1.145 send them
# (VictoriaMetrics adds `stats`), an empty one, a refusal, odd values.
mkdir -p $C/replay_matrix
cat > $C/replay_matrix/seed-prometheus <<'JSON'
{"status":"success","data":{"resultType":"matrix","result":[{"metric":{"__name__":"etcd_readiness_signal_value","job":"etcd-readiness","namespace":"shoot--fleet--00000","pod":"etcd-main-0","signal":"leader","source":"etcd"},"values":[[1796317200,"0"],[1796317215,"0"],[1796317230,"0"],[1796317245,"0"]]},{"metric":{"__name__":"etcd_readiness_signal_value","job":"etcd-readiness","namespace":"shoot--fleet--00001","pod":"etcd-main-0","signal":"qget_ms","source":"etcd"},"values":[[1796317200,"1.697429"],[1796317215.5,"NaN"],[1796317230.125,"+Inf"],[1796317245,"-0.5"]]}]}}
JSON
cat > $C/replay_matrix/seed-victoria-metrics <<'JSON'
{"status":"success","data":{"resultType":"matrix","result":[{"metric":{"__name__":"etcd_readiness_ready","namespace":"a\"b\u00e9"},"values":[[1796317200,"1"],[1796317215,"1"]]}]},"stats":{"seriesFetched": "2","executionTimeMsec":3}}
JSON
printf '{"status":"success","data":{"resultType":"matrix","result":[]},"warnings":["w"],"infos":[]}' > $C/replay_matrix/seed-empty
printf '{"status":"error","errorType":"execution","error":"query processing would load too many samples into memory in query execution","data":null}' > $C/replay_matrix/seed-refusal
ls $C/* | head -100
