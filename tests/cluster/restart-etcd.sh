#!/usr/bin/env bash
# Restarts etcd only (kube-apiserver and the other components keep running),
# with the command line up.sh started it with. The apiserver loses its
# storage for a few seconds: requests fail (or wait) and its watch caches
# must catch up, which is what tests of recovery need. The first call saves
# up.sh's command line and environment in $CLUSTER_DIR/etcd.{cmdline,environ}.
# Waits for etcd /health (prints the seconds etcd was away), then until the
# apiserver's /readyz is ok again.
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO="$(cd "$HERE/../.." && pwd)"
CLUSTER_DIR="${CLUSTER_DIR:-$REPO/.cluster}"
CLUSTER_DIR="$(cd "$CLUSTER_DIR" && pwd)"
PIDFILE="$CLUSTER_DIR/pids/etcd.pid"
die() { echo "restart-etcd.sh: $*" >&2; exit 1; }

[[ -f "$CLUSTER_DIR/env" && -f "$CLUSTER_DIR/ports" ]] || die "no cluster in $CLUSTER_DIR"
# shellcheck disable=SC1091
source "$CLUSTER_DIR/env"
# shellcheck disable=SC1091
source "$CLUSTER_DIR/ports"

exec 9>"$CLUSTER_DIR/.lock"
flock 9

pid="$(cat "$PIDFILE" 2>/dev/null || true)"
running=0
if [[ -n "$pid" ]] && kill -0 "$pid" 2>/dev/null; then
  tr '\0' ' ' <"/proc/$pid/cmdline" | grep -qF -- "$CLUSTER_DIR" || die "pid $pid is not this cluster's etcd"
  running=1
  [[ -f "$CLUSTER_DIR/etcd.cmdline" ]] || cp "/proc/$pid/cmdline" "$CLUSTER_DIR/etcd.cmdline"
  [[ -f "$CLUSTER_DIR/etcd.environ" ]] || cp "/proc/$pid/environ" "$CLUSTER_DIR/etcd.environ"
fi
[[ -f "$CLUSTER_DIR/etcd.cmdline" ]] || die "etcd is not running and no saved command line in $CLUSTER_DIR"
mapfile -d '' -t CMD <"$CLUSTER_DIR/etcd.cmdline"
mapfile -d '' -t ENV <"$CLUSTER_DIR/etcd.environ"

T0=$(date +%s.%N)
if ((running)); then
  kill -TERM "$pid"
  # Like restart-apiserver.sh: past 5 s a graceful stop is stuck, kill it.
  for _ in $(seq 1 25); do kill -0 "$pid" 2>/dev/null || break; sleep 0.2; done
  kill -0 "$pid" 2>/dev/null && kill -KILL "$pid" 2>/dev/null || true
  # Its ports stay bound until it is gone: a new one started before that
  # fails with "address already in use" (seen in CI after a stuck stop).
  for _ in $(seq 1 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.2; done
  if kill -0 "$pid" 2>/dev/null; then die "pid $pid still running 10 s after SIGKILL"; fi
fi

env -i "${ENV[@]}" setsid "${CMD[@]}" >>"$CLUSTER_DIR/logs/etcd.log" 2>&1 </dev/null 9>&- &
echo $! >"$PIDFILE"

healthy=0
for _ in $(seq 1 120); do
  if curl -sf "http://127.0.0.1:$ETCD_PORT/health" >/dev/null 2>&1; then healthy=1; break; fi
  kill -0 "$(cat "$PIDFILE")" 2>/dev/null || { tail -n 30 "$CLUSTER_DIR/logs/etcd.log" >&2; die "etcd exited"; }
  sleep 0.5
done
((healthy)) || { tail -n 30 "$CLUSTER_DIR/logs/etcd.log" >&2; die "etcd not healthy within 60s"; }
awk -v a="$T0" -v b="$(date +%s.%N)" 'BEGIN { printf "restart-etcd.sh: etcd healthy again after %.1fs\n", b - a }'

ready=0
for _ in $(seq 1 240); do
  if curl -sf --cacert "$EA_CLUSTER_CA" "$EA_APISERVER_URL/readyz" >/dev/null 2>&1; then ready=1; break; fi
  sleep 0.5
done
((ready)) || die "kube-apiserver not ready within 120s of the etcd restart"
awk -v a="$T0" -v b="$(date +%s.%N)" 'BEGIN { printf "restart-etcd.sh: apiserver ready again after %.1fs\n", b - a }'
