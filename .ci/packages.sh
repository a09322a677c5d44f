#!/usr/bin/env bash
# Installs the Debian packages the build, the demo, the tests and the image
# test need, only those missing. Sourced by .ci/test, .ci/demo, .ci/suite,
# .ci/image-test and .ci/manifests; safe to run repeatedly.
#
# It checks what the build really uses — commands AND files — not package
# names: a machine can have `protoc` (protobuf-compiler) without the
# well-known .proto files it imports (libprotobuf-dev), and etcd-client's
# build script then fails with "google/protobuf/descriptor.proto: File not
# found". Every missing item is reported at once with the package that
# provides it, and all are installed in one apt-get call.
#
# The table below is the one list: each line is "needs kind item package",
# needs a comma-separated set of build|demo|test|image|manifests (build is
# part of every need), kind one of
#   cmd   a command on PATH            exec  an executable file
#   file  a file                       glob  at least one file matching
# .ci/check-packages proves the list complete: every program the tests, the
# demo and the CI scripts start must be here (or be part of every Debian
# minbase, listed there). CI runs it, and .ci/run runs everything in a fresh
# root where nothing else installed them.
ERE_PACKAGES='
build      cmd  cc                                               gcc
build      file /usr/include/stdio.h                             libc6-dev
build      cmd  protoc                                           protobuf-compiler
build      file /usr/include/google/protobuf/descriptor.proto    libprotobuf-dev
build      file /usr/include/google/protobuf/empty.proto         libprotobuf-dev
build      file /usr/include/google/protobuf/timestamp.proto     libprotobuf-dev
demo,test,image exec /usr/bin/etcd                               etcd-server
demo,test  cmd  curl                                             curl
test       cmd  etcdctl                                          etcd-client
test       cmd  prometheus                                       prometheus
test       cmd  promtool                                         prometheus
test       exec /usr/sbin/dnsmasq                                dnsmasq-base
test,image,manifests cmd python3                                 python3
test       exec /usr/bin/kill                                    procps
test       cmd  pgrep                                            procps
test       exec /usr/bin/chromium                                chromium
test       file /usr/share/fonts/truetype/dejavu/DejaVuSans.ttf  fonts-dejavu-core
test       cmd  man                                              man-db
test,manifests glob /usr/share/python-wheels/pip-*.whl           python3-venv
manifests  cmd  ip                                               iproute2
manifests  cmd  openssl                                          openssl
manifests  cmd  unshare                                          util-linux
test,image cmd  dpkg-deb                                         dpkg
test,image file /usr/share/keyrings/debian-archive-keyring.gpg   debian-archive-keyring
image      cmd  buildah                                          buildah
image      cmd  objcopy                                          binutils
image      cmd  readelf                                          binutils
image      cmd  curl                                             curl
image      file /etc/ssl/certs/ca-certificates.crt               ca-certificates
'
set -euo pipefail

# One "package<TAB>what is missing" line per missing item of NEED.
_ere_missing() {
  local want="$1" needs kind item pkg ok
  case "$want" in build|demo|test|image|manifests) ;; *)
    echo "packages.sh: unknown need '$want'" >&2; return 2 ;;
  esac
  while read -r needs kind item pkg; do
    [ -n "$needs" ] || continue
    case ",$needs," in *",$want,"*|",build,") ;; *) continue ;; esac
    ok=1
    case "$kind" in
      cmd) command -v "$item" >/dev/null 2>&1 || ok= ;;
      exec) [ -x "$item" ] || ok= ;;
      file) [ -e "$item" ] || ok= ;;
      glob) compgen -G "$item" >/dev/null || ok= ;;
      *) echo "packages.sh: bad kind '$kind'" >&2; return 2 ;;
    esac
    [ -n "$ok" ] || printf '%s\t%s\n' "$pkg" "$item"
  done <<<"$ERE_PACKAGES"
}

# need_pkgs NEED... : prints the missing packages, one a line, sorted, unique.
need_pkgs() {
  local n
  for n in "${@:-build}"; do _ere_missing "$n"; done | cut -f1 | sort -u
}

# ensure_packages NEED... : NEED is build, demo, test, image or manifests.
ensure_packages() {
  local report pkgs n
  report=$(for n in "${@:-build}"; do _ere_missing "$n"; done | sort -u)
  [ -z "$report" ] && return 0
  pkgs=$(printf '%s\n' "$report" | cut -f1 | sort -u | tr '\n' ' ')
  echo "missing (package: what):" >&2
  printf '%s\n' "$report" | awk -F'\t' '{printf "  %-18s %s\n", $1":", $2}' >&2
  local sudo=""
  if [ "$(id -u)" -ne 0 ]; then
    if command -v sudo >/dev/null 2>&1; then sudo="sudo"; else
      echo "not root and no sudo; run as root: apt-get install -y --no-install-recommends $pkgs" >&2
      return 1
    fi
  fi
  echo "installing: $pkgs" >&2
  $sudo env DEBIAN_FRONTEND=noninteractive apt-get update -qq
  # shellcheck disable=SC2086
  $sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $pkgs >/dev/null
  # Check again: a package that installed but did not provide what was
  # missing (renamed, diverted) must fail here, not deep inside a build.
  report=$(for n in "${@:-build}"; do _ere_missing "$n"; done | sort -u)
  if [ -n "$report" ]; then
    echo "still missing after apt-get install:" >&2
    printf '%s\n' "$report" | awk -F'\t' '{printf "  %-18s %s\n", $1":", $2}' >&2
    return 1
  fi
}
