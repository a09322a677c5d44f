#!/usr/bin/env bash
# replay against a stand-in Prometheus answering SERIES series of
# etcd_readiness_ready, two samples each, over one hour at 15 s steps (issue
# 21's attack: ~141 bytes a series; 1M series is 141 MB, under the default
# --prometheus.max-bytes of 256 MiB). Prints, for each count, replay's exit
# code, wall time, peak RSS (GNU time's %M) and the first line of its error.
#
# Usage: [HOURS=1] benches/replay_many_series.sh [SERIES...]   (default: 1000 50000 1000000)
# HOURS: the replayed range (the samples stay in its first 15 s).
# Needs: python3, GNU time (/usr/bin/time), and a release build
# (cargo build --release).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
bin=${BIN:-${CARGO_TARGET_DIR:-$root/target}/release/etcd-readiness-exporter}
[ -x "$bin" ] || { echo "no release binary at $bin (cargo build --release)" >&2; exit 1; }
[ -x /usr/bin/time ] || { echo "needs GNU time at /usr/bin/time" >&2; exit 1; }
dir=$(mktemp -d)
server=
cleanup() { [ -n "$server" ] && kill "$server" 2>/dev/null; wait 2>/dev/null || true; rm -rf "$dir"; }
trap cleanup EXIT
counts=("$@"); [ ${#counts[@]} -gt 0 ] || counts=(1000 50000 1000000)
t0=1700000000
hours=${HOURS:-1}
printf 'check leader: leader\n' >"$dir/p.policy"
echo "nproc=$(nproc) load=$(cut -d' ' -f1-3 /proc/loadavg) hours=$hours"
for n in "${counts[@]}"; do
  python3 - "$n" "$t0" "$dir/body.json" <<'EOF'
import sys
n, t0, path = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
with open(path, "w") as f:
    f.write('{"status":"success","data":{"resultType":"matrix","result":[')
    for i in range(n):
        f.write(("," if i else "") + '{"metric":{"__name__":"etcd_readiness_ready","job":"ere",'
                f'"namespace":"prod","pod":"etcd-{i:07d}"}},"values":[[{t0},"1"],[{t0 + 15},"1"]]}}')
    f.write("]}}")
EOF
  port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
  python3 - "$port" "$dir/body.json" <<'EOF' &
import http.server, sys
port, path = int(sys.argv[1]), sys.argv[2]
body = open(path, "rb").read()
empty = b'{"status":"success","data":{"resultType":"matrix","result":[]}}'
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        b = body if "etcd_readiness_ready" in self.path else empty
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(b)))
        self.end_headers()
        self.wfile.write(b)
    def log_message(self, *a):
        pass
http.server.ThreadingHTTPServer(("127.0.0.1", port), H).serve_forever()
EOF
  server=$!
  for _ in $(seq 100); do curl -sf -o /dev/null "http://127.0.0.1:$port/x" && break; sleep 0.1; done
  size=$(stat -c %s "$dir/body.json")
  set +e
  /usr/bin/time -f '%M %e' -o "$dir/time" "$bin" replay --prometheus.url "http://127.0.0.1:$port" \
    --policy "$dir/p.policy" --start "$t0" --end "$((t0 + 3600 * hours))" --step 15s --format json \
    >"$dir/out.json" 2>"$dir/err"
  code=$?
  set -e
  # GNU time writes "Command exited with non-zero status N" first.
  read -r kib secs < <(tail -n 1 "$dir/time")
  members=$(python3 -c 'import json,sys; print(len(json.load(open(sys.argv[1]))["members"]))' "$dir/out.json" 2>/dev/null || echo -)
  echo "series=$n answer=$((size / 1000000)) MB: exit $code in ${secs}s, peak RSS $((kib / 1024)) MiB, members replayed $members; $(head -c 160 "$dir/err")"
  kill "$server"; wait "$server" 2>/dev/null || true; server=
done
