#!/usr/bin/env bash
# Restarts kube-apiserver only (etcd and the other components keep running),
# with the command line up.sh started it with plus any extra flags given:
#
#   restart-apiserver.sh                 # as up.sh started it
#   restart-apiserver.sh --flag=value    # as up.sh started it, plus --flag=value
#
# Every watch on the apiserver ends; clients must list/watch again, which is
# what tests of watch health need. The first call saves up.sh's command line
# and environment in $CLUSTER_DIR/apiserver.{cmdline,environ}, so extra flags
# never accumulate. Waits for /readyz (prints the seconds the apiserver was
# away), then until kube-controller-manager acts again.
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO="$(cd "$HERE/../.." && pwd)"
CLUSTER_DIR="${CLUSTER_DIR:-$REPO/.cluster}"
CLUSTER_DIR="$(cd "$CLUSTER_DIR" && pwd)"
PIDFILE="$CLUSTER_DIR/pids/kube-apiserver.pid"
die() { echo "restart-apiserver.sh: $*" >&2; exit 1; }

[[ -f "$CLUSTER_DIR/env" ]] || die "no cluster in $CLUSTER_DIR"
# shellcheck disable=SC1091
source "$CLUSTER_DIR/env"

exec 9>"$CLUSTER_DIR/.lock"
flock 9

pid="$(cat "$PIDFILE" 2>/dev/null || true)"
running=0
if [[ -n "$pid" ]] && kill -0 "$pid" 2>/dev/null; then
  tr '\0' ' ' <"/proc/$pid/cmdline" | grep -qF -- "$CLUSTER_DIR" || die "pid $pid is not this cluster's apiserver"
  running=1
  # up.sh's command line and environment, saved once (NUL-separated).
  [[ -f "$CLUSTER_DIR/apiserver.cmdline" ]] || cp "/proc/$pid/cmdline" "$CLUSTER_DIR/apiserver.cmdline"
  [[ -f "$CLUSTER_DIR/apiserver.environ" ]] || cp "/proc/$pid/environ" "$CLUSTER_DIR/apiserver.environ"
fi
# Not running (a restart with a bad flag exited): start it from the saved command line.
[[ -f "$CLUSTER_DIR/apiserver.cmdline" ]] || die "kube-apiserver is not running and no saved command line in $CLUSTER_DIR"
mapfile -d '' -t CMD <"$CLUSTER_DIR/apiserver.cmdline"
mapfile -d '' -t ENV <"$CLUSTER_DIR/apiserver.environ"

T0=$(date +%s.%N)
if ((running)); then
  kill -TERM "$pid"
  # A graceful exit takes ~1 s; past 5 s it is stuck in shutdown (seen: 15 s+), so kill it.
  for _ in $(seq 1 25); do kill -0 "$pid" 2>/dev/null || break; sleep 0.2; done
  kill -0 "$pid" 2>/dev/null && kill -KILL "$pid" 2>/dev/null || true
  # Its ports stay bound until it is gone: a new one started before that
  # fails with "address already in use" (seen in CI after a stuck stop).
  for _ in $(seq 1 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.2; done
  if kill -0 "$pid" 2>/dev/null; then die "pid $pid still running 10 s after SIGKILL"; fi
fi

env -i "${ENV[@]}" setsid "${CMD[@]}" "$@" >>"$CLUSTER_DIR/logs/kube-apiserver.log" 2>&1 </dev/null 9>&- &
echo $! >"$PIDFILE"

ready=0
for _ in $(seq 1 240); do
  if curl -sf --cacert "$EA_CLUSTER_CA" "$EA_APISERVER_URL/readyz" >/dev/null 2>&1; then ready=1; break; fi
  kill -0 "$(cat "$PIDFILE")" 2>/dev/null || { tail -n 30 "$CLUSTER_DIR/logs/kube-apiserver.log" >&2; die "kube-apiserver exited"; }
  sleep 0.5
done
((ready)) || { tail -n 30 "$CLUSTER_DIR/logs/kube-apiserver.log" >&2; die "kube-apiserver not ready within 120s"; }
awk -v a="$T0" -v b="$(date +%s.%N)" 'BEGIN { printf "restart-apiserver.sh: ready again after %.1fs\n", b - a }'

# The other components' watches back off after the restart (client-go: up to 30 s
# and jitter, per informer; seen: a namespace's ServiceAccount and a ReplicaSet's pods
# 60 s+ late). Wait until the control plane acts on a new object again, as up.sh's
# smoke test does: a namespace gets its default ServiceAccount and a 1-replica
# Deployment rolls out (deployment and ReplicaSet controllers, scheduler, kwok).
T1=$(date +%s.%N)
SETTLE="ea-settle-$$"
KC=("$EA_KUBECTL" --kubeconfig "$CLUSTER_DIR/kubeconfig")
cleanup_settle() { "${KC[@]}" delete namespace "$SETTLE" --wait=false >/dev/null 2>&1 || true; }
trap cleanup_settle EXIT
"${KC[@]}" create namespace "$SETTLE" >/dev/null
settled=0
for _ in $(seq 1 360); do
  if "${KC[@]}" -n "$SETTLE" get serviceaccount default >/dev/null 2>&1; then settled=1; break; fi
  sleep 0.5
done
((settled)) || die "no default ServiceAccount within 180s of the restart (kube-controller-manager)"
"${KC[@]}" -n "$SETTLE" create deployment settle --image=registry.local/settle:1 >/dev/null
"${KC[@]}" -n "$SETTLE" rollout status deployment/settle --timeout=180s >/dev/null ||
  die "a Deployment did not roll out within 180s of the restart"
awk -v a="$T1" -v b="$(date +%s.%N)" 'BEGIN { printf "restart-apiserver.sh: control plane acting again after %.1fs more\n", b - a }'
