#!/usr/bin/env bash
# Runs the end-to-end suites (`make e2e`) on the running local cluster and a
# second one it brings up (two lanes, below), each suite under a deadline so
# a hung test ends the suite instead of the CI budget, and every suite even
# when an earlier one failed. Each suite's whole output is kept in
# $CLUSTER_DIR/logs/suite-<name>.log; the end of the output is a digest of
# what failed (each failing test's panic message, the test a deadline
# stopped, the clusters' state), because CI shows only the tail.
#
#   tests/run-suites.sh             # e2e | e2e_modes, chaos, restarts
#   SUITES="chaos restarts" tests/run-suites.sh   # these, on $CLUSTER_DIR only
set -uo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO="$(cd "$HERE/.." && pwd)"
CLUSTER_DIR="${CLUSTER_DIR:-$REPO/.cluster}"
CARGO="${CARGO:-cargo}"
LOGS="$CLUSTER_DIR/logs"
mkdir -p "$LOGS"

# name, deadline in seconds (well above a CI run's time, so that only a hung
# test reaches it), test binary and harness args. Seen on CI (903e922): e2e
# 783 s, e2e_modes 571 s, chaos 639 s (about 100 s more since restart_steps);
# locally on 5 December: e2e 771 s, e2e_modes about 645 s, chaos about 880 s
# (two leadership tests, 150 s, since).
# The apiserver and etcd restarts (chaos's control_plane test) run last,
# alone: a control plane that comes back hurt then costs that test only.
declare -A DEADLINE=([e2e]=1500 [e2e_modes]=1200 [chaos]=1500 [restarts]=600
  [chaos1]=900 [chaos2]=1200)
# SUITE_DEADLINE=<s> sets one deadline for all (to try this script out).
if [[ -n "${SUITE_DEADLINE:-}" ]]; then for k in "${!DEADLINE[@]}"; do DEADLINE[$k]=$SUITE_DEADLINE; done; fi
# chaos1 and chaos2 are the chaos suite in two (the lanes' share; seen on
# 8 December: chaos1 about 360 s, chaos2 about 540 s).
CHAOS1="clock_skew:: crd_deleted:: halfway:: keda_removed:: keda_unlisted:: lead_flap::"
declare -A BIN=([e2e]=e2e [e2e_modes]=e2e_modes [chaos]=chaos [restarts]=chaos
  [chaos1]=chaos [chaos2]=chaos)
declare -A ARGS=([e2e]="--test-threads=4" [e2e_modes]="--test-threads=1"
  [chaos]="--test-threads=1 --skip control_plane::" [restarts]="control_plane:: --test-threads=1"
  [chaos1]="--test-threads=1 $CHAOS1"
  [chaos2]="--test-threads=1 --skip control_plane:: --skip ${CHAOS1//:: /:: --skip }")

# All the suites of a lane end within SUITES_BUDGET seconds (a suite's
# deadline is cut to what is left), so that even two hung suites leave the
# digest inside CI's 90 minutes (about 25 of them building the control plane
# on a fresh machine). A suite with less than 2 minutes left is not run, and
# fails.
SUITES_BUDGET="${SUITES_BUDGET:-3300}"

# Two lanes at once, each on a control plane of its own (the suites mostly
# wait on the clock: cooldowns, kubectl's 5 s retry, the controller-manager;
# one lane left a core idle): the e2e suite, whose drain tests take turns
# on the nodes, then half of chaos, on $CLUSTER_DIR; the suites that restart
# or kill the server, one test at a time, on $CLUSTER_DIR-b, brought up here
# and down at the end (also when the run is interrupted). A fresh clone's
# `make test` took 35 minutes so (8 December), against about 50 for the
# suites alone one after the other. SUITES=<names> runs those one after the
# other on $CLUSTER_DIR alone.
LANE_A="e2e chaos1"
LANE_B="e2e_modes chaos2 restarts"
if [[ -n "${SUITES:-}" ]]; then LANE_A="$SUITES" LANE_B=""; fi
CLUSTER_B="${CLUSTER_DIR_B:-$CLUSTER_DIR-b}"
FAILED="$LOGS/failed-suites"
rm -f "$FAILED"

# run_lane <cluster dir> <suites...>: each suite under its deadline, its
# output in its log only (two lanes' output interleaved line by line would
# be unreadable; the digest shows what failed), failures appended to
# $FAILED.
run_lane() {
  local dir=$1 lane_begun s log left deadline start rc
  shift
  lane_begun=$(date +%s)
  for s in "$@"; do
    log="$LOGS/suite-$s.log"
    left=$((SUITES_BUDGET - ($(date +%s) - lane_begun)))
    if ((left < 120)); then
      echo "--- suite $s NOT RUN: ${left}s left of SUITES_BUDGET=${SUITES_BUDGET}s" | tee "$log"
      echo "TIMED OUT" >>"$log"
      echo "$s" >>"$FAILED"
      continue
    fi
    deadline=${DEADLINE[$s]}
    ((left < deadline)) && deadline=$left
    echo "--- suite $s (deadline ${deadline}s, cluster $dir, output in $log)"
    start=$(date +%s)
    # --kill-after: a test binary that ignores TERM (a blocking call) still ends.
    # shellcheck disable=SC2086
    CLUSTER_DIR="$dir" timeout --kill-after=20 "$deadline" "$CARGO" test --test "${BIN[$s]}" -- ${ARGS[$s]} >"$log" 2>&1
    rc=$?
    echo "--- suite $s: exit $rc after $(($(date +%s) - start))s ($(grep -cE '^test [^ ]+ \.\.\. ok' "$log") passed, $(grep -cE '^test [^ ]+ \.\.\. FAILED' "$log") failed)"
    if ((rc != 0)); then
      echo "$s" >>"$FAILED"
      # On a line of its own: the test the deadline stopped left its line open.
      ((rc == 124 || rc == 137)) && printf '\nTIMED OUT\n' >>"$log"
    fi
  done
}

# The test binaries first, once: two lanes building them at once would
# wait on each other inside their deadlines.
bins=()
for s in $LANE_A $LANE_B; do bins+=(--test "${BIN[$s]}"); done
if ! "$CARGO" test --no-run "${bins[@]}" >"$LOGS/build-tests.log" 2>&1; then
  tail -n 40 "$LOGS/build-tests.log"
  echo "=================== end-to-end failures: the test binaries did not build ==================="
  exit 1
fi

lane_b_pid=
if [[ -n "$LANE_B" ]]; then
  (
    # shellcheck disable=SC2030
    export CLUSTER_DIR="$CLUSTER_B"
    if ! "$REPO/tests/cluster/up.sh" >"$LOGS/up-b.log" 2>&1; then
      tail -n 20 "$LOGS/up-b.log"
      echo "--- the second control plane did not start (log: $LOGS/up-b.log): its suites are not run"
      for s in $LANE_B; do echo "$s" >>"$FAILED"; echo "--- suite $s NOT RUN: the second control plane did not start (log: $LOGS/up-b.log)" >"$LOGS/suite-$s.log"; done
      exit 0
    fi
    # shellcheck disable=SC2086
    run_lane "$CLUSTER_B" $LANE_B
    "$REPO/tests/e2e/deploy-local.sh" stop >/dev/null 2>&1 || true
  ) &
  lane_b_pid=$!
fi
# Lane A in the background too: bash runs a trap only once the foreground
# command ends, and `wait` lets it run at once.
# shellcheck disable=SC2086
run_lane "$CLUSTER_DIR" $LANE_A &
lane_a_pid=$!
# Interrupted: both lanes' suites end (timeout passes TERM on to the tests),
# and the second control plane goes down.
on_signal() {
  for p in $lane_a_pid $lane_b_pid; do
    pkill -TERM -P "$p" 2>/dev/null
    kill -TERM "$p" 2>/dev/null
  done
  wait 2>/dev/null
  [[ -n "$LANE_B" ]] && CLUSTER_DIR="$CLUSTER_B" "$REPO/tests/cluster/down.sh" >/dev/null 2>&1
  exit 130
}
trap on_signal INT TERM
wait "$lane_a_pid"
[[ -n "$lane_b_pid" ]] && wait "$lane_b_pid"
failed=()
[[ -f "$FAILED" ]] && mapfile -t failed <"$FAILED"

echo "--- figures measured by the drain tests ---"
cat "$CLUSTER_DIR/figures.txt" 2>/dev/null || true
[[ -n "$LANE_B" ]] && cat "$CLUSTER_B/figures.txt" 2>/dev/null
# The second control plane's state is read for the digest first.
digest_clusters=("$CLUSTER_DIR")
[[ -n "$LANE_B" && -d "$CLUSTER_B" ]] && digest_clusters+=("$CLUSTER_B")
down_b() {
  [[ -n "$LANE_B" && -d "$CLUSTER_B" ]] && CLUSTER_DIR="$CLUSTER_B" "$REPO/tests/cluster/down.sh" >/dev/null 2>&1
  return 0
}
if ((${#failed[@]} == 0)); then down_b; exit 0; fi

# The digest: short enough to be all of a CI tail.
echo
echo "=================== end-to-end failures: ${failed[*]} ==================="
for s in "${failed[@]}"; do
  log="$LOGS/suite-$s.log"
  echo "### suite $s"
  grep -E '^--- suite .* NOT RUN' "$log" && continue
  if grep -q '^TIMED OUT$' "$log"; then
    # The tests that started and never reported (with --test-threads=1, the hung one).
    started=$(grep -oE '^test [^ ]+ \.\.\. ' "$log" | awk '{print $2}' | sort -u)
    done_=$(grep -oE '^test [^ ]+ \.\.\. (ok|FAILED|ignored)' "$log" | awk '{print $2}' | sort -u)
    running=$(comm -23 <(echo "$started") <(echo "$done_"))
    slow=$(grep -oE 'test [^ ]+ has been running for over [0-9]+ seconds' "$log" | awk '{print $2}' | sort -u)
    echo "deadline of ${DEADLINE[$s]}s reached; unfinished: $(printf '%s\n' "$running" "$slow" | sort -u | tr '\n' ' ')"
  fi
  grep -E '^test .* FAILED$' "$log" || true
  # Each failing test's captured output, from its panic on (at most 14 lines).
  awk '
    /^---- .* stdout ----$/ { name = $2; inblock = 1; shown = 0; panic = 0; next }
    /^failures:$/ { inblock = 0 }
    inblock && /panicked at/ { panic = 1; print "* " name ": " $0; next }
    inblock && panic && shown < 13 && !/^note: / { print "    " $0; shown++ }
  ' "$log"
done
echo "### cluster"
echo "disk: $(df -h "$CLUSTER_DIR" | awk 'NR == 2 {print $4 " free of " $2}'); memory: $(free -m | awk '/^Mem:/ {print $7 " MiB available"}'); load: $(cut -d' ' -f1-3 /proc/loadavg)"
for dir in "${digest_clusters[@]}"; do
  echo "-- $dir"
  if [[ -f "$dir/env" ]]; then
    (
      # shellcheck disable=SC1091
      source "$dir/env"
      timeout 10 curl -s -m 5 --cacert "$EA_CLUSTER_CA" "$EA_APISERVER_URL/readyz" >/dev/null 2>&1 &&
        echo "apiserver ready" || echo "apiserver NOT ready"
      timeout 20 kubectl get nodes --no-headers -o custom-columns='NAME:.metadata.name,READY:.status.conditions[?(@.type=="Ready")].status,TAINTS:.spec.taints[*].key' 2>&1 | head -n 5
      echo "pods not Running and Ready: $(timeout 20 kubectl get pods -A --no-headers 2>/dev/null | awk '$3 != "Running" || $2 !~ /^([0-9]+)\/\1$/' | wc -l)"
    )
  fi
  for c in etcd kube-apiserver kube-controller-manager; do
    f="$dir/logs/$c.log"
    [[ -f "$f" ]] || continue
    echo "$c: $(grep -cE '^[EF][0-9]{4} ' "$f") error lines; last: $(grep -E '^[EF][0-9]{4} ' "$f" | tail -n 1 | cut -c1-200)"
  done
done
down_b
exit 1
