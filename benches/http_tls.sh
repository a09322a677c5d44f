#!/usr/bin/env bash
# What access control costs a scrape: GET /metrics on a plain exporter vs
# one behind --web.config.file with TLS and basic auth (bcrypt cost 10),
# loaded the same way, alternately, in one run. Both exporters run the
# release binary against the same single-member etcd on loopback.
#
# Usage: benches/http_tls.sh [DURATION=10s] [THREADS=2] [CONNECTIONS=16] [ROUNDS=3]
# Two loads per round and exporter:
#   keep-alive  wrk's connections stay open, as Prometheus' do (the handshake
#               is paid once per connection; the 2x budget applies here);
#   new-conn    `Connection: close` on every request: a TCP connect, and for
#               the TLS exporter a full TLS 1.3 handshake, per request.
# With PIN=1 (and at least 2 CPUs) the servers run on CPU 0 and wrk on CPU 1.
# Needs: etcd (etcd-server), wrk (built with OpenSSL, as Debian's is),
# openssl (certificates), python3 (free ports, the bcrypt hash via crypt),
# curl, and a release build (cargo build --release).
# wrk cannot present a client certificate, so the TLS exporter asks for none
# (client_auth_type NoClientCert); tests/serve/web_config.rs covers mTLS.
dur=${1:-10s}; threads=${2:-2}; conns=${3:-16}; rounds=${4:-3}
. "$(dirname "$0")/lib.sh"

# Certificates: a CA and a P-256 server certificate for 127.0.0.1.
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 2 \
  -subj /CN=bench-ca -keyout "$dir/ca.key" -out "$dir/ca.pem" 2>/dev/null
openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes \
  -subj /CN=127.0.0.1 -keyout "$dir/server.key" -out "$dir/server.csr" 2>/dev/null
printf 'subjectAltName=IP:127.0.0.1\nextendedKeyUsage=serverAuth\n' >"$dir/ext"
openssl x509 -req -in "$dir/server.csr" -CA "$dir/ca.pem" -CAkey "$dir/ca.key" -CAcreateserial \
  -days 2 -extfile "$dir/ext" -out "$dir/server.pem" 2>/dev/null
password=bench-password
hash=$(python3 -W ignore -c 'import crypt,sys; print(crypt.crypt(sys.argv[1], crypt.mksalt(crypt.METHOD_BLOWFISH, rounds=2**10)))' "$password")
case "$hash" in '$2'*) ;; *) echo "python3's crypt made no bcrypt hash: $hash" >&2; exit 1 ;; esac
cat >"$dir/web.yml" <<EOF
tls_server_config:
  cert_file: server.pem
  key_file: server.key
basic_auth_users:
  prometheus: '$hash'
EOF

start_etcd 1
cport=${C[1]}
plain=$(free_port); tls=$(free_port)
spawn "${srv[@]}" "$bin" serve --etcd.endpoint "http://127.0.0.1:$cport" --web.listen-address "127.0.0.1:$plain" \
  --log.level warn >"$dir/plain.log" 2>&1
spawn "${srv[@]}" "$bin" serve --etcd.endpoint "http://127.0.0.1:$cport" --web.listen-address "127.0.0.1:$tls" \
  --web.config.file "$dir/web.yml" --log.level warn >"$dir/tls.log" 2>&1
ready=
for _ in $(seq 150); do
  if curl -sf "http://127.0.0.1:$plain/readyz" >/dev/null &&
     curl -sf --cacert "$dir/ca.pem" -u "prometheus:$password" "https://127.0.0.1:$tls/readyz" >/dev/null; then
    ready=1; break
  fi
  sleep 0.2
done
[ -n "$ready" ] || { echo "exporters not ready"; cat "$dir/plain.log" "$dir/tls.log"; exit 1; }
# Wrong password and no password are refused (the load below is authenticated).
code=$(curl -s -o /dev/null -w '%{http_code}' --cacert "$dir/ca.pem" -u prometheus:wrong "https://127.0.0.1:$tls/metrics")
[ "$code" = 401 ] || { echo "wrong password answered $code, not 401" >&2; exit 1; }
auth="Authorization: Basic $(printf 'prometheus:%s' "$password" | base64 -w0)"

echo "nproc=$(nproc) pinned=${PIN:-0} load=$(cut -d' ' -f1-3 /proc/loadavg) wrk -t$threads -c$conns -d$dur --latency, GET /metrics, $rounds rounds"
run() { # NAME URL [wrk args...]
  local name=$1 url=$2; shift 2
  local out rps p50 p99 non2xx errs
  out=$("${cli[@]}" wrk -t"$threads" -c"$conns" -d"$dur" --latency "$@" "$url")
  rps=$(awk '/Requests\/sec/ {print $2}' <<<"$out")
  p50=$(awk '$1=="50%" {print $2}' <<<"$out")
  p99=$(awk '$1=="99%" {print $2}' <<<"$out")
  non2xx=$(awk '/Non-2xx/ {print $NF}' <<<"$out")
  errs=$(awk '/Socket errors/ {print $0}' <<<"$out")
  echo "  $name: req/s=$rps p50=$p50 p99=$p99 non2xx=${non2xx:-0} ${errs:+($errs)}"
  echo "$name $rps" >>"$dir/rps"
}
for r in $(seq "$rounds"); do
  echo "round $r"
  run "plain      keep-alive" "http://127.0.0.1:$plain/metrics"
  run "tls+auth   keep-alive" "https://127.0.0.1:$tls/metrics" -H "$auth"
  run "plain      new-conn  " "http://127.0.0.1:$plain/metrics" -H "Connection: close"
  run "tls+auth   new-conn  " "https://127.0.0.1:$tls/metrics" -H "$auth" -H "Connection: close"
done
python3 - "$dir/rps" <<'EOF'
import sys, collections
rps = collections.defaultdict(list)
for line in open(sys.argv[1]):
    *name, v = line.split()
    rps[" ".join(name)].append(float(v))
med = {k: sorted(v)[len(v) // 2] for k, v in rps.items()}
for load in ("keep-alive", "new-conn"):
    p, t = med[f"plain {load}"], med[f"tls+auth {load}"]
    print(f"median {load}: plain {p:.0f} req/s, tls+auth {t:.0f} req/s, cost ratio {p / t:.2f}x")
EOF
