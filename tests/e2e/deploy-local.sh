#!/usr/bin/env bash
# Runs eviction-autoscaler out of cluster against the local control plane
# (tests/cluster/up.sh), the way it runs in a cluster as far as the apiserver
# can tell: the CRD and RBAC from manifests/, the product's own ServiceAccount
# token (TokenRequest API), and both webhook configurations registered with
# url: https://127.0.0.1:<port>/... and the caBundle of a CA made by
# `eviction-autoscaler certs` (no kube-proxy here, so no Service reference).
#
#   deploy-local.sh start   build, (re)start the server, register webhooks
#   deploy-local.sh stop    stop the server, remove the webhook configurations
#
# Settings for the server come from the environment (PDB_CREATE, COOLDOWN, ...);
# defaults suit the tests. State: $CLUSTER_DIR/webhook/ (certs, kubeconfig, log, pid, port).
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO="$(cd "$HERE/../.." && pwd)"
CLUSTER_DIR="${CLUSTER_DIR:-$REPO/.cluster}"
# Absolute, so the server's command line names the state dir: tests/cluster/down.sh checks it before a kill.
CLUSTER_DIR="$(cd "$CLUSTER_DIR" 2>/dev/null && pwd || echo "$CLUSTER_DIR")"
STATE="$CLUSTER_DIR/webhook"
NS=eviction-autoscaler
SA=eviction-autoscaler

die() { echo "deploy-local.sh: $*" >&2; exit 1; }
[[ -f "$CLUSTER_DIR/env" ]] || die "no cluster in $CLUSTER_DIR: run 'make cluster-up' first"
# shellcheck disable=SC1091
source "$CLUSTER_DIR/env"
# Every kubectl call ends: an apiserver that accepts and never answers fails
# this script instead of hanging the test that runs it.
KUBECTL_BIN="$(type -P kubectl)" || die "no kubectl on PATH (source $CLUSTER_DIR/env)"
kubectl() { timeout --kill-after=5 90 "$KUBECTL_BIN" --request-timeout=60s "$@"; }
kubectl version >/dev/null 2>&1 || die "the cluster in $CLUSTER_DIR does not answer: run 'make cluster-up'"

stop_server() {
  if [[ -f "$STATE/pid" ]]; then
    local pid; pid=$(cat "$STATE/pid")
    if kill -0 "$pid" 2>/dev/null; then
      kill "$pid" 2>/dev/null || true
      for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
      kill -9 "$pid" 2>/dev/null || true
    fi
    rm -f "$STATE/pid"
  fi
}

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

case "${1:-start}" in
stop)
  kubectl delete validatingwebhookconfiguration eviction-autoscaler --ignore-not-found >/dev/null
  kubectl delete mutatingwebhookconfiguration eviction-autoscaler --ignore-not-found >/dev/null
  stop_server
  echo "deploy-local.sh: stopped"
  exit 0
  ;;
start) ;;
*) die "usage: deploy-local.sh start|stop" ;;
esac

BIN="${EA_BIN:-$REPO/target/debug/eviction-autoscaler}"
if [[ -z "${EA_BIN:-}" ]]; then
  (cd "$REPO" && cargo build --quiet --bin eviction-autoscaler)
fi
mkdir -p "$STATE"
stop_server

# A Lease whose holder stopped renewing it over a lease duration ago (a replica
# a test SIGKILLed) is deleted: replicas measure a Lease's expiry on their own
# clock from when they first see it (src/leader.rs), so the new server would
# otherwise wait a whole lease duration. A live holder renews every 2 s and
# keeps its Lease.
lease=$(kubectl -n "$NS" get lease eviction-autoscaler --ignore-not-found \
  -o jsonpath='{.spec.renewTime}|{.spec.leaseDurationSeconds}' 2>/dev/null || true)
if [[ -n "$lease" ]]; then
  IFS='|' read -r renewed duration <<<"$lease"
  if [[ -n "$renewed" ]] && (($(date +%s) - $(date -d "$renewed" +%s) > ${duration:-15})); then
    kubectl -n "$NS" delete lease eviction-autoscaler --ignore-not-found >/dev/null || true
  fi
fi

# Certificates: a local CA and a serving certificate for 127.0.0.1.
[[ -f "$STATE/tls.crt" ]] || "$BIN" certs --out "$STATE" --ip 127.0.0.1 --dns-name localhost >/dev/null

# CRD, namespace, ServiceAccount and RBAC exactly as shipped.
kubectl apply -f "$REPO/manifests/namespace.yaml" -f "$REPO/manifests/crd.yaml" -f "$REPO/manifests/rbac.yaml" >/dev/null
kubectl wait --for=condition=Established crd/evictionautoscalers.eviction-autoscaler.azure.com --timeout=30s >/dev/null
for _ in $(seq 100); do kubectl -n "$NS" get sa "$SA" >/dev/null 2>&1 && break; sleep 0.1; done

# The server runs with the ServiceAccount's token, so manifests/rbac.yaml is what is tested.
TOKEN=$(kubectl -n "$NS" create token "$SA" --duration=24h)
cat >"$STATE/kubeconfig" <<EOF
apiVersion: v1
kind: Config
clusters:
- name: local
  cluster:
    server: $EA_APISERVER_URL
    certificate-authority: $EA_CLUSTER_CA
users:
- name: $SA
  user:
    token: $TOKEN
contexts:
- name: $SA
  context: {cluster: local, user: $SA, namespace: $NS}
current-context: $SA
EOF
chmod 600 "$STATE/kubeconfig"

PORT=$(free_port)
echo "$PORT" >"$STATE/port"
POD_NAME="local-$(date +%s%N)"
echo "$POD_NAME" >"$STATE/pod_name"
(
  export KUBECONFIG="$STATE/kubeconfig"
  export PDB_CREATE="${PDB_CREATE:-true}" ENABLED_BY_DEFAULT="${ENABLED_BY_DEFAULT:-false}"
  export ACTIONED_NAMESPACES="${ACTIONED_NAMESPACES:-kube-system,e2e-actioned}" COOLDOWN="${COOLDOWN:-5s}"
  # A PDB made at admission for a create refused later goes after this (60 s by default).
  export ORPHAN_PDB_GRACE="${ORPHAN_PDB_GRACE:-15s}"
  export POD_NAMESPACE=$NS POD_NAME="$POD_NAME" RUST_LOG="${RUST_LOG:-info,kube_runtime=warn}"
  # Nothing routes by readiness here: no need to keep serving after SIGTERM
  # (stop_server SIGKILLs after 5 s).
  export SHUTDOWN_DELAY="${SHUTDOWN_DELAY:-0s}"
  exec "$BIN" serve --listen "127.0.0.1:$PORT" \
    --tls-cert-file "$STATE/tls.crt" --tls-key-file "$STATE/tls.key" \
    >>"$STATE/server.log" 2>&1
) &
echo $! >"$STATE/pid"

# Ready means the watch caches synced with the ServiceAccount's permissions
# (READY_WAIT seconds at most; the memory benchmark's 100k pods need minutes).
READY_WAIT=${READY_WAIT:-30}
tries=$((READY_WAIT * 10))
for i in $(seq "$tries"); do
  if curl -fsS -m 5 --cacert "$STATE/ca.crt" "https://127.0.0.1:$PORT/readyz" >/dev/null 2>&1; then break; fi
  if ! kill -0 "$(cat "$STATE/pid")" 2>/dev/null; then
    tail -n 30 "$STATE/server.log" >&2; die "the server exited"
  fi
  [[ $i -lt $tries ]] || { tail -n 30 "$STATE/server.log" >&2; die "the server did not become ready in ${READY_WAIT}s"; }
  sleep 0.1
done

CA_BUNDLE=$(base64 -w0 <"$STATE/ca.crt")
# manifests/webhooks.yaml with the Service reference swapped for the local URL.
python3 - "$REPO/manifests/webhooks.yaml" "$PORT" "$CA_BUNDLE" >"$STATE/webhooks.json" <<'PY'
import json, sys
port, ca = sys.argv[2], sys.argv[3]
docs, cur = [], []
for line in open(sys.argv[1]):
    if line.strip() == "---":
        docs.append("".join(cur)); cur = []
    else:
        cur.append(line)
docs.append("".join(cur))
# The manifests are plain YAML; kubectl converts them. Here only clientConfig changes,
# so edit the text: replace each `service:` block by url + caBundle.
out = []
for d in docs:
    lines, res, skip = d.splitlines(), [], 0
    path = None
    for i, l in enumerate(lines):
        if l.strip() == "service:":
            indent = l[: len(l) - len(l.lstrip())]
            j = i + 1
            while j < len(lines) and lines[j].startswith(indent + "  "):
                if lines[j].strip().startswith("path:"):
                    path = lines[j].split(":", 1)[1].strip()
                j += 1
            res.append(f"{indent}url: https://127.0.0.1:{port}{path}")
            res.append(f"{indent}caBundle: {ca}")
            skip = j - i - 1
            continue
        if skip:
            skip -= 1
            continue
        res.append(l)
    out.append("\n".join(res))
print("\n---\n".join(out))
PY
kubectl apply -f "$STATE/webhooks.json" >/dev/null
echo "deploy-local.sh: serving on https://127.0.0.1:$PORT (log: $STATE/server.log)"
