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
# Then natively (paths callgrind does not take: the CPU's own SHA code, the
# 500 ms timeouts of a loaded machine): the code at each instruction fault.
spawn perf record -q -e exceptions:page_fault_user -o "$dir/pf.data" -- "$bin" \
  --etcd.endpoint "http://127.0.0.1:${C[1]}" --web.listen-address "127.0.0.1:$wport" \
  --sample.interval 1s --sample.timeout 500ms --log.level warn >"$dir/pf.log" 2>&1
perf_pid=$last_pid
wait_ok "http://127.0.0.1:$wport/readyz"
for _ in $(seq $((secs / 5))); do
  curl -s -o /dev/null "http://127.0.0.1:$wport/readyz"; curl -s -o /dev/null "http://127.0.0.1:$wport/metrics"
  sleep 5
done
kill -INT "$perf_pid"; wait "$perf_pid" || true
perf script -i "$dir/pf.data" --show-mmap-events -F comm,tid,trace >"$dir/pf.txt" 2>/dev/null
python3 - "$dir/link.map" "$dir/cg.out" "$root/build/text-order.txt" "$dir/pf.txt" "$bin" <<'PY'
import bisect, re, subprocess, sys
mapf, cgf, outf, pff, binf = sys.argv[1:]
# The code segment's address minus its file offset: a fault's offset + it = the map's address.
load = [l.split() for l in subprocess.run(["readelf", "-lW", binf], capture_output=True, text=True).stdout.splitlines()]
text_delta = next(int(l[3], 16) - int(l[1], 16) for l in load if l[:1] == ["LOAD"] and "E" in l[6:8])
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
def at(a):
    i = bisect.bisect_right(starts, a) - 1
    if i >= 0 and a < secs[i][0] + secs[i][1]:
        ran.add(i)
for line in open(cgf):
    if line.startswith("ob="):
        ob = line[3:].strip()
    elif line.startswith("0x") and ob.endswith("etcd-readiness-exporter"):
        at(int(line.split()[0], 16))
base = None  # native faults: load address of the code mapping, then fetches
for line in open(pff):
    m = re.search(r"\[(0x[0-9a-f]+)\((0x[0-9a-f]+)\) @ (0x[0-9a-f]+) .*r-xp .*etcd-readiness-exporter", line)
    if m:
        lo, hi = int(m.group(1), 16), int(m.group(1), 16) + int(m.group(2), 16)
        base = lo - int(m.group(3), 16)
    m = re.search(r"address=(0x[0-9a-f]+) ip=0x[0-9a-f]+ error_code=(0x[0-9a-f]+)", line)
    if m and base is not None and int(m.group(2), 16) & 0x10 and lo <= int(m.group(1), 16) < hi:
        at(int(m.group(1), 16) - base + text_delta)
# Keep what the previous list named and the build still has: natively run code
# that it packed no longer faults, so a new run alone would drop it.
try:
    kept = set(open(outf).read().split())
except FileNotFoundError:
    kept = set()
ran |= {i for i, s in enumerate(secs) if s[2] in kept}
names = [secs[i][2] for i in sorted(ran)]
with open(outf, "w") as out:
    out.write("".join(n + "\n" for n in names))
print(f"{len(names)} functions, {sum(secs[i][1] for i in ran) // 1024} KiB of code -> {outf}")
PY
echo "now: cargo build --release && benches/rss_10min.sh 60"
