# Shared setup of the shell benchmarks; sourced, not run. It gives:
#   root, bin, dir   the repository, the release binary ($BIN or
#                    $CARGO_TARGET_DIR/release/…), a temporary directory
#   srv, cli         command prefixes: with PIN=1 (and at least 2 CPUs) the
#                    servers run on CPU 0 and the clients on CPU 1 (taskset)
#   free_port        print one free loopback port
#   spawn CMD…       start CMD in the background and remember its PID (in
#                    $last_pid) so that the EXIT trap kills it
#   start_etcd N     a local N-member etcd cluster (names m1…mN) on free
#                    ports; its client ports are ${C[1]}…${C[N]}, its PIDs
#                    ${M[1]}…${M[N]}
#   start_member I   (re)start member I of that cluster on its data dir
#   start_exporter PORT ENDPOINT [FLAG…]   the release exporter (log level warn)
#   wait_ok URL…     wait (at most 30 s) until every URL answers 2xx
# The EXIT trap kills everything spawned and removes $dir.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
bin=${BIN:-${CARGO_TARGET_DIR:-$root/target}/release/etcd-readiness-exporter}
[ -x "$bin" ] || { echo "no release binary at $bin (cargo build --release)" >&2; exit 1; }
dir=$(mktemp -d)
srv=(); cli=()
if [ "${PIN:-0}" = 1 ] && [ "$(nproc)" -ge 2 ]; then srv=(taskset -c 0); cli=(taskset -c 1); fi
pids=()
bench_cleanup() {
  # SIGCONT first: a member a bench froze would not act on SIGTERM.
  for p in "${pids[@]}"; do kill -CONT "$p" 2>/dev/null || true; kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$dir"
}
trap bench_cleanup EXIT

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

spawn() { "$@" & last_pid=$!; pids+=("$last_pid"); }

declare -a C P M
etcd_initial=
start_etcd() {
  local n=$1 i
  for i in $(seq "$n"); do C[$i]=$(free_port); P[$i]=$(free_port); done
  for i in $(seq "$n"); do etcd_initial+="${etcd_initial:+,}m$i=http://127.0.0.1:${P[$i]}"; done
  for i in $(seq "$n"); do start_member "$i"; done
}

start_member() {
  local i=$1 p kept=()
  # Forget the PID of the member's previous process (it may be reused).
  for p in "${pids[@]}"; do [ "$p" = "${M[$i]:-}" ] || kept+=("$p"); done
  pids=("${kept[@]}")
  spawn "${srv[@]}" etcd --name "m$i" --data-dir "$dir/m$i" \
    --listen-client-urls "http://127.0.0.1:${C[$i]}" --advertise-client-urls "http://127.0.0.1:${C[$i]}" \
    --listen-peer-urls "http://127.0.0.1:${P[$i]}" --initial-advertise-peer-urls "http://127.0.0.1:${P[$i]}" \
    --initial-cluster "$etcd_initial" --initial-cluster-state new >>"$dir/m$i.log" 2>&1
  M[$i]=$last_pid
}

start_exporter() {
  local port=$1 endpoint=$2; shift 2
  spawn "${srv[@]}" "$bin" --etcd.endpoint "$endpoint" --web.listen-address "127.0.0.1:$port" \
    --log.level warn "$@" >>"$dir/exporter-$port.log" 2>&1
}

wait_ok() {
  local url ok
  for _ in $(seq 150); do
    ok=1
    for url in "$@"; do curl -sf -o /dev/null --max-time 2 "$url" || { ok=; break; }; done
    [ -n "$ok" ] && return 0
    sleep 0.2
  done
  echo "not ready within 30 s: $*" >&2
  tail -n 20 "$dir"/*.log >&2 || true
  exit 1
}
