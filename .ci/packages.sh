#!/usr/bin/env bash
# Installs the Debian packages the build, the demo and the tests need, only
# those missing. Sourced by .ci/test and .ci/demo; safe to run repeatedly.
#   protobuf-compiler  protoc, needed by etcd-client's build script
#   etcd-server        the real etcd 3.4 the demo and the tests start
#   prometheus         prometheus + promtool for the monitoring tests
#   dnsmasq-base       the real DNS server of the owner-check tests
#   curl               used by the monitoring integration script
set -euo pipefail

need_pkgs() {
  local missing=()
  command -v protoc >/dev/null 2>&1 || missing+=(protobuf-compiler)
  command -v etcd >/dev/null 2>&1 || missing+=(etcd-server)
  if [ "${1:-}" = test ]; then
    command -v promtool >/dev/null 2>&1 || missing+=(prometheus)
    command -v prometheus >/dev/null 2>&1 || missing+=(prometheus)
    [ -x /usr/sbin/dnsmasq ] || command -v dnsmasq >/dev/null 2>&1 || missing+=(dnsmasq-base)
    command -v curl >/dev/null 2>&1 || missing+=(curl)
  fi
  printf '%s\n' "${missing[@]}" | sort -u | grep -v '^$' || true
}

ensure_packages() {
  local pkgs
  pkgs=$(need_pkgs "${1:-}")
  [ -z "$pkgs" ] && return 0
  local sudo=""
  if [ "$(id -u)" -ne 0 ]; then
    if command -v sudo >/dev/null 2>&1; then sudo="sudo"; else
      echo "missing packages: $pkgs; run as root: apt-get install -y $pkgs" >&2
      return 1
    fi
  fi
  echo "installing missing packages: $(echo $pkgs)" >&2
  $sudo env DEBIAN_FRONTEND=noninteractive apt-get update -qq
  # shellcheck disable=SC2086
  $sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $pkgs >/dev/null
}
