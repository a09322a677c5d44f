# A fresh Debian 12 root to run the project's own scripts in, with nothing
# installed but what they install: sourced by .ci/run (CI) and
# .ci/fresh-machine (the README's two commands by hand). Not run by itself.
#
# What is in the root:
#   - `debootstrap --variant=minbase --include=git bookworm`, made once into
#     $ERE_CACHE/fresh-base (pristine: never run in, only copied; a marker
#     says debootstrap finished) and copied anew into $ROOT for every run;
#   - the Debian archive address of this machine's apt sources (the same
#     sources file, so the same suites), read from the machine, not written
#     in the repository, and its apt settings for reaching that archive
#     (apt.conf.d files that set Check-Valid-Until, Check-Date or a proxy);
#   - from the host: the CA bundle (/etc/ssl/certs/ca-certificates.crt),
#     which minbase lacks and apt, cargo and pip need to reach their
#     registries over HTTPS (also as a local certificate, so that a
#     ca-certificates package installed later keeps it); /etc/resolv.conf; the Rust toolchain
#     (RUSTUP_HOME and CARGO_HOME/bin, bind-mounted read-only);
#   - caches outside the root, bind-mounted (download and build caches, not
#     install steps): the cargo registry ($ERE_CACHE/cargo-registry) and the
#     target directory ($ERE_CACHE/target-<name>);
#   - /proc, /sys, /dev; the host's network (tests bind loopback only).
# A policy-rc.d stops package scripts from starting daemons (etcd,
# prometheus, dnsmasq) in the root. Everything else, every Debian package the
# build, the tests, the demo and the image need, is installed by the
# project's own .ci/packages.sh inside the root.
#
# Functions: fresh_root_make ROOT NAME   (NAME picks the target cache)
#            in_root CMD...             (as root, a clean environment)
#            fresh_root_clean ROOT      (kill what runs in it, unmount)
set -euo pipefail
ERE_CACHE=${ERE_CACHE:-/var/cache/etcd-readiness-exporter}
FRESH_BASE=${FRESH_BASE:-$ERE_CACHE/fresh-base}

_fr_log() { echo "[fresh-root $(date -u +%T)] $*" >&2; }

# The Debian archive address of this machine's apt sources.
debian_mirror() {
  local m=""
  if [ -r /etc/apt/sources.list.d/debian.sources ]; then
    m=$(awk '/^URIs:/ && $2 !~ /security/ {print $2; exit}' /etc/apt/sources.list.d/debian.sources)
  fi
  if [ -z "$m" ]; then
    m=$(cat /etc/apt/sources.list 2>/dev/null |
      awk '$1 == "deb" && $0 !~ /security/ { for (i = 2; i <= NF; i++) if ($i ~ /^https?:/) { print $i; exit } }')
  fi
  [ -n "$m" ] || { _fr_log "no Debian archive address in /etc/apt/sources*"; return 1; }
  echo "$m"
}

# Unmount everything at or below a directory, deepest first.
_fr_umount_below() {
  local m
  findmnt -rn -o TARGET | awk -v r="$1" '$0 == r || index($0, r"/") == 1' | sort -r | while read -r m; do
    umount -l "$m" 2>/dev/null || true
  done
}

# Kill every process whose root directory is ROOT (what a test left behind).
_fr_kill_inside() {
  local root=$1 p r
  for p in /proc/[0-9]*; do
    r=$(readlink "$p/root" 2>/dev/null) || continue
    [ "$r" = "$root" ] && kill -KILL "${p#/proc/}" 2>/dev/null || true
  done
}

fresh_root_clean() {
  local root=$1
  [ -d "$root" ] || return 0
  _fr_kill_inside "$root"
  _fr_umount_below "$root"
}

_fr_base() {
  if [ -f "$FRESH_BASE/.debootstrap-done" ]; then return 0; fi
  command -v debootstrap >/dev/null || {
    _fr_log "installing debootstrap on the host"
    DEBIAN_FRONTEND=noninteractive apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends debootstrap >/dev/null
  }
  local mirror
  mirror=$(debian_mirror)
  _fr_umount_below "$FRESH_BASE"
  rm -rf "$FRESH_BASE"
  mkdir -p "$(dirname "$FRESH_BASE")"
  _fr_log "debootstrap --variant=minbase --include=git bookworm into $FRESH_BASE"
  debootstrap --variant=minbase --include=git bookworm "$FRESH_BASE" "$mirror" >"$FRESH_BASE.log" 2>&1 ||
    { tail -20 "$FRESH_BASE.log" >&2; _fr_log "debootstrap failed"; return 1; }
  touch "$FRESH_BASE/.debootstrap-done"
}

fresh_root_make() {
  local root=$1 name=$2
  case "$root" in /|""|/root|/var|/var/tmp) _fr_log "refusing ROOT=$root"; return 1 ;; esac
  _fr_base
  fresh_root_clean "$root"
  # Never remove through a mount (its /dev is the host's).
  if findmnt -rn -o TARGET | awk -v r="$root" '$0 == r || index($0, r"/") == 1' | grep -q .; then
    _fr_log "$root still has mounts below it; not removing it"
    return 1
  fi
  rm -rf "$root"
  cp -a "$FRESH_BASE" "$root"
  rm -f "$root/.debootstrap-done"
  # The machine's own apt sources (same archive, same suites).
  if [ -r /etc/apt/sources.list.d/debian.sources ]; then
    rm -f "$root/etc/apt/sources.list"
    cp /etc/apt/sources.list.d/debian.sources "$root/etc/apt/sources.list.d/debian.sources"
  fi
  # The host's CA bundle, twice: as the bundle itself (apt, cargo and pip
  # read it before any package is installed) and as a local certificate
  # file, which update-ca-certificates appends to the bundle it rebuilds
  # when a package pulls in ca-certificates (the host's bundle may hold a
  # CA that Debian's does not, e.g. an inspecting proxy's).
  # The machine's apt settings for reaching its archive (a mirror that
  # serves frozen snapshots needs Check-Valid-Until off; a proxy), not the
  # rest of its apt configuration.
  local f
  for f in /etc/apt/apt.conf.d/*; do
    [ -f "$f" ] && grep -qE 'Check-Valid-Until|Check-Date|::Proxy' "$f" && cp "$f" "$root/etc/apt/apt.conf.d/" || true
  done
  mkdir -p "$root/etc/ssl/certs" "$root/usr/local/share/ca-certificates"
  cp /etc/ssl/certs/ca-certificates.crt "$root/etc/ssl/certs/ca-certificates.crt"
  cp /etc/ssl/certs/ca-certificates.crt "$root/usr/local/share/ca-certificates/host-ca-bundle.crt"
  cp /etc/resolv.conf "$root/etc/resolv.conf"
  printf '#!/bin/sh\n# fresh root: no daemons started by package scripts\nexit 101\n' >"$root/usr/sbin/policy-rc.d"
  chmod 0755 "$root/usr/sbin/policy-rc.d"

  # The root is a mount point of its own (bound onto itself, private), as a
  # container's is: inside it `unshare --mount --propagation private` works
  # (the monitoring test runs Alertmanager so), and nothing mounted inside
  # propagates back to the host.
  mount --bind "$root" "$root"
  mount --make-private "$root"
  mount -t proc proc "$root/proc"
  # /sys with the host's cgroup mounts below it (tests/serve/cpu_quota.rs runs
  # the binary in a real cgroup with a CFS quota).
  mount --rbind /sys "$root/sys"
  mount --make-rslave "$root/sys"
  mount --rbind /dev "$root/dev"
  mount --make-rslave "$root/dev"
  local rustup=${RUSTUP_HOME:-$HOME/.rustup} cargo=${CARGO_HOME:-$HOME/.cargo}
  mkdir -p "$root/root/.rustup" "$root/root/.cargo/bin" "$root/root/.cargo/registry" \
    "$ERE_CACHE/cargo-registry" "$ERE_CACHE/target-$name"
  mount --bind "$rustup" "$root/root/.rustup"
  mount -o remount,bind,ro "$root/root/.rustup"
  mount --bind "$cargo/bin" "$root/root/.cargo/bin"
  mount -o remount,bind,ro "$root/root/.cargo/bin"
  mount --bind "$ERE_CACHE/cargo-registry" "$root/root/.cargo/registry"
  FRESH_ROOT_DIR=$root
}

# Mount the target cache once the clone is in place (the clone creates the
# directory it is mounted on).
fresh_root_mount_target() {
  local root=$1 name=$2
  mkdir -p "$root/root/etcd-readiness-exporter/target"
  mount --bind "$ERE_CACHE/target-$name" "$root/root/etcd-readiness-exporter/target"
}

# The host's settings for reaching the registries (CA bundle paths, which
# the root has at the same place; proxies), passed into the root's
# otherwise empty environment.
_fr_net_env() {
  env | grep -E '^(SSL_CERT_FILE|SSL_CERT_DIR|PIP_CERT|REQUESTS_CA_BUNDLE|CURL_CA_BUNDLE|GIT_SSL_CAINFO|CARGO_HTTP_CAINFO|https?_proxy|HTTPS?_PROXY|no_proxy|NO_PROXY)=' || true
}

in_root() {
  local net=()
  mapfile -t net < <(_fr_net_env)
  chroot "$FRESH_ROOT_DIR" /usr/bin/env -i HOME=/root TERM=dumb LANG=C.UTF-8 ${CI:+CI=$CI} "${net[@]}" \
    PATH=/root/.cargo/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    RUSTUP_HOME=/root/.rustup CARGO_HOME=/root/.cargo "$@"
}
