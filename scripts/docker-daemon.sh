#!/usr/bin/env bash
# A private Docker daemon that lives entirely in one state directory, for the test suite (the
# `docker` CTest fixture) and for trying the image on a machine where no daemon runs.
#
#   scripts/docker-daemon.sh start  STATE_DIR   start it, wait until it answers
#   scripts/docker-daemon.sh stop   STATE_DIR   remove its containers, stop it, unmount and delete
#                                               what it left (its images too, unless
#                                               STRATA_DOCKER_KEEP_DATA=1 and the data root is
#                                               not a tmpfs)
#   scripts/docker-daemon.sh env    STATE_DIR   print `export DOCKER_HOST=unix://...` for it
#   scripts/docker-daemon.sh status STATE_DIR   exit 0 when it answers, 1 when not
#
# Why a daemon of our own, with these flags: the machines this project is built and tested on run
# no Docker daemon and have no network beyond the Debian mirror, and a test must never touch a
# daemon (or the containers) of the person running it. So the daemon gets its own data root, exec
# root, pid file and socket, no bridge, and leaves iptables, IP forwarding and masquerading alone:
# containers get no network of their own (compose projects use `internal: true` networks, image
# builds use `--network host`), and the host's network configuration is not changed.
#
# A Unix socket path holds at most 107 bytes, and the daemon (and the containerd it starts) put
# sockets under its exec root. When STATE_DIR is long, the socket and the exec root go to
# /tmp/strata-docker-<first 12 hex of sha256(STATE_DIR)> instead; `env` prints where.
#
# The data root must be on a file system overlay2 can use as its upper layer. On an overlayfs
# (a container's root, say) Docker would fall back to the vfs driver, which copies the whole image
# for every container (the Strata image is over a gigabyte), so there the data root becomes a tmpfs
# (STRATA_DOCKER_TMPFS_SIZE, default 16g: a limit, memory is used only as files are written). Set
# STRATA_DOCKER_TMPFS=1 to use a tmpfs anyway, or 0 never to.
#
# Exit codes: 0 done; 2 usage; 3 the daemon cannot start here (not root, no dockerd, no cgroups,
# the daemon died or did not answer in time), with a one-line reason on stderr (the daemon's log
# tail follows when it got that far) — the test fixture turns 3 into "skip the Docker tests".
set -euo pipefail

usage() {
  echo "usage: $0 start|stop|env|status STATE_DIR" >&2
  exit 2
}
[[ $# -eq 2 ]] || usage
cmd=$1
state=$2
[[ -n "$state" ]] || usage
# Absolute without resolving symlinks: the same string always gives the same socket path, which
# CMake also reads through `env` (tests/docker/CMakeLists.txt).
[[ "$state" == /* ]] || state="$PWD/$state"
state=${state%/}

start_timeout=${STRATA_DOCKER_START_TIMEOUT:-120}
stop_timeout=${STRATA_DOCKER_STOP_TIMEOUT:-30}

if (( ${#state} > 50 )); then
  hash=$(printf '%s' "$state" | sha256sum | cut -c1-12)
  rundir="/tmp/strata-docker-$hash"
else
  rundir="$state/run"
fi
sock="$rundir/docker.sock"
execroot="$rundir/exec"
dataroot="$state/data"
pidfile="$state/dockerd.pid"
logfile="$state/dockerd.log"
export DOCKER_HOST="unix://$sock"
# Only the classic builder works against this daemon (no BuildKit, no buildx).
export DOCKER_BUILDKIT=0

fail3() {  # REASON: the daemon cannot run here
  echo "docker-daemon: cannot start a Docker daemon: $*" >&2
  exit 3
}

daemon_pid() {  # prints the daemon's pid if it is alive
  local pid
  [[ -f "$pidfile" ]] || return 1
  pid=$(cat "$pidfile" 2>/dev/null) || return 1
  [[ "$pid" =~ ^[0-9]+$ ]] && kill -0 "$pid" 2>/dev/null || return 1
  # A stale pid file whose number now belongs to another process must not be signalled.
  [[ "$(readlink "/proc/$pid/exe" 2>/dev/null)" == */dockerd* ]] || return 1
  echo "$pid"
}

answers() { docker info >/dev/null 2>&1; }

log_tail() {
  if [[ -s "$logfile" ]]; then
    echo "--- last lines of $logfile:" >&2
    tail -n 25 "$logfile" >&2
  fi
}

# Mount points at or under a directory, deepest first (mountinfo escapes spaces as \040).
mounts_under() {
  local dir=$1
  awk -v d="$dir" '{ p = $5; gsub(/\\040/, " ", p); if (p == d || index(p, d "/") == 1) print p }' \
    /proc/self/mountinfo | sort -r
}

unmount_under() {
  local dir=$1 m
  [[ -e "$dir" ]] || return 0
  while IFS= read -r m; do
    [[ -n "$m" ]] || continue
    umount "$m" 2>/dev/null || umount -l "$m" 2>/dev/null ||
      echo "docker-daemon: could not unmount $m" >&2
  done < <(mounts_under "$dir")
}

# Processes whose command line names this daemon's exec root: its containerd and any container
# shim a killed daemon left behind. Matched on our own unique path, signalled by pid.
leftover_pids() {
  grep -alF -- "$execroot/" /proc/[0-9]*/cmdline 2>/dev/null | sed -n 's|^/proc/\([0-9]*\)/cmdline$|\1|p'
  return 0
}

check_can_run() {
  [[ $(id -u) -eq 0 ]] || fail3 "not root (dockerd needs root; run as root or use your own daemon)"
  command -v dockerd >/dev/null || PATH="$PATH:/usr/sbin:/sbin"
  command -v dockerd >/dev/null || fail3 "no dockerd binary (apt-get install docker.io)"
  command -v containerd >/dev/null || fail3 "no containerd binary (apt-get install docker.io)"
  command -v docker >/dev/null || fail3 "no docker client (apt-get install docker.io)"
  local cg
  cg=$(stat -fc %T /sys/fs/cgroup 2>/dev/null || true)
  case "$cg" in
    cgroup2fs) [[ -r /sys/fs/cgroup/cgroup.controllers ]] || fail3 "cgroup v2 at /sys/fs/cgroup has no controllers" ;;
    tmpfs) [[ -d /sys/fs/cgroup/memory || -d /sys/fs/cgroup/cpu ]] ||
      fail3 "no cgroup v1 hierarchies under /sys/fs/cgroup" ;;
    *) fail3 "no cgroup file system at /sys/fs/cgroup (found '${cg:-nothing}')" ;;
  esac
  [[ -w /sys/fs/cgroup ]] || [[ -w /sys/fs/cgroup/memory ]] ||
    fail3 "/sys/fs/cgroup is not writable (inside an unprivileged container?)"
}

# tmpfs for the data root when the file system under it cannot carry overlay2.
want_tmpfs() {
  case "${STRATA_DOCKER_TMPFS:-auto}" in
    1) return 0 ;;
    0) return 1 ;;
  esac
  local fs
  fs=$(stat -fc %T "$dataroot")
  case "$fs" in
    overlayfs|aufs|nfs|fuseblk|fuse|ecryptfs|UNKNOWN*) return 0 ;;
  esac
  return 1
}

start() {
  check_can_run
  if daemon_pid >/dev/null && answers; then
    echo "docker-daemon: already running (pid $(daemon_pid)), $DOCKER_HOST"
    return 0
  fi
  if daemon_pid >/dev/null; then
    fail3 "a dockerd (pid $(daemon_pid)) from $pidfile runs but does not answer; stop it first: $0 stop $state"
  fi
  mkdir -p "$state" "$dataroot" "$rundir" "$execroot"
  if want_tmpfs && ! mountpoint -q "$dataroot"; then
    local size=${STRATA_DOCKER_TMPFS_SIZE:-16g}
    echo "docker-daemon: data root on a tmpfs ($(stat -fc %T "$state") under $state cannot hold overlay2 layers), size limit $size"
    mount -t tmpfs -o "size=$size,mode=0710" strata-docker "$dataroot" ||
      fail3 "cannot mount a tmpfs at $dataroot"
  fi
  rm -f "$pidfile" "$sock"
  : >"$logfile"
  # setsid and no inherited descriptors: the daemon outlives this script (and the CTest test that
  # runs it) without holding its output pipe open.
  setsid dockerd \
    --data-root "$dataroot" \
    --exec-root "$execroot" \
    -H "unix://$sock" \
    --pidfile "$pidfile" \
    --bridge=none --iptables=false --ip-forward=false --ip-masq=false \
    </dev/null >>"$logfile" 2>&1 &
  local launcher=$!
  local deadline=$((SECONDS + start_timeout))
  until answers; do
    if (( SECONDS >= deadline )); then
      log_tail
      # Do not leave a half-started daemon behind.
      stop_quietly
      fail3 "dockerd did not answer on $sock within ${start_timeout}s"
    fi
    if ! kill -0 "$launcher" 2>/dev/null && ! daemon_pid >/dev/null; then
      local reason
      reason=$(grep -m1 -oE 'level=(fatal|error) msg="[^"]*"' "$logfile" | tail -n1 || true)
      log_tail
      stop_quietly
      fail3 "dockerd exited during start${reason:+: $reason}"
    fi
    sleep 0.5
  done
  local driver
  driver=$(docker info -f '{{.Driver}}' 2>/dev/null || echo unknown)
  echo "docker-daemon: running (pid $(daemon_pid || echo '?'), storage driver $driver), export DOCKER_HOST=$DOCKER_HOST"
  if [[ "$driver" == vfs ]]; then
    echo "docker-daemon: warning: the vfs driver copies the whole image for every container;" \
      "set STRATA_DOCKER_TMPFS=1 to put the data root on a tmpfs" >&2
  fi
}

stop_quietly() { stop >/dev/null 2>&1 || true; }

stop() {
  local pid removed=0
  if pid=$(daemon_pid); then
    if answers; then
      local ids
      ids=$(docker ps -aq 2>/dev/null || true)
      if [[ -n "$ids" ]]; then
        # shellcheck disable=SC2086
        docker rm -f $ids >/dev/null 2>&1 || echo "docker-daemon: some containers could not be removed" >&2
        removed=$(wc -w <<<"$ids")
      fi
    fi
    kill -TERM "$pid" 2>/dev/null || true
    local deadline=$((SECONDS + stop_timeout))
    while kill -0 "$pid" 2>/dev/null; do
      if (( SECONDS >= deadline )); then
        echo "docker-daemon: dockerd (pid $pid) still running after ${stop_timeout}s; SIGKILL" >&2
        kill -KILL "$pid" 2>/dev/null || true
        sleep 0.5
        break
      fi
      sleep 0.2
    done
  fi
  # Its containerd normally exits with it; after a SIGKILL it (and container shims) may not.
  local left p
  left=$(leftover_pids)
  if [[ -n "$left" ]]; then
    for p in $left; do kill -TERM "$p" 2>/dev/null || true; done
    sleep 2
    for p in $(leftover_pids); do kill -KILL "$p" 2>/dev/null || true; done
  fi
  unmount_under "$rundir"
  unmount_under "$state"
  local still
  still=$(mounts_under "$state"; [[ "$rundir" == "$state/run" ]] || mounts_under "$rundir")
  if [[ -n "$still" ]]; then
    echo "docker-daemon: mounts left, not deleting $state: $still" >&2
    return 1
  fi
  # Only what this script made, then STATE_DIR itself if that leaves it empty.
  rm -rf --one-file-system "$rundir" "$pidfile" "$logfile"
  if [[ "${STRATA_DOCKER_KEEP_DATA:-0}" != 1 ]]; then
    rm -rf --one-file-system "$dataroot"
  fi
  rmdir "$state" 2>/dev/null || true
  echo "docker-daemon: stopped${pid:+ (pid $pid)}, $removed container(s) removed, $state cleaned up"
}

case "$cmd" in
  start) start ;;
  stop) stop ;;
  env) echo "export DOCKER_HOST=$DOCKER_HOST" ;;
  status) daemon_pid >/dev/null && answers ;;
  *) usage ;;
esac
