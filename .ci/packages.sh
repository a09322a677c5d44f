#!/usr/bin/env bash
# Installs the Debian packages the build, the demo, the tests and the image
# test need, only those missing. Sourced by .ci/test, .ci/demo, .ci/run and
# .ci/image-test; safe to run repeatedly.
#
# It checks what the build really uses — commands AND files — not package
# names: a machine can have `protoc` (protobuf-compiler) without the
# well-known .proto files it imports (libprotobuf-dev), and etcd-client's
# build script then fails with "google/protobuf/descriptor.proto: File not
# found". Every missing item is reported at once with the package that
# provides it, and all are installed in one apt-get call.
#
#   what                                    package            needed by
#   cc (C compiler/linker), libc headers    gcc, libc6-dev     any Rust build (linker, ring)
#   protoc                                  protobuf-compiler  etcd-client's build script
#   google/protobuf/*.proto well-known      libprotobuf-dev    etcd-client's build script
#   etcd                                    etcd-server        demo, tests, image test
#   prometheus, promtool                    prometheus         tests (monitoring, promtool)
#   dnsmasq                                 dnsmasq-base       tests (owner check)
#   curl                                    curl               tests (monitoring script), image test
#   python3                                 python3            tests, image test (checkers, free ports)
#   /bin/kill (not the shell builtin)       procps             tests (SIGSTOP/SIGCONT of etcd members)
#   /usr/bin/chromium                       chromium           tests (status page in headless Chromium)
#   a sans-serif font (DejaVu Sans)         fonts-dejavu-core  tests (status page screenshots have text)
#   buildah                                 buildah            image build and test
#   objcopy, readelf                        binutils           image build (split debug info, loader)
#   CA bundle                               ca-certificates    image build
#   python3 -m venv with pip                python3-venv       manifest schema check (kubernetes-validate)
set -euo pipefail

# One "package<TAB>what is missing" line per missing item.
_ere_missing() {
  local want="$1"
  _ere_has() { command -v "$1" >/dev/null 2>&1; }
  _ere_miss() { printf '%s\t%s\n' "$1" "$2"; }
  # The build (every profile needs it).
  _ere_has cc || _ere_miss gcc "cc (C compiler and linker)"
  [ -e /usr/include/stdio.h ] || _ere_miss libc6-dev "/usr/include/stdio.h (C library headers)"
  _ere_has protoc || _ere_miss protobuf-compiler "protoc"
  local inc
  for inc in descriptor.proto empty.proto timestamp.proto; do
    [ -e "/usr/include/google/protobuf/$inc" ] ||
      _ere_miss libprotobuf-dev "/usr/include/google/protobuf/$inc (protoc's well-known types)"
  done
  case "$want" in
    build) ;;
    demo)
      _ere_has etcd || [ -x /usr/bin/etcd ] || _ere_miss etcd-server "etcd"
      ;;
    test)
      _ere_has etcd || [ -x /usr/bin/etcd ] || _ere_miss etcd-server "etcd"
      _ere_has prometheus || _ere_miss prometheus "prometheus"
      _ere_has promtool || _ere_miss prometheus "promtool"
      [ -x /usr/sbin/dnsmasq ] || _ere_has dnsmasq || _ere_miss dnsmasq-base "dnsmasq"
      _ere_has curl || _ere_miss curl "curl"
      _ere_has python3 || _ere_miss python3 "python3"
      # The tests run `kill -STOP` as a program; `command -v kill` would find
      # the shell builtin, so look for the file.
      [ -x /usr/bin/kill ] || [ -x /bin/kill ] || _ere_miss procps "/usr/bin/kill (the kill program, not the builtin)"
      # tests/status_page.rs runs `chromium` headless; screenshots need a font.
      [ -x /usr/bin/chromium ] || _ere_miss chromium "/usr/bin/chromium (headless browser for tests/status_page.rs)"
      [ -e /usr/share/fonts/truetype/dejavu/DejaVuSans.ttf ] ||
        _ere_miss fonts-dejavu-core "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf (a font for the screenshots)"
      ;;
    image)
      _ere_has etcd || [ -x /usr/bin/etcd ] || _ere_miss etcd-server "etcd"
      _ere_has buildah || _ere_miss buildah "buildah"
      _ere_has objcopy || _ere_miss binutils "objcopy"
      _ere_has readelf || _ere_miss binutils "readelf"
      _ere_has python3 || _ere_miss python3 "python3"
      _ere_has curl || _ere_miss curl "curl"
      [ -e /etc/ssl/certs/ca-certificates.crt ] || _ere_miss ca-certificates "/etc/ssl/certs/ca-certificates.crt"
      ;;
    manifests)
      _ere_has python3 || _ere_miss python3 "python3"
      # Debian's python3 has no ensurepip; python3-venv brings the pip wheel
      # that `python3 -m venv` installs into a new environment.
      compgen -G '/usr/share/python-wheels/pip-*.whl' >/dev/null ||
        _ere_miss python3-venv "/usr/share/python-wheels/pip-*.whl (python3 -m venv with pip)"
      ;;
    *)
      echo "packages.sh: unknown need '$want'" >&2
      return 2
      ;;
  esac
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
