#!/usr/bin/env bash
# A burst of concurrent lifecycle reloads (regression: 500 concurrent
# POST /-/reload spawned ~480 OS threads and kept ~30 MB): the release
# exporter with --web.enable-lifecycle and a policy file, no etcd; N
# connections opened first, then all send POST /-/reload at once (a
# barrier). Prints the answers, the time, and the exporter's thread count
# (/proc/PID/status, sampled every 5 ms) before, at its peak and after.
#
# Usage: benches/reload_burst.sh [N=500]
# Needs: python3, curl, and a release build (cargo build --release).
n=${1:-500}
. "$(dirname "$0")/lib.sh"
cp "$root/policies/default.policy" "$dir/p.policy"
port=$(free_port)
spawn "${srv[@]}" "$bin" serve --etcd.endpoint http://127.0.0.1:9 --web.listen-address "127.0.0.1:$port" \
  --web.enable-lifecycle --policy "$dir/p.policy" --log.level warn >"$dir/exporter.log" 2>&1
pid=$last_pid
wait_ok "http://127.0.0.1:$port/livez"
"${cli[@]}" python3 - "$port" "$pid" "$n" <<'PY'
import sys, threading, time, http.client
port, pid, n = int(sys.argv[1]), sys.argv[2], int(sys.argv[3])
def threads():
    for l in open(f"/proc/{pid}/status"):
        if l.startswith("Threads:"): return int(l.split()[1])
base = threads(); peak = base; stop = False
def watch():
    global peak
    while not stop:
        peak = max(peak, threads()); time.sleep(0.005)
w = threading.Thread(target=watch); w.start()
codes = {}
lock = threading.Lock()
barrier = threading.Barrier(n)
def post():
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    c.connect(); barrier.wait()
    c.request("POST", "/-/reload"); r = c.getresponse(); r.read()
    with lock: codes[r.status] = codes.get(r.status, 0) + 1
ts = [threading.Thread(target=post) for _ in range(n)]
t0 = time.monotonic()
for t in ts: t.start()
for t in ts: t.join()
el = time.monotonic() - t0
time.sleep(0.2); stop = True; w.join()
print(f"{n} concurrent POST /-/reload: {codes} in {el:.2f}s; exporter threads {base} before, peak {peak}, {threads()} after")
PY
grep VmRSS "/proc/$pid/status"
