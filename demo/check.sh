#!/usr/bin/env bash
# `make demo-check`: runs the demo end to end on a cluster of its own
# ($DEMO_CHECK_DIR, default <repo>/.cluster-demo-check, so a cluster you have
# up is left alone), checks its story and picture (demo/check.py), then checks
# that `make cluster-down` stops what the demo leaves running (the webhook
# server, and a sampler as an interrupted demo would leave it) and removes the
# state dir. About 100 s; the full output is in target/demo-check.log.
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO="$(cd "$HERE/.." && pwd)"
CLUSTER_DIR="${DEMO_CHECK_DIR:-$REPO/.cluster-demo-check}"
export CLUSTER_DIR
LOG="$REPO/target/demo-check.log"
mkdir -p "$REPO/target"
: >"$LOG"

fail() {
  echo "FAIL $*"
  echo "demo-check: failed (log: $LOG)"
  "$REPO/tests/cluster/down.sh" >>"$LOG" 2>&1 || true
  exit 1
}
trap 'fail "interrupted"' INT TERM

begin=$(date +%s)
"$REPO/tests/cluster/up.sh" >>"$LOG" 2>&1 || fail "tests/cluster/up.sh (see the log)"
CLUSTER_DIR="$(cd "$CLUSTER_DIR" && pwd)"
echo "demo-check: cluster up in $(($(date +%s) - begin))s; running the demo"

t=$(date +%s)
if ! DEMO_PAUSE=0 "$REPO/demo/run.sh" >>"$LOG" 2>&1; then
  tail -n 30 "$LOG"
  fail "demo/run.sh exited non-zero"
fi
echo "demo-check: the demo ran in $(($(date +%s) - t))s"

OUT="$CLUSTER_DIR/demo"
python3 "$HERE/check.py" "$OUT/samples.tsv" "$OUT/marks.tsv" "$OUT/demo.svg" || fail "the demo's story or picture"

# `make cluster-down` stops what the demo leaves behind. The demo leaves the
# server running on purpose; a sampler is left only by a demo killed before its
# own cleanup, so one is started here the way the demo starts it (and detached,
# as it would be once the killed demo's shell is gone).
server=$(cat "$CLUSTER_DIR/webhook/pid")
kill -0 "$server" 2>/dev/null || fail "the demo left no webhook server running (pid $server)"
(python3 "$HERE/sampler.py" --cluster-dir "$CLUSTER_DIR" --t0 "$(date +%s)" --out "$OUT/left-behind.tsv" \
  >/dev/null 2>&1 & echo $! >"$OUT/sampler.pid")
sampler=$(cat "$OUT/sampler.pid")
sleep 1
kill -0 "$sampler" 2>/dev/null || fail "the left-behind sampler did not start"

make -C "$REPO" --no-print-directory cluster-down CLUSTER_DIR="$CLUSTER_DIR" >>"$LOG" 2>&1 || fail "make cluster-down"
for p in "webhook server:$server" "sampler:$sampler"; do
  if kill -0 "${p#*:}" 2>/dev/null; then
    kill -TERM "${p#*:}" 2>/dev/null || true
    fail "make cluster-down left the ${p%:*} running (pid ${p#*:})"
  fi
  echo "ok   make cluster-down stopped the ${p%:*} (pid ${p#*:})"
done
[[ ! -e "$CLUSTER_DIR" ]] || fail "make cluster-down left $CLUSTER_DIR"
echo "ok   make cluster-down removed $CLUSTER_DIR"
echo "demo-check: passed in $(($(date +%s) - begin))s"
