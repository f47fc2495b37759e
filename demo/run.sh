#!/usr/bin/env bash
# The story behind `make demo`: a real `kubectl drain` of a node that holds four
# kinds of workload, told as it happens, then drawn.
#
#   demo-web/web        3 replicas, opted in: gets its PDB at admission, surges
#                       (maxSurge 100%) and its pods move before they are evicted
#   demo-hpa/api        2 replicas behind an HPA (min 2): the surge raises the
#                       HPA's minReplicas (and the replicas), default maxSurge 25%
#   demo-strict/ledger  opted in, but its own PDB says maxUnavailable: 0: no surge
#                       can help, the drain is stuck until the PDB is fixed
#   demo-legacy/worker  namespace without opt-in, no PDB: all pods leave at once
#
# Needs the local cluster (tests/cluster/up.sh) and a built server. Starts the
# server (tests/e2e/deploy-local.sh, COOLDOWN=10s), a sampler (demo/sampler.py)
# that prints one line per change and records $CLUSTER_DIR/demo/samples.tsv,
# and ends with demo/plot.py's picture at $CLUSTER_DIR/demo/demo.svg (+ .png
# where a converter exists). Leaves the cluster and the server running;
# `make cluster-down` stops both. Rerunnable: it deletes its namespaces first.
#
#   DEMO_STUCK_TIMEOUT  seconds the first drain waits on the stuck PDB (default 30)
#   DEMO_PAUSE          seconds to pause between acts, for reading (default 2)
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO="$(cd "$HERE/.." && pwd)"
CLUSTER_DIR="${CLUSTER_DIR:-$REPO/.cluster}"
[[ -f "$CLUSTER_DIR/env" ]] || { echo "demo: no cluster in $CLUSTER_DIR: run 'make cluster-up' (or 'make demo')" >&2; exit 1; }
CLUSTER_DIR="$(cd "$CLUSTER_DIR" && pwd)"
export CLUSTER_DIR
# shellcheck disable=SC1091
source "$CLUSTER_DIR/env"

OUT="$CLUSTER_DIR/demo"
NODE=kwok-node-0
PART_OF=app.kubernetes.io/part-of=ea-demo
NAMESPACES=(demo-web demo-hpa demo-strict demo-legacy)
STUCK="${DEMO_STUCK_TIMEOUT:-30}"
PAUSE="${DEMO_PAUSE:-2}"

if [[ -t 1 ]]; then B=$'\033[1m' D=$'\033[2m' R=$'\033[0m' RED=$'\033[31m'; else B='' D='' R='' RED=''; fi
T0US=${EPOCHREALTIME/./}
elapsed() { local e=$(((${EPOCHREALTIME/./} - T0US) / 100000)); printf '%d.%d' $((e / 10)) $((e % 10)); }
say() { printf '\n%s== %s%s\n' "$B" "$*" "$R"; }
tell() { printf '%s   %s%s\n' "$D" "$*" "$R"; }
mark() { printf '%s\t%s\n' "$(elapsed)" "$1" >>"$OUT/marks.tsv"; printf '%s+%6ss%s  %s>> %s%s\n' "$D" "$(elapsed)" "$R" "$B" "$1" "$R"; }
pause() { sleep "$PAUSE"; }

stop_sampler() {
  local f="$OUT/sampler.pid" pid
  [[ -f "$f" ]] || return 0
  pid=$(cat "$f")
  if kill -0 "$pid" 2>/dev/null && tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null | grep -qF -- "$CLUSTER_DIR"; then
    kill -TERM "$pid" 2>/dev/null || true
    for _ in $(seq 30); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
  fi
  rm -f "$f"
}
trap stop_sampler EXIT

# kubectl drain's own output, stamped. Its 429 lines are condensed to the pod,
# who answered (the webhook, or the apiserver's own budget check when the
# webhook let the request through) and the message; drain retries every 5 s,
# and a retry that meets the same message as that pod's last one is one short line.
stamp_drain() {
  local line pod msg who; declare -A told=()
  while IFS= read -r line; do
    if [[ "$line" == *"error when evicting pods/"*"(will retry after"* ]]; then
      pod=$(sed -n 's/.*pods\/"\([^"]*\)".*/\1/p' <<<"$line")
      msg=${line#*"(will retry after"*"): "}
      who="the apiserver's own budget check (the webhook let it through)"
      if [[ "$msg" == *"admission webhook"*"denied the request: "* ]]; then
        who="eviction-autoscaler's webhook"
        msg=${msg#*"denied the request: "}
      fi
      if [[ "${told[$pod]:-}" == "$msg" ]]; then
        printf '%s+%6ss%s  %-22s %s\n' "$D" "$(elapsed)" "$R" "drain" "$pod: the same 429 again, retrying in 5s"
        continue
      fi
      told[$pod]=$msg
      printf '%s+%6ss%s  %-22s %s%s: 429 from %s, retrying in 5s:%s %s\n' "$D" "$(elapsed)" "$R" "drain" \
        "$RED" "$pod" "$who" "$R" "$msg"
    else
      printf '%s+%6ss%s  %-22s %s\n' "$D" "$(elapsed)" "$R" "drain" "$line"
    fi
  done
}

drain() { # drain <timeout> : kubectl drain's exit code
  local rc=0
  kubectl drain "$NODE" --ignore-daemonsets --delete-emptydir-data --pod-selector="$PART_OF" \
    --timeout="$1" 2>&1 | stamp_drain || rc=$?
  return "$rc"
}

wait_for() { # wait_for <seconds> <what> <command...>: polls every 0.5 s
  local secs=$1 what=$2; shift 2
  for _ in $(seq $((secs * 2))); do "$@" && return 0; sleep 0.5; done
  echo "demo: timed out after ${secs}s waiting for $what" >&2
  return 1
}

workload() { # workload <ns> <name> <replicas> <strategy yaml>
  kubectl -n "$1" apply -f - >/dev/null <<EOF
apiVersion: apps/v1
kind: Deployment
metadata:
  name: $2
  labels: {app: $2, app.kubernetes.io/part-of: ea-demo}
spec:
  replicas: $3
  strategy: $4
  selector:
    matchLabels: {app: $2}
  template:
    metadata:
      labels: {app: $2, app.kubernetes.io/part-of: ea-demo}
    spec:
      terminationGracePeriodSeconds: 0
      affinity:
        nodeAffinity:
          preferredDuringSchedulingIgnoredDuringExecution:
          - weight: 100
            preference:
              matchExpressions:
              - {key: kubernetes.io/hostname, operator: In, values: [$NODE]}
      containers:
      - name: app
        image: registry.local/$2:1
EOF
}

pdb_healthy() { # pdb_healthy <ns> <name> <n>: the disruption controller has counted n healthy pods
  [[ "$(kubectl -n "$1" get pdb "$2" -o jsonpath='{.status.currentHealthy}' 2>/dev/null)" == "$3" ]]
}
no_surge_left() {
  [[ -z "$(kubectl get deployments,hpa -A -l "$PART_OF" \
    -o jsonpath='{range .items[*]}{.metadata.annotations.evictionSurgeReplicas}{end}')" ]]
}
demo_pods_on_node() {
  kubectl get pods -A -l "$PART_OF" --field-selector "spec.nodeName=$NODE" --no-headers 2>/dev/null | wc -l
}
degraded() { # degraded <ns> <name>: prints the Degraded condition's reason and message if True
  kubectl -n "$1" get evictionautoscaler "$2" \
    -o jsonpath='{range .status.conditions[?(@.status=="True")]}{.type}{" "}{.reason}{": "}{.message}{"\n"}{end}' 2>/dev/null |
    sed -n 's/^Degraded //p'
}
has_degraded() { [[ -n "$(degraded "$@")" ]]; }

begin=$(date +%s)
say "Setting the stage: eviction-autoscaler (COOLDOWN=10s) and a clean slate"
stop_sampler
for n in kwok-node-0 kwok-node-1 kwok-node-2; do kubectl uncordon "$n" >/dev/null; done
kubectl delete namespace "${NAMESPACES[@]}" --ignore-not-found --wait=true >/dev/null
COOLDOWN=10s "$REPO/tests/e2e/deploy-local.sh" start
rm -rf "$OUT" && mkdir -p "$OUT"
for ns in "${NAMESPACES[@]}"; do kubectl create namespace "$ns" >/dev/null; done
for ns in demo-web demo-hpa demo-strict; do
  kubectl annotate namespace "$ns" eviction-autoscaler.azure.com/enable=true >/dev/null
done
for ns in "${NAMESPACES[@]}"; do
  wait_for 30 "ServiceAccount $ns/default" kubectl -n "$ns" get serviceaccount default >/dev/null 2>&1
done

say "Four workloads, all of whose pods prefer $NODE"
tell "demo-web/web        3 replicas, opted-in namespace: gets its own PDB at admission (maxSurge 100%)"
tell "demo-hpa/api        2 replicas behind an HPA with minReplicas 2 (maxSurge unset = 25%)"
tell "demo-strict/ledger  2 replicas with the team's own PDB: maxUnavailable: 0"
tell "demo-legacy/worker  3 replicas in a namespace that did not opt in: no PDB at all"
workload demo-web web 3 '{rollingUpdate: {maxSurge: 100%, maxUnavailable: 0}}'
workload demo-hpa api 2 '{}'
kubectl -n demo-hpa apply -f - >/dev/null <<EOF
apiVersion: autoscaling/v2
kind: HorizontalPodAutoscaler
metadata:
  name: api
spec:
  scaleTargetRef: {apiVersion: apps/v1, kind: Deployment, name: api}
  minReplicas: 2
  maxReplicas: 6
  metrics:
  - type: Resource
    resource: {name: cpu, target: {type: Utilization, averageUtilization: 70}}
EOF
# The team's PDB first, so the product never makes one of its own for ledger.
kubectl -n demo-strict apply -f - >/dev/null <<EOF
apiVersion: policy/v1
kind: PodDisruptionBudget
metadata:
  name: ledger
spec:
  maxUnavailable: 0
  selector:
    matchLabels: {app: ledger}
EOF
workload demo-strict ledger 2 '{}'
workload demo-legacy worker 3 '{}'
for d in demo-web/web demo-hpa/api demo-strict/ledger demo-legacy/worker; do
  kubectl -n "${d%/*}" rollout status "deployment/${d#*/}" --timeout=60s >/dev/null
done
wait_for 30 "PDB demo-web/web" pdb_healthy demo-web web 3
wait_for 30 "PDB demo-hpa/api" pdb_healthy demo-hpa api 2
wait_for 30 "PDB demo-strict/ledger" pdb_healthy demo-strict ledger 2
kubectl get pods -A -l "$PART_OF" -o wide | awk '{print $1, $2, $3, $4, $8}' | column -t
echo
kubectl get pdb -A | awk 'NR == 1 || $1 ~ /^demo-/' | column -t
tell "web's and api's PDBs were made by eviction-autoscaler (minAvailable = replicas, or the HPA's"
tell "minimum); ledger's is the team's own. worker has none: nothing protects it."
echo
kubectl get evictionautoscalers -A
pause

say "The timeline: one line per change, in seconds from now"
tell "'drain' lines are kubectl drain's own output (its 429s condensed); the others are what a sampler"
tell "sees change twice a second in the Deployments, PDBs, HPA, pods, nodes, Events and /metrics"
tell "(recorded to $OUT/samples.tsv)"
T0US=${EPOCHREALTIME/./}
python3 "$HERE/sampler.py" --cluster-dir "$CLUSTER_DIR" --t0 "${T0US:0:-6}.${T0US: -6}" \
  --out "$OUT/samples.tsv" --drained-node "$NODE" &
echo $! >"$OUT/sampler.pid"
sleep 1.5

say "kubectl drain $NODE --timeout=${STUCK}s (the real thing: Eviction API, no --force, no --disable-eviction)"
mark "drain 1 starts"
if drain "${STUCK}s"; then
  echo "demo: the first drain was expected to be stuck on ledger's PDB (maxUnavailable: 0), yet it completed" >&2
  exit 1
fi
mark "drain 1 gives up"
sleep 1
say "Where the first drain got stuck"
tell "web and api surged: their pods moved off $NODE before they were evicted, and each went back"
tell "to its baseline 10 s (the cooldown) after its last pod had left (api's Deployment 3 s after"
tell "its HPA's minimum, so the HPA controller has seen the minimum restored before it is lowered)."
tell "worker had no PDB and no opt-in: all 3 of its pods were evicted at the same moment."
tell "ledger is still on $NODE. Its own PDB (maxUnavailable: 0) allows no eviction at any size,"
tell "so no surge can help; the webhook says so in every 429, and the EvictionAutoScaler is Degraded:"
wait_for 20 "ledger's Degraded condition" has_degraded demo-strict ledger
printf '   %sDegraded: %s%s\n' "$RED" "$(degraded demo-strict ledger)" "$R"
kubectl get pods -A -l "$PART_OF" --field-selector "spec.nodeName=$NODE" -o wide | awk '{print $1, $2, $3, $4, $8}' | column -t
pause

say "The fix: the same promise (never fewer than 2 ledger pods) as minAvailable: 2, which a surge can meet"
tell "kubectl -n demo-strict patch pdb ledger --type=merge -p '{\"spec\":{\"maxUnavailable\":null,\"minAvailable\":2}}'"
tell "(the other way out: leave ledger to its owners and drain with a selector that excludes it)"
kubectl -n demo-strict patch pdb ledger --type=merge -p '{"spec":{"maxUnavailable":null,"minAvailable":2}}' >/dev/null
mark "ledger PDB fixed"
tell "ledger's pods still sit on a cordoned node, which is itself a surge signal: now that a surge"
tell "can help, it may start before the drain even asks."

say "kubectl drain $NODE again"
mark "drain 2 starts"
drain 180s
mark "drain 2 done"
n=$(demo_pods_on_node)
[[ "$n" == 0 ]] || { echo "demo: $n demo pods still on $NODE after the drain" >&2; exit 1; }

say "Waiting for the scale back: 10 s (the cooldown) after the last signal, nothing displaced"
tell "$NODE stays cordoned, as it would while it is upgraded."
wait_for 120 "every surge to be reverted" no_surge_left
mark "all surges reverted"
sleep 1.5
kubectl uncordon "$NODE" >/dev/null
mark "$NODE uncordoned"
sleep 1.5
stop_sampler

say "After the drain"
kubectl get deployments -A -l "$PART_OF"
echo
kubectl -n demo-hpa get hpa api
echo
kubectl get evictionautoscalers -A
echo
kubectl get events.events.k8s.io -A --sort-by=.metadata.creationTimestamp \
  -o custom-columns=NAMESPACE:.metadata.namespace,OBJECT:.regarding.name,REASON:.reason,NOTE:.note \
  --field-selector reportingController=eviction-autoscaler | awk 'NR == 1 || $1 ~ /^demo-/'

say "Metrics (https://127.0.0.1:$(cat "$CLUSTER_DIR/webhook/port")/metrics)"
curl -fsS --cacert "$CLUSTER_DIR/webhook/ca.crt" "https://127.0.0.1:$(cat "$CLUSTER_DIR/webhook/port")/metrics" |
  grep -E '^eviction_autoscaler_(blocked_evictions_total|active_surges|surge_replicas|managed_pdbs|leader)' | head -n 12

say "The picture"
python3 "$HERE/plot.py" --samples "$OUT/samples.tsv" --marks "$OUT/marks.tsv" --out "$OUT/demo.svg"

port=$(cat "$CLUSTER_DIR/webhook/port")
say "Done in $(($(date +%s) - begin))s. The cluster and the server keep running. Try next:"
try() { printf '  %-64s # %s\n' "$1" "$2"; }
try "source $CLUSTER_DIR/env" "kubectl and KUBECONFIG for this cluster"
try "kubectl get evictionautoscalers -A" "target, baseline, surge, allowed, conditions"
try "kubectl drain kwok-node-1 --ignore-daemonsets --pod-selector=$PART_OF" "drain another node"
try "kubectl uncordon kwok-node-1" "and bring it back"
try "target/debug/eviction-autoscaler doctor" "checks the installation"
try "curl -s --cacert $CLUSTER_DIR/webhook/ca.crt https://127.0.0.1:$port/metrics" "the metrics"
try "tail -f $CLUSTER_DIR/webhook/server.log" "the server's log"
try "make demo" "the story again, from a clean slate"
try "make cluster-down" "stop the server and the cluster"
