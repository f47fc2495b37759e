#!/usr/bin/env bash
# Stops the local test cluster started by up.sh (by its pid files: SIGTERM, then
# SIGKILL after 10s), and the webhook server and demo sampler started beside it,
# and removes its state dir. Idempotent.
#
#   CLUSTER_DIR   state dir (default: <repo>/.cluster)
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO="$(cd "$HERE/../.." && pwd)"
CLUSTER_DIR="${CLUSTER_DIR:-$REPO/.cluster}"

if [[ ! -d "$CLUSTER_DIR" ]]; then
  echo "down.sh: nothing to do ($CLUSTER_DIR does not exist)"
  exit 0
fi
CLUSTER_DIR="$(cd "$CLUSTER_DIR" && pwd)"
if [[ ! -e "$CLUSTER_DIR/.ea-cluster" && ! -d "$CLUSTER_DIR/pids" ]]; then
  # Not made by up.sh (or only its lock file): refuse to delete anything else.
  if [[ -z "$(find "$CLUSTER_DIR" -mindepth 1 -maxdepth 1 ! -name .lock -print -quit)" ]]; then
    rm -rf "$CLUSTER_DIR"
    exit 0
  fi
  echo "down.sh: $CLUSTER_DIR was not created by up.sh (no .ea-cluster marker); not touching it" >&2
  exit 1
fi

exec 9>"$CLUSTER_DIR/.lock"
flock 9

# A live process whose command line mentions this state dir (guards against pid reuse).
# $1: a component of up.sh, or the path of a pid file.
ours() {
  local f="$1" pid
  [[ "$f" == */* ]] || f="$CLUSTER_DIR/pids/$1.pid"
  [[ -f "$f" ]] || return 1
  pid="$(cat "$f")"
  [[ -n "$pid" ]] && kill -0 "$pid" 2>/dev/null &&
    tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null | grep -qF -- "$CLUSTER_DIR" && echo "$pid"
}
# stop <component...>: SIGTERM them together, wait up to 10s, then SIGKILL.
stop() {
  local c pid pids=() names=() left
  for c in "$@"; do
    if pid="$(ours "$c")"; then pids+=("$pid"); names+=("$(basename "${c%/*pid}")($pid)"); fi
  done
  ((${#pids[@]})) || return 0
  kill -TERM "${pids[@]}" 2>/dev/null || true
  for _ in $(seq 1 50); do
    left=0
    for pid in "${pids[@]}"; do kill -0 "$pid" 2>/dev/null && left=1; done
    ((left)) || break
    sleep 0.2
  done
  if ((left)); then
    echo "down.sh: some of ${names[*]} ignored SIGTERM for 10s, sending SIGKILL"
    kill -KILL "${pids[@]}" 2>/dev/null || true
  fi
  echo "down.sh: stopped ${names[*]}"
}
# First what runs beside the cluster with its pid file in the state dir (removed
# below, after which nothing could find them): the webhook server of
# tests/e2e/deploy-local.sh (make demo, deploy-local) and the demo's sampler.
stop "$CLUSTER_DIR/webhook/pid" "$CLUSTER_DIR/demo/sampler.pid"
stop kwok kube-scheduler kube-controller-manager kube-apiserver
stop etcd

rm -rf "$CLUSTER_DIR"
echo "down.sh: removed $CLUSTER_DIR"
