#!/usr/bin/env bash
# Builds the local test cluster's binaries (kube-apiserver, kube-controller-manager,
# kube-scheduler, kubectl, etcd, kwok) from the Go wrapper modules next to this
# script, once, into a cache outside the checkout:
#
#   ${EA_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/eviction-autoscaler}/bin/
#     v<k8s>/{kube-apiserver,kube-controller-manager,kube-scheduler,kubectl}
#     etcd-v<etcd>/etcd
#     kwok-v<kwok>/kwok
#
# Binaries that already exist are not rebuilt. Versions come from the wrapper
# go.mod files (k8s/, etcd/, kwok/).
#
# Usage: build.sh               build what is missing, print timings and paths
#        build.sh --print-env   print the paths as shell assignments (no build)
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
CACHE_DIR="${EA_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/eviction-autoscaler}"

modver() { # modver <go.mod> <module path>
  awk -v m="$2" '($1 == m || ($1 == "require" && $2 == m)) { v = ($1 == "require") ? $3 : $2; if (v ~ /^v[0-9]/) { print v; exit } }' "$1"
}

K8S_VERSION="$(modver "$HERE/k8s/go.mod" k8s.io/kubernetes)"
ETCD_VERSION="$(modver "$HERE/etcd/go.mod" go.etcd.io/etcd/server/v3)"
KWOK_VERSION="$(modver "$HERE/kwok/go.mod" sigs.k8s.io/kwok)"
for v in K8S_VERSION ETCD_VERSION KWOK_VERSION; do
  [[ -n "${!v}" ]] || { echo "build.sh: cannot read $v from the wrapper go.mod files" >&2; exit 1; }
done

K8S_BIN_DIR="$CACHE_DIR/bin/$K8S_VERSION"
ETCD_BIN="$CACHE_DIR/bin/etcd-$ETCD_VERSION/etcd"
KWOK_BIN="$CACHE_DIR/bin/kwok-$KWOK_VERSION/kwok"
K8S_BINARIES=(kube-apiserver kube-controller-manager kube-scheduler kubectl)

print_env() {
  printf 'K8S_VERSION=%q\nETCD_VERSION=%q\nKWOK_VERSION=%q\n' "$K8S_VERSION" "$ETCD_VERSION" "$KWOK_VERSION"
  printf 'K8S_BIN_DIR=%q\nETCD_BIN=%q\nKWOK_BIN=%q\n' "$K8S_BIN_DIR" "$ETCD_BIN" "$KWOK_BIN"
}
if [[ "${1:-}" == "--print-env" ]]; then print_env; exit 0; fi

command -v go >/dev/null || { echo "build.sh: go is not on PATH" >&2; exit 1; }

export CGO_ENABLED=0 GOTOOLCHAIN=local GOFLAGS=-buildvcs=false
# Release builds of Kubernetes use these tags (hack/lib/golang.sh).
# shellcheck disable=SC2054 # the commas belong to -tags
GO_BUILD=(go build -p "${EA_BUILD_JOBS:-2}" -trimpath -tags=selinux,notest,grpcnotrace)

now() { date +%s; }
T_ALL=$(now)
built=0

# Build into a temporary directory next to the target, then move into place, so an
# interrupted build never leaves a half-written binary that would be "cached".
# runs_as <binary> <expected version text> <args...>: a cached binary counts as
# built only if it runs and names its version. A file that is there but does not
# (truncated or zeroed by a crash or a copied cache) is removed and rebuilt; it
# would otherwise exit at once, silently, when up.sh starts it.
runs_as() {
  local bin=$1 want=$2 out; shift 2
  [[ -x "$bin" ]] || return 1
  out="$(timeout 20 "$bin" "$@" 2>&1 | head -c 4096)" || true
  if [[ "$out" != *"$want"* ]]; then
    echo "build.sh: $bin does not run as $want (printed: ${out:0:200}); rebuilding it" >&2
    rm -f "$bin"
    return 1
  fi
}
k8s_version_args() { [[ $1 == kubectl ]] && echo "version --client" || echo "--version"; }

k8s_missing=()
for b in "${K8S_BINARIES[@]}"; do
  # shellcheck disable=SC2046 # the arguments are meant to split
  runs_as "$K8S_BIN_DIR/$b" "$K8S_VERSION" $(k8s_version_args "$b") || k8s_missing+=("$b")
done
if ((${#k8s_missing[@]})); then
  echo "build.sh: building Kubernetes $K8S_VERSION: ${k8s_missing[*]}"
  major="${K8S_VERSION#v}"; major="${major%%.*}"
  minor="${K8S_VERSION#v*.}"; minor="${minor%%.*}"
  ldflags="-s -w"
  for pkg in k8s.io/client-go/pkg/version k8s.io/component-base/version; do
    ldflags+=" -X $pkg.gitVersion=$K8S_VERSION -X $pkg.gitMajor=$major -X $pkg.gitMinor=$minor"
    ldflags+=" -X $pkg.gitTreeState=clean -X $pkg.buildDate=1970-01-01T00:00:00Z"
  done
  pkgs=(); for b in "${k8s_missing[@]}"; do pkgs+=("k8s.io/kubernetes/cmd/$b"); done
  mkdir -p "$CACHE_DIR/bin"
  tmp="$(mktemp -d "$CACHE_DIR/bin/.build-k8s.XXXXXX")"
  t=$(now)
  (cd "$HERE/k8s" && "${GO_BUILD[@]}" -ldflags "$ldflags" -o "$tmp/" "${pkgs[@]}")
  mkdir -p "$K8S_BIN_DIR"
  for b in "${k8s_missing[@]}"; do mv -f "$tmp/$b" "$K8S_BIN_DIR/$b"; done
  rmdir "$tmp"
  echo "build.sh: Kubernetes $K8S_VERSION built in $(($(now) - t))s"
  built=1
fi

build_one() { # build_one <name> <module dir> <package> <dest> <version text> [ldflags]
  local name=$1 dir=$2 pkg=$3 dest=$4 want=$5 ldflags=${6:-} t tmp
  runs_as "$dest" "$want" --version && return 0
  echo "build.sh: building $name"
  mkdir -p "$(dirname "$dest")"
  tmp="$(mktemp "$dest.XXXXXX")"
  t=$(now)
  (cd "$dir" && "${GO_BUILD[@]}" -ldflags "-s -w $ldflags" -o "$tmp" "$pkg") || { rm -f "$tmp"; return 1; }
  mv -f "$tmp" "$dest"
  echo "build.sh: $name built in $(($(now) - t))s"
  built=1
}

build_one "etcd $ETCD_VERSION" "$HERE/etcd" go.etcd.io/etcd/server/v3 "$ETCD_BIN" "${ETCD_VERSION#v}"
build_one "kwok $KWOK_VERSION" "$HERE/kwok" sigs.k8s.io/kwok/cmd/kwok "$KWOK_BIN" "$KWOK_VERSION"

if ((built)); then
  echo "build.sh: total build time $(($(now) - T_ALL))s"
else
  echo "build.sh: all binaries present (nothing to build)"
fi
print_env
