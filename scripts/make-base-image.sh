#!/usr/bin/env bash
# Makes the base image `debian:bookworm-slim` in the Docker daemon of DOCKER_HOST when that daemon
# does not have it, without any image registry: debootstrap (minbase) from the Debian mirror apt
# already uses, trimmed like the official slim image, then `docker import`.
#
# Why: docker/Dockerfile starts FROM debian:bookworm-slim, and the machines this project is built
# and tested on reach the Debian mirror but no image registry, so the image cannot be pulled. A
# user whose daemon can reach a registry can just `docker pull debian:bookworm-slim` first: this
# script then finds it and does nothing. It never contacts a registry itself.
#
# MIRROR: $STRATA_DEBIAN_MIRROR, else the first `URIs:` line of /etc/apt/sources.list.d/
# debian.sources (or the first `deb` line of /etc/apt/sources.list), else deb.debian.org.
# Needs root and debootstrap (scripts/install-deps.sh installs it); about half a minute. The root
# file system is built in a temporary directory that is removed afterwards, whatever happens.
# Exit 2 with a message naming what is missing.
set -euo pipefail

image=debian:bookworm-slim
suite=bookworm

die() {
  echo "make-base-image: $*" >&2
  exit 2
}

command -v docker >/dev/null || die "docker is not installed (apt-get install docker.io)"
if ! err=$(docker version -f '{{.Server.Version}}' 2>&1 >/dev/null); then
  die "cannot reach the Docker daemon at ${DOCKER_HOST:-unix:///var/run/docker.sock} (DOCKER_HOST): ${err%%$'\n'*}"
fi
if docker image inspect "$image" >/dev/null 2>&1; then
  echo "make-base-image: $image is already in the daemon"
  exit 0
fi

[[ $(id -u) -eq 0 ]] || die "$image is not in the daemon and making it needs root (debootstrap); run as root, or docker pull $image where a registry is reachable"
command -v debootstrap >/dev/null || PATH="$PATH:/usr/sbin:/sbin"
command -v debootstrap >/dev/null || die "$image is not in the daemon and debootstrap is not installed (apt-get install debootstrap)"

# The mirror and the security mirror from apt's own configuration (deb822 first, then one-line).
sources=/etc/apt/sources.list.d/debian.sources
uri_for() {  # SUITE: the URIs of the first deb822 stanza whose Suites list it
  [[ -r "$sources" ]] || return 0
  awk -v want="$1" '
    /^[[:space:]]*$/ { if (uri != "" && hit) { print uri; exit } uri = ""; hit = 0; next }
    /^[[:space:]]*#/ { next }
    /^URIs:/ { uri = $2 }
    /^Suites:/ { for (i = 2; i <= NF; i++) if ($i == want) hit = 1 }
    END { if (uri != "" && hit) print uri }' "$sources" | head -n1
}
mirror=${STRATA_DEBIAN_MIRROR:-}
[[ -n "$mirror" ]] || mirror=$(uri_for "$suite")
if [[ -z "$mirror" && -r /etc/apt/sources.list ]]; then
  mirror=$(awk '$1 == "deb" && $2 !~ /^\[/ { print $2; exit } $1 == "deb" { print $3; exit }' /etc/apt/sources.list)
fi
mirror=${mirror:-http://deb.debian.org/debian}
security=$(uri_for "$suite-security")
security=${security:-http://deb.debian.org/debian-security}

rootfs=$(mktemp -d "${TMPDIR:-/tmp}/strata-base.XXXXXX")
cleanup() {
  # debootstrap mounts /proc and /sys in the target and may leave them mounted when it fails:
  # unmount anything under the root file system before removing it, and never cross into a mount.
  local m
  awk -v d="$rootfs" '{ if (index($5, d "/") == 1) print $5 }' /proc/self/mountinfo | sort -r |
    while read -r m; do umount "$m" 2>/dev/null || umount -l "$m" 2>/dev/null || true; done
  rm -rf --one-file-system "$rootfs"
  rm -f "$rootfs.log"
}
trap cleanup EXIT

echo "make-base-image: debootstrap --variant=minbase $suite from $mirror (about half a minute)"
start=$SECONDS
if ! debootstrap --variant=minbase "$suite" "$rootfs" "$mirror" >"$rootfs.log" 2>&1; then
  tail -n 20 "$rootfs.log" >&2
  die "debootstrap of $suite from $mirror failed (log above)"
fi

# What the official slim image does: apt sources for the release, its updates and security, dpkg
# told not to install documentation, manuals and translations nor to fsync, and no caches or host
# files.
rm -f "$rootfs/etc/apt/sources.list"
cat >"$rootfs/etc/apt/sources.list.d/debian.sources" <<EOF
Types: deb
URIs: $mirror
Suites: $suite $suite-updates
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg

Types: deb
URIs: $security
Suites: $suite-security
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
EOF
cat >"$rootfs/etc/dpkg/dpkg.cfg.d/docker-slim" <<'EOF'
# As in the official debian:*-slim images: no documentation, manuals or translations.
path-exclude /usr/share/doc/*
path-include /usr/share/doc/*/copyright
path-exclude /usr/share/info/*
path-exclude /usr/share/man/*
path-exclude /usr/share/groff/*
path-exclude /usr/share/linda/*
path-exclude /usr/share/lintian/*
path-exclude /usr/share/locale/*
path-include /usr/share/locale/locale.alias
EOF
# dpkg without fsync: an image layer is committed as a whole or not at all, so the syncs buy
# nothing but time (the runtime libraries are ~900 MB of files).
echo force-unsafe-io >"$rootfs/etc/dpkg/dpkg.cfg.d/docker-apt-speedup"
cat >"$rootfs/etc/apt/apt.conf.d/docker-clean" <<'EOF'
DPkg::Post-Invoke { "rm -f /var/cache/apt/archives/*.deb /var/cache/apt/archives/partial/*.deb /var/cache/apt/*.bin || true"; };
APT::Update::Post-Invoke { "rm -f /var/cache/apt/archives/*.deb /var/cache/apt/archives/partial/*.deb /var/cache/apt/*.bin || true"; };
Dir::Cache::pkgcache "";
Dir::Cache::srcpkgcache "";
EOF
find "$rootfs/usr/share/doc" -mindepth 1 -not -name copyright -not -type d -delete
find "$rootfs/usr/share/doc" -mindepth 1 -type d -empty -delete
rm -rf "${rootfs:?}"/usr/share/{info,man,groff,linda,lintian}/* \
  "$rootfs"/var/cache/apt/archives/*.deb "$rootfs"/var/cache/apt/*.bin \
  "$rootfs"/var/lib/apt/lists/* "$rootfs"/var/log/*.log "$rootfs"/var/log/apt/* \
  "$rootfs"/tmp/* "$rootfs"/root/.bash_history
find "$rootfs/usr/share/locale" -mindepth 1 -maxdepth 1 -not -name locale.alias -exec rm -rf {} +
# The daemon provides these at run time; the build machine's own must not end up in the image.
: >"$rootfs/etc/resolv.conf"
echo localhost >"$rootfs/etc/hostname"

tar -C "$rootfs" --numeric-owner -c . |
  docker import \
    --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
    --change 'CMD ["bash"]' \
    --message "debootstrap --variant=minbase $suite $mirror (scripts/make-base-image.sh)" \
    - "$image" >/dev/null
size=$(docker image inspect -f '{{.Size}}' "$image")
echo "make-base-image: $image imported in $((SECONDS - start)) s, $((size / 1000000)) MB"
