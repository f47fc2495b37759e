#!/usr/bin/env bash
# The demo behind `make demo`: on the local control plane (tests/cluster/up.sh)
# it runs the webhook with its own ServiceAccount, creates a 3-replica
# Deployment (which gets its PDB at admission), and drains the node that holds
# all its pods with the real `kubectl drain`. Without the product the drain
# would fail with "Cannot evict pod as it would violate the pod's disruption
# budget"; with it the Deployment surges, the drain completes, and after the
# cooldown the Deployment is back at exactly 3 replicas.
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO="$(cd "$HERE/../.." && pwd)"
CLUSTER_DIR="${CLUSTER_DIR:-$REPO/.cluster}"
# shellcheck disable=SC1091
source "$CLUSTER_DIR/env"
NS=demo
NODE=kwok-node-0

say() { printf '\n\033[1m== %s\033[0m\n' "$*"; }

say "Starting eviction-autoscaler against the local cluster (COOLDOWN=10s)"
COOLDOWN=10s "$HERE/deploy-local.sh" start

for n in kwok-node-0 kwok-node-1 kwok-node-2; do kubectl uncordon "$n" >/dev/null; done
kubectl delete namespace "$NS" --ignore-not-found --wait=true >/dev/null
kubectl create namespace "$NS" >/dev/null
kubectl annotate namespace "$NS" eviction-autoscaler.azure.com/enable=true >/dev/null
until kubectl -n "$NS" get serviceaccount default >/dev/null 2>&1; do sleep 0.2; done

say "A 3-replica Deployment whose pods all prefer $NODE"
kubectl -n "$NS" apply -f - <<EOF
apiVersion: apps/v1
kind: Deployment
metadata:
  name: web
spec:
  replicas: 3
  strategy:
    rollingUpdate: {maxSurge: 100%, maxUnavailable: 0}
  selector:
    matchLabels: {app: web}
  template:
    metadata:
      labels: {app: web}
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
        image: registry.local/web:1
EOF
kubectl -n "$NS" rollout status deployment/web --timeout=60s
kubectl -n "$NS" get pods -o wide

say "Its PodDisruptionBudget, created by the mutating webhook (minAvailable = replicas)"
for _ in $(seq 50); do
  [[ "$(kubectl -n "$NS" get pdb web -o jsonpath='{.status.currentHealthy}' 2>/dev/null)" == 3 ]] && break
  sleep 0.2
done
kubectl -n "$NS" get pdb web
kubectl -n "$NS" get evictionautoscalers

say "kubectl drain $NODE (no --disable-eviction, no --force)"
start=$(date +%s)
kubectl drain "$NODE" --ignore-daemonsets --delete-emptydir-data --pod-selector=app=web --timeout=180s
echo "drain finished in $(( $(date +%s) - start ))s"
kubectl -n "$NS" get deployment web
kubectl -n "$NS" get pods -o wide

say "Events on the Deployment"
kubectl -n "$NS" get events.events.k8s.io --field-selector regarding.name=web -o custom-columns=REASON:.reason,NOTE:.note

say "Uncordon and wait for the scale back (cooldown 10s after the last signal)"
kubectl uncordon "$NODE"
for _ in $(seq 120); do
  r=$(kubectl -n "$NS" get deployment web -o jsonpath='{.spec.replicas}')
  m=$(kubectl -n "$NS" get deployment web -o jsonpath='{.metadata.annotations.evictionSurgeReplicas}')
  [[ "$r" == 3 && -z "$m" ]] && break
  sleep 0.5
done
kubectl -n "$NS" get deployment web
kubectl -n "$NS" get evictionautoscalers
kubectl -n "$NS" get events.events.k8s.io --field-selector regarding.name=web -o custom-columns=REASON:.reason,NOTE:.note | tail -n 3

say "Metrics"
PORT=$(cat "$CLUSTER_DIR/webhook/port")
curl -fsS --cacert "$CLUSTER_DIR/webhook/ca.crt" "https://127.0.0.1:$PORT/metrics" \
  | grep -E '^eviction_autoscaler_(admission_requests_total|blocked_evictions_total|active_surges|managed_pdbs|leader)' | head -n 20

say "Done. The server keeps running (log: $CLUSTER_DIR/webhook/server.log); 'make cluster-down' stops everything."
