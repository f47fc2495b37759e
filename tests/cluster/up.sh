#!/usr/bin/env bash
# Starts a real local Kubernetes control plane (etcd, kube-apiserver,
# kube-controller-manager, kube-scheduler) plus kwok (3 fake nodes, fake pod
# status) on 127.0.0.1 with random free ports. Idempotent: if the cluster in
# $CLUSTER_DIR is already up and healthy it returns quickly; a broken or
# half-started one is stopped and started afresh.
#
#   CLUSTER_DIR   state dir (default: <repo>/.cluster): pki, logs, pids, data,
#                 kubeconfig (admin) and env (source it: KUBECONFIG and PATH).
#   EA_CACHE_DIR  binary cache (see build.sh).
#   EA_SKIP_SMOKE=1  skip the scheduling smoke test after start.
#
# Usage: tests/cluster/up.sh && source "${CLUSTER_DIR:-.cluster}/env"
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO="$(cd "$HERE/../.." && pwd)"
CLUSTER_DIR="${CLUSTER_DIR:-$REPO/.cluster}"
mkdir -p "$CLUSTER_DIR"
CLUSTER_DIR="$(cd "$CLUSTER_DIR" && pwd)"
NODES=(kwok-node-0 kwok-node-1 kwok-node-2)
COMPONENTS=(etcd kube-apiserver kube-controller-manager kube-scheduler kwok)

# A start-up that fails at a process (exit 3 from fail: a component exited or
# timed out) is tried once more from a fresh state, saying so, so that one
# component's bad start does not cost a whole CI run. A failed build or a bad
# certificate (exit 1) is not retried. The first attempt's logs are kept.
if [[ -z "${EA_UP_ATTEMPT:-}" ]]; then
  rc=0
  EA_UP_ATTEMPT=1 "${BASH_SOURCE[0]}" "$@" || rc=$?
  ((rc == 3)) || exit "$rc"
  kept="$(mktemp -d "${TMPDIR:-/tmp}/ea-up-failed.XXXXXX")"
  cp -r "$CLUSTER_DIR/logs" "$kept/" 2>/dev/null || true
  echo "up.sh: the first start-up failed at a process (its logs: $kept/logs); trying once more from a fresh state" >&2
  EA_UP_ATTEMPT=2 exec "${BASH_SOURCE[0]}" "$@"
fi

T0=$(date +%s)
log() { echo "up.sh [$(($(date +%s) - T0))s]: $*"; }

# --- binaries ---------------------------------------------------------------
"$HERE/build.sh" >&2
eval "$("$HERE/build.sh" --print-env)"
KUBECTL="$K8S_BIN_DIR/kubectl"

# Only one up.sh/down.sh at a time per state dir.
exec 9>"$CLUSTER_DIR/.lock"
flock 9

# --- helpers ------------------------------------------------------------------
pid_of() { cat "$CLUSTER_DIR/pids/$1.pid" 2>/dev/null || true; }
# A component is alive when its pid file names a live process whose command line
# mentions this state dir (guards against pid reuse).
alive() {
  local pid; pid="$(pid_of "$1")"
  [[ -n "$pid" ]] && kill -0 "$pid" 2>/dev/null &&
    tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null | grep -qF -- "$CLUSTER_DIR"
}
kc() { "$KUBECTL" --kubeconfig "$CLUSTER_DIR/kubeconfig" "$@"; }

fail() { # fail <component> <message>
  local c=$1 pid st=0; shift
  echo "up.sh: FAILED: $c: $*" >&2
  # A component that exited is this shell's child: say how it ended, since a
  # kill or a binary that is not one leaves its log empty.
  pid="$(pid_of "$c")"
  if [[ -n "$pid" ]] && ! kill -0 "$pid" 2>/dev/null; then
    wait "$pid" 2>/dev/null || st=$?
    if ((st > 128 && st != 255)); then
      echo "up.sh: $c (pid $pid) was ended by signal $((st - 128)) ($(kill -l $((st - 128)) 2>/dev/null || echo '?'))" >&2
    else
      echo "up.sh: $c (pid $pid) exited with status $st" >&2
    fi
  fi
  local f="$CLUSTER_DIR/logs/$c.log"
  if [[ -f "$f" ]]; then
    if grep -qE '^(E[0-9]{4}|F[0-9]{4}|Error:|panic:)|"level":"(error|fatal|panic)"|"level":"ERROR"' "$f"; then
      echo "----- first error lines of $f -----" >&2
      grep -E '^(E[0-9]{4}|F[0-9]{4}|Error:|panic:)|"level":"(error|fatal|panic)"|"level":"ERROR"' "$f" | head -n 10 >&2
    fi
    echo "----- last 40 lines of $f -----" >&2
    tail -n 40 "$f" >&2
    echo "-----" >&2
  fi
  # Stop what was started but keep the state dir (logs) for inspection; the next
  # up.sh or down.sh cleans it.
  stop_all
  # 3: a process failed (retried once, see the top); 1: anything else.
  [[ " ${COMPONENTS[*]} " == *" $c "* ]] && exit 3
  exit 1
}

stop_all() {
  # SIGTERM everything but etcd at once, wait up to 10s, SIGKILL leftovers; then etcd.
  local c f pid pids=()
  # What runs beside the cluster (deploy-local.sh's server, the demo's
  # sampler): its pid file goes with the wiped state, so stop it now.
  for f in "$CLUSTER_DIR/webhook/pid" "$CLUSTER_DIR/demo/sampler.pid"; do
    [[ -f "$f" ]] || continue
    pid="$(cat "$f")"
    if [[ -n "$pid" ]] && kill -0 "$pid" 2>/dev/null &&
      tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null | grep -qF -- "$CLUSTER_DIR"; then
      pids+=("$pid")
    fi
  done
  for c in kwok kube-scheduler kube-controller-manager kube-apiserver; do
    alive "$c" && pids+=("$(pid_of "$c")")
  done
  stop_pids "${pids[@]}"
  alive etcd && stop_pids "$(pid_of etcd)"
  rm -f "$CLUSTER_DIR"/pids/*.pid
}
stop_pids() {
  local pid left
  (($#)) || return 0
  kill -TERM "$@" 2>/dev/null || true
  for _ in $(seq 1 50); do
    left=0
    for pid in "$@"; do kill -0 "$pid" 2>/dev/null && left=1; done
    ((left)) || return 0
    sleep 0.2
  done
  kill -KILL "$@" 2>/dev/null || true
}

# wait_for <component> <timeout s> <description> <command...>: polls the command
# every 0.5s; fails naming the component if it dies or the timeout passes.
wait_for() {
  local c=$1 timeout=$2 what=$3; shift 3
  local deadline=$(($(date +%s) + timeout))
  until "$@" >/dev/null 2>&1; do
    if [[ " ${COMPONENTS[*]} " == *" $c "* ]] && ! alive "$c"; then
      fail "$c" "process exited while waiting for: $what"
    fi
    (($(date +%s) < deadline)) || fail "$c" "timed out after ${timeout}s waiting for: $what"
    sleep 0.5
  done
}

healthy() {
  local c
  [[ -f "$CLUSTER_DIR/kubeconfig" && -f "$CLUSTER_DIR/env" ]] || return 1
  for c in "${COMPONENTS[@]}"; do alive "$c" || return 1; done
  kc get --raw /readyz >/dev/null 2>&1 || return 1
  nodes_ready
}

nodes_ready() {
  local out
  out="$(kc get nodes -o jsonpath='{range .items[*]}{.metadata.name}{" "}{.status.conditions[?(@.type=="Ready")].status}{" "}{.spec.taints[*].key}{"\n"}{end}' 2>/dev/null)" || return 1
  local n
  for n in "${NODES[@]}"; do
    grep -qE "^$n True( |$)" <<<"$out" || return 1
  done
  ! grep -q 'node.kubernetes.io/not-ready\|node.kubernetes.io/unreachable' <<<"$out"
}

default_sa_exists() { kc -n "${1:-default}" get serviceaccount default; }

print_usage() {
  echo "up.sh: cluster ready in $(($(date +%s) - T0))s (Kubernetes $K8S_VERSION, etcd $ETCD_VERSION, kwok $KWOK_VERSION)"
  echo "  export KUBECONFIG=$CLUSTER_DIR/kubeconfig"
  echo "  kubectl: $KUBECTL (also $CLUSTER_DIR/bin/kubectl)"
  echo "  source $CLUSTER_DIR/env   # sets KUBECONFIG, PATH, EA_APISERVER_URL, EA_CLUSTER_CA"
}

if healthy; then
  log "cluster in $CLUSTER_DIR is already up and healthy"
  print_usage
  exit 0
fi

# --- fresh start ----------------------------------------------------------------
log "starting a fresh cluster in $CLUSTER_DIR"
stop_all
# Wipe old state (but not the lock file we hold).
find "$CLUSTER_DIR" -mindepth 1 -maxdepth 1 ! -name .lock -exec rm -rf {} +
touch "$CLUSTER_DIR/.ea-cluster" # marker: down.sh only deletes dirs that have it
mkdir -p "$CLUSTER_DIR"/{pki,logs,pids,certs,bin}
mkdir -m 700 "$CLUSTER_DIR/etcd"
for b in kube-apiserver kube-controller-manager kube-scheduler kubectl; do
  ln -sfn "$K8S_BIN_DIR/$b" "$CLUSTER_DIR/bin/$b"
done
ln -sfn "$ETCD_BIN" "$CLUSTER_DIR/bin/etcd"
ln -sfn "$KWOK_BIN" "$CLUSTER_DIR/bin/kwok"

# Random free loopback ports below the ephemeral range (32768+), so outgoing
# connections cannot take them between now and the components binding them.
used_ports=" "
free_port() {
  local p
  for _ in $(seq 1 200); do
    p=$((10000 + RANDOM % 22000))
    [[ "$used_ports" == *" $p "* ]] && continue
    if [[ -z "$(ss -Htan "( sport = :$p )" 2>/dev/null)" ]]; then
      used_ports+="$p "
      echo "$p"
      return 0
    fi
  done
  echo "up.sh: no free port found" >&2
  return 1
}
# (called in the main shell, not $(...), so used_ports is kept)
next_port() { local -n _out=$1; _out="$(free_port)"; used_ports+="$_out "; }
next_port ETCD_PORT; next_port ETCD_PEER_PORT; next_port APISERVER_PORT
next_port KCM_PORT; next_port SCHED_PORT; next_port KWOK_PORT
APISERVER_URL="https://127.0.0.1:$APISERVER_PORT"
cat >"$CLUSTER_DIR/ports" <<EOF
ETCD_PORT=$ETCD_PORT
ETCD_PEER_PORT=$ETCD_PEER_PORT
APISERVER_PORT=$APISERVER_PORT
KCM_PORT=$KCM_PORT
SCHED_PORT=$SCHED_PORT
KWOK_PORT=$KWOK_PORT
EOF

# --- PKI ------------------------------------------------------------------------
PKI="$CLUSTER_DIR/pki"
(
  set -e
  cd "$PKI"
  exec 2>"$CLUSTER_DIR/logs/openssl.log"
  openssl req -x509 -newkey rsa:2048 -nodes -keyout ca.key -out ca.crt -days 3650 \
    -subj "/CN=eviction-autoscaler-local-ca" \
    -addext "basicConstraints=critical,CA:TRUE" \
    -addext "keyUsage=critical,keyCertSign,cRLSign,digitalSignature" \
    -addext "subjectKeyIdentifier=hash"
  cat >apiserver.ext <<'EOF'
basicConstraints=critical,CA:FALSE
keyUsage=critical,digitalSignature,keyEncipherment
extendedKeyUsage=serverAuth
subjectAltName=IP:127.0.0.1,DNS:localhost,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc,DNS:kubernetes.default.svc.cluster.local,IP:10.96.0.1
authorityKeyIdentifier=keyid
subjectKeyIdentifier=hash
EOF
  openssl req -newkey rsa:2048 -nodes -keyout apiserver.key -out apiserver.csr -subj "/CN=kube-apiserver"
  openssl x509 -req -in apiserver.csr -CA ca.crt -CAkey ca.key -CAcreateserial -days 3650 \
    -extfile apiserver.ext -out apiserver.crt
  # Front proxy (aggregation layer) CA and client cert. Without a requestheader CA,
  # kube-controller-manager and kube-scheduler log "missing content for CA bundle
  # ... requestheader-client-ca-file" errors over and over.
  openssl req -x509 -newkey rsa:2048 -nodes -keyout front-proxy-ca.key -out front-proxy-ca.crt -days 3650 \
    -subj "/CN=eviction-autoscaler-local-front-proxy-ca" \
    -addext "basicConstraints=critical,CA:TRUE" \
    -addext "keyUsage=critical,keyCertSign,cRLSign,digitalSignature"
  printf '%s\n' "basicConstraints=critical,CA:FALSE" "keyUsage=critical,digitalSignature,keyEncipherment" \
    "extendedKeyUsage=clientAuth" >front-proxy-client.ext
  openssl req -newkey rsa:2048 -nodes -keyout front-proxy-client.key -out front-proxy-client.csr \
    -subj "/CN=front-proxy-client"
  openssl x509 -req -in front-proxy-client.csr -CA front-proxy-ca.crt -CAkey front-proxy-ca.key \
    -CAcreateserial -days 3650 -extfile front-proxy-client.ext -out front-proxy-client.crt
  # Service account token signing key pair.
  openssl genrsa -out sa.key 2048
  openssl rsa -in sa.key -pubout -out sa.pub
  chmod 600 ./*.key
) || fail openssl "certificate generation failed"

# --- tokens and kubeconfigs ---------------------------------------------------------
rand_token() { od -An -N16 -tx1 /dev/urandom | tr -d ' \n'; }
ADMIN_TOKEN="$(rand_token)"; KCM_TOKEN="$(rand_token)"; SCHED_TOKEN="$(rand_token)"; KWOK_TOKEN="$(rand_token)"
# token,user,uid,"group1,group2"
cat >"$PKI/tokens.csv" <<EOF
$ADMIN_TOKEN,admin,admin,"system:masters"
$KCM_TOKEN,system:kube-controller-manager,system:kube-controller-manager
$SCHED_TOKEN,system:kube-scheduler,system:kube-scheduler
$KWOK_TOKEN,kwok,kwok,"system:masters"
EOF
chmod 600 "$PKI/tokens.csv"
CA_DATA="$(base64 -w0 <"$PKI/ca.crt")"
write_kubeconfig() { # write_kubeconfig <file> <user> <token>
  cat >"$1" <<EOF
apiVersion: v1
kind: Config
clusters:
- name: eviction-autoscaler-local
  cluster:
    server: $APISERVER_URL
    certificate-authority-data: $CA_DATA
users:
- name: $2
  user:
    token: $3
contexts:
- name: eviction-autoscaler-local
  context:
    cluster: eviction-autoscaler-local
    user: $2
    namespace: default
current-context: eviction-autoscaler-local
EOF
  chmod 600 "$1"
}
write_kubeconfig "$CLUSTER_DIR/kubeconfig" admin "$ADMIN_TOKEN"
write_kubeconfig "$PKI/kube-controller-manager.kubeconfig" system:kube-controller-manager "$KCM_TOKEN"
write_kubeconfig "$PKI/kube-scheduler.kubeconfig" system:kube-scheduler "$SCHED_TOKEN"
write_kubeconfig "$PKI/kwok.kubeconfig" kwok "$KWOK_TOKEN"

# --- processes ----------------------------------------------------------------------
# start <component> <binary> <args...>: runs it in its own session (so it outlives
# this script), log in logs/<component>.log, pid in pids/<component>.pid.
start() {
  local c=$1; shift
  # GOMAXPROCS/GOMEMLIMIT keep the components modest on a shared 2-core machine.
  GOMAXPROCS="${EA_GOMAXPROCS:-2}" setsid "$@" >"$CLUSTER_DIR/logs/$c.log" 2>&1 </dev/null 9>&- &
  echo $! >"$CLUSTER_DIR/pids/$c.pid"
  log "started $c (pid $!)"
}

start etcd "$ETCD_BIN" \
  --name=default \
  --data-dir="$CLUSTER_DIR/etcd" \
  --listen-client-urls="http://127.0.0.1:$ETCD_PORT" \
  --advertise-client-urls="http://127.0.0.1:$ETCD_PORT" \
  --listen-peer-urls="http://127.0.0.1:$ETCD_PEER_PORT" \
  --initial-advertise-peer-urls="http://127.0.0.1:$ETCD_PEER_PORT" \
  --initial-cluster="default=http://127.0.0.1:$ETCD_PEER_PORT" \
  --unsafe-no-fsync=true \
  --quota-backend-bytes=2147483648 \
  --log-level=warn
wait_for etcd 60 "etcd /health" curl -sf "http://127.0.0.1:$ETCD_PORT/health"

GOMEMLIMIT=1GiB start kube-apiserver "$K8S_BIN_DIR/kube-apiserver" \
  --etcd-servers="http://127.0.0.1:$ETCD_PORT" \
  --bind-address=127.0.0.1 \
  --advertise-address=127.0.0.1 \
  --secure-port="$APISERVER_PORT" \
  --cert-dir="$CLUSTER_DIR/certs" \
  --tls-cert-file="$PKI/apiserver.crt" \
  --tls-private-key-file="$PKI/apiserver.key" \
  --client-ca-file="$PKI/ca.crt" \
  --requestheader-client-ca-file="$PKI/front-proxy-ca.crt" \
  --requestheader-allowed-names=front-proxy-client \
  --requestheader-username-headers=X-Remote-User \
  --requestheader-group-headers=X-Remote-Group \
  --requestheader-extra-headers-prefix=X-Remote-Extra- \
  --proxy-client-cert-file="$PKI/front-proxy-client.crt" \
  --proxy-client-key-file="$PKI/front-proxy-client.key" \
  --token-auth-file="$PKI/tokens.csv" \
  --authorization-mode=Node,RBAC \
  --enable-admission-plugins=OwnerReferencesPermissionEnforcement \
  --service-account-issuer=https://kubernetes.default.svc.cluster.local \
  --service-account-key-file="$PKI/sa.pub" \
  --service-account-signing-key-file="$PKI/sa.key" \
  --service-cluster-ip-range=10.96.0.0/16 \
  --allow-privileged=true \
  --profiling=false \
  --max-requests-inflight=200 \
  --max-mutating-requests-inflight=100 \
  --v=1
wait_for kube-apiserver 120 "kube-apiserver /readyz" \
  curl -sf --cacert "$PKI/ca.crt" "$APISERVER_URL/readyz"

# EA_KCM_QPS: the client rate limit of the controller-manager and the
# scheduler (upstream defaults when unset: 20 and 50 requests a second, per
# controller). The drain benchmark was also run with it raised, to show what
# the product does when the cluster's controllers keep up (BENCHMARKS.md).
API_QPS=()
if [ -n "${EA_KCM_QPS:-}" ]; then
  API_QPS=(--kube-api-qps="$EA_KCM_QPS" --kube-api-burst="$((EA_KCM_QPS * 2))")
fi

# --node-monitor-grace-period: the restart tests take the apiserver and etcd
# away for ~20 s, and client-go's relist backoff keeps the node lifecycle
# controller blind to lease renewals for up to 30 s more. At the default 40 s
# it then marks every node NotReady and every pod Ready=False at once, an
# outage of the test cluster's own making that hides what the tests measure.
# 120 s passed 6 of 6 loaded runs; 300 s leaves room for a slower machine.
start kube-controller-manager "$K8S_BIN_DIR/kube-controller-manager" \
  "${API_QPS[@]}" \
  --kubeconfig="$PKI/kube-controller-manager.kubeconfig" \
  --authentication-kubeconfig="$PKI/kube-controller-manager.kubeconfig" \
  --authorization-kubeconfig="$PKI/kube-controller-manager.kubeconfig" \
  --bind-address=127.0.0.1 \
  --secure-port="$KCM_PORT" \
  --cert-dir="$CLUSTER_DIR/certs" \
  --controllers='*' \
  --leader-elect=false \
  --node-monitor-grace-period=300s \
  --use-service-account-credentials=true \
  --service-account-private-key-file="$PKI/sa.key" \
  --root-ca-file="$PKI/ca.crt" \
  --cluster-signing-cert-file="$PKI/ca.crt" \
  --cluster-signing-key-file="$PKI/ca.key" \
  --service-cluster-ip-range=10.96.0.0/16 \
  --profiling=false \
  --v=1

start kube-scheduler "$K8S_BIN_DIR/kube-scheduler" \
  "${API_QPS[@]}" \
  --kubeconfig="$PKI/kube-scheduler.kubeconfig" \
  --authentication-kubeconfig="$PKI/kube-scheduler.kubeconfig" \
  --authorization-kubeconfig="$PKI/kube-scheduler.kubeconfig" \
  --bind-address=127.0.0.1 \
  --secure-port="$SCHED_PORT" \
  --cert-dir="$CLUSTER_DIR/certs" \
  --leader-elect=false \
  --profiling=false \
  --v=1

# kwok: manages all nodes, renews their Leases every 10s (duration 40s) so the node
# lifecycle controller keeps them Ready; pods on them get Running/Ready at once and
# are deleted at once when they get a deletionTimestamp.
start kwok "$KWOK_BIN" \
  --config="$HERE/kwok/stages.yaml" \
  --kubeconfig="$PKI/kwok.kubeconfig" \
  --manage-all-nodes=true \
  --node-lease-duration-seconds=40 \
  --cidr=10.244.0.0/16 \
  --node-ip=10.0.0.1 \
  --server-address="127.0.0.1:$KWOK_PORT"

wait_for kube-controller-manager 90 "kube-controller-manager /healthz" \
  curl -skf "https://127.0.0.1:$KCM_PORT/healthz"
wait_for kube-scheduler 90 "kube-scheduler /healthz" \
  curl -skf "https://127.0.0.1:$SCHED_PORT/healthz"

# --- env file ---------------------------------------------------------------------
{
  echo "# Generated by tests/cluster/up.sh: source this file (by its full path)."
  printf 'export KUBECONFIG=%q\n' "$CLUSTER_DIR/kubeconfig"
  # shellcheck disable=SC2016 # $PATH is expanded when the file is sourced
  printf 'export PATH=%q:"$PATH"\n' "$K8S_BIN_DIR"
  printf 'export EA_CLUSTER_DIR=%q\n' "$CLUSTER_DIR"
  printf 'export EA_APISERVER_URL=%q\n' "$APISERVER_URL"
  printf 'export EA_CLUSTER_CA=%q\n' "$PKI/ca.crt"
  printf 'export EA_KUBECTL=%q\n' "$KUBECTL"
} >"$CLUSTER_DIR/env"

# --- nodes -------------------------------------------------------------------------
node_yaml() {
  local n
  for n in "${NODES[@]}"; do
    cat <<EOF
---
apiVersion: v1
kind: Node
metadata:
  name: $n
  annotations:
    kwok.x-k8s.io/node: fake
    node.alpha.kubernetes.io/ttl: "0"
  labels:
    kubernetes.io/arch: amd64
    kubernetes.io/os: linux
    kubernetes.io/hostname: $n
    kubernetes.io/role: agent
    node-role.kubernetes.io/agent: ""
    type: kwok
spec: {}
status:
  allocatable:
    cpu: "32"
    memory: 256Gi
    pods: "110"
  capacity:
    cpu: "32"
    memory: 256Gi
    pods: "110"
EOF
  done
}
node_yaml | kc apply -f - >/dev/null || fail kube-apiserver "creating the kwok nodes failed"
wait_for kwok 90 "nodes ${NODES[*]} Ready without not-ready taint" nodes_ready
log "nodes Ready: ${NODES[*]}"
wait_for kube-controller-manager 60 "ServiceAccount default/default" default_sa_exists default

# --- smoke test: a pod gets scheduled and becomes Ready ------------------------------
if [[ "${EA_SKIP_SMOKE:-}" != 1 ]]; then
  ns="ea-smoke-$(rand_token | cut -c1-8)"
  kc create namespace "$ns" >/dev/null || fail kube-apiserver "creating namespace $ns failed"
  wait_for kube-controller-manager 60 "ServiceAccount $ns/default" default_sa_exists "$ns"
  kc -n "$ns" create deployment smoke --image=registry.k8s.io/pause:3.10 --replicas=1 >/dev/null ||
    fail kube-apiserver "creating the smoke Deployment failed"
  if ! kc -n "$ns" rollout status deployment/smoke --timeout=90s >/dev/null 2>&1; then
    kc -n "$ns" get deploy,rs,pods -o wide >&2 || true
    kc -n "$ns" get events >&2 || true
    comp=kube-scheduler
    kc -n "$ns" get pods -o jsonpath='{.items[*].spec.nodeName}' 2>/dev/null | grep -q . && comp=kwok
    kc -n "$ns" get pods -o name 2>/dev/null | grep -q . || comp=kube-controller-manager
    fail "$comp" "smoke Deployment did not become ready"
  fi
  kc delete namespace "$ns" --wait=false >/dev/null
  log "smoke test passed (pod scheduled and Ready)"
fi

print_usage
