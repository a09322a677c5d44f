#!/usr/bin/env bash
# Rewrites build/text-order.txt, the functions the release exporter runs in
# the probe benchmark (benches/rss_10min.sh), which build/link_order.rs has
# the linker put first. Re-run it when rss_10min.sh's binary_text_rss_kib
# grows (the names carry rustc's and the crates' hashes: an update of either
# leaves the list stale), then rebuild. Usage: benches/text_order.sh [SECONDS]
# Needs: etcd, valgrind, python3; builds the release binary with its linker map.
set -euo pipefail
secs=${1:-60}
root=$(cd "$(dirname "$0")/.." && pwd)
map=$(mktemp)
(cd "$root" && ERE_LINK_MAP="$map" cargo build --release --quiet --bin etcd-readiness-exporter)
. "$(dirname "$0")/lib.sh"
mv "$map" "$dir/link.map"
start_etcd 1
wport=$(free_port)
# Callgrind lists every instruction that ran; 2 s sampling as the tool is ~50x slower.
spawn valgrind --tool=callgrind --dump-instr=yes --compress-pos=no --compress-strings=no \
  --callgrind-out-file="$dir/cg.out" "$bin" --etcd.endpoint "http://127.0.0.1:${C[1]}" \
  --web.listen-address "127.0.0.1:$wport" --sample.interval 2s --sample.timeout 2s --log.level warn \
  >"$dir/vg.log" 2>&1
exp_pid=$last_pid
for _ in $(seq 240); do curl -sf -o /dev/null "http://127.0.0.1:$wport/readyz" && break; sleep 0.5; done
for _ in $(seq $((secs / 5))); do
  curl -s -o /dev/null "http://127.0.0.1:$wport/readyz"; curl -s -o /dev/null "http://127.0.0.1:$wport/metrics"
  sleep 5
done
kill -INT "$exp_pid"; wait "$exp_pid" || true
python3 - "$dir/link.map" "$dir/cg.out" "$root/build/text-order.txt" <<'PY'
import bisect, re, sys
mapf, cgf, outf = sys.argv[1:]
# lld's map: "VMA LMA Size Align Out In Symbol"; an input section line names
# its object and section, the lines under it its symbols.
secs, cur = [], None
for line in open(mapf):
    f = line.split(None, 4)
    if len(f) < 5 or not re.fullmatch(r"[0-9a-f]+", f[0]):
        continue
    start, size, rest = int(f[0], 16), int(f[2], 16), f[4].strip()
    m = re.search(r":\((\.text[^)]*)\)$", rest)
    if m:
        name = re.sub(r"^\.text\.((unlikely|hot|startup|exit)\.)?", "", m.group(1))
        cur = [start, size, name if name != ".text" else None]
        secs.append(cur)
    elif cur is not None and cur[2] is None and ":(" not in rest and " " not in rest:
        cur[2] = rest
secs = [s for s in secs if s[2] and s[1] > 0]
secs.sort()
starts = [s[0] for s in secs]
ran, ob = set(), ""
for line in open(cgf):
    if line.startswith("ob="):
        ob = line[3:].strip()
    elif line.startswith("0x") and ob.endswith("etcd-readiness-exporter"):
        a = int(line.split()[0], 16)
        i = bisect.bisect_right(starts, a) - 1
        if i >= 0 and a < secs[i][0] + secs[i][1]:
            ran.add(i)
names = [secs[i][2] for i in sorted(ran)]
with open(outf, "w") as out:
    out.write("".join(n + "\n" for n in names))
print(f"{len(names)} functions, {sum(secs[i][1] for i in ran) // 1024} KiB of code -> {outf}")
PY
echo "now: cargo build --release && benches/rss_10min.sh 60"
