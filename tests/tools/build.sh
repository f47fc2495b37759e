#!/usr/bin/env bash
# Builds the chart and workflow checkers (helm, actionlint) from the Go wrapper
# modules next to this script, once, into a cache outside the checkout:
#
#   ${EA_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/eviction-autoscaler}/bin/
#     helm-v<helm>/helm
#     actionlint-v<actionlint>/actionlint
#
# Binaries that exist are not rebuilt. Versions come from the wrapper go.mod files.
#
# Usage: build.sh [helm|actionlint ...]   build what is missing (default: both)
#        build.sh --print-env             print the paths as shell assignments (no build)
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
CACHE_DIR="${EA_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/eviction-autoscaler}"

modver() { # modver <go.mod> <module path>
  awk -v m="$2" '($1 == m || ($1 == "require" && $2 == m)) { v = ($1 == "require") ? $3 : $2; if (v ~ /^v[0-9]/) { print v; exit } }' "$1"
}

HELM_VERSION="$(modver "$HERE/helm/go.mod" helm.sh/helm/v3)"
ACTIONLINT_VERSION="$(modver "$HERE/actionlint/go.mod" github.com/rhysd/actionlint)"
for v in HELM_VERSION ACTIONLINT_VERSION; do
  [[ -n "${!v}" ]] || { echo "build.sh: cannot read $v from the wrapper go.mod files" >&2; exit 1; }
done
# helm's default Capabilities.KubeVersion and deprecation checks follow its
# client-go (v0.X.Y -> 1.X), as helm's own Makefile stamps them.
K8S_MINOR="$(modver "$HERE/helm/go.mod" k8s.io/client-go)"; K8S_MINOR="${K8S_MINOR#v0.}"; K8S_MINOR="${K8S_MINOR%%.*}"
HELM_BIN="$CACHE_DIR/bin/helm-$HELM_VERSION/helm"
ACTIONLINT_BIN="$CACHE_DIR/bin/actionlint-$ACTIONLINT_VERSION/actionlint"

print_env() {
  printf 'HELM_VERSION=%q\nACTIONLINT_VERSION=%q\n' "$HELM_VERSION" "$ACTIONLINT_VERSION"
  printf 'HELM_BIN=%q\nACTIONLINT_BIN=%q\n' "$HELM_BIN" "$ACTIONLINT_BIN"
}
if [[ "${1:-}" == "--print-env" ]]; then print_env; exit 0; fi

command -v go >/dev/null || { echo "build.sh: go is not on PATH" >&2; exit 1; }
export CGO_ENABLED=0 GOTOOLCHAIN=local GOFLAGS=-buildvcs=false
# One package at a time by default: several agents and CI share 2 cores.
GO_BUILD=(go build -p "${EA_BUILD_JOBS:-1}" -trimpath)

now() { date +%s; }

# Builds into a temporary name beside the target and renames, so an interrupted
# build never leaves a half-written binary that would count as cached.
build_one() { # build_one <name> <module dir> <package> <dest> [ldflags]
  local name=$1 dir=$2 pkg=$3 dest=$4 ldflags=${5:-} t tmp
  [[ -x "$dest" ]] && return 0
  echo "build.sh: building $name"
  mkdir -p "$(dirname "$dest")"
  tmp="$(mktemp "$dest.XXXXXX")"
  t=$(now)
  (cd "$dir" && "${GO_BUILD[@]}" -ldflags "-s -w $ldflags" -o "$tmp" "$pkg") || { rm -f "$tmp"; return 1; }
  mv -f "$tmp" "$dest"
  echo "build.sh: $name built in $(($(now) - t))s"
}

want=("$@"); ((${#want[@]})) || want=(helm actionlint)
for w in "${want[@]}"; do
  case "$w" in
    # helm stamps its version from these (internal/version), as its Makefile does.
    helm)
      ld="-X helm.sh/helm/v3/internal/version.version=$HELM_VERSION -X helm.sh/helm/v3/internal/version.gitTreeState=clean"
      for p in pkg/lint/rules pkg/chartutil; do
        ld+=" -X helm.sh/helm/v3/$p.k8sVersionMajor=1 -X helm.sh/helm/v3/$p.k8sVersionMinor=$K8S_MINOR"
      done
      build_one "helm $HELM_VERSION" "$HERE/helm" helm.sh/helm/v3/cmd/helm "$HELM_BIN" "$ld" ;;
    actionlint) build_one "actionlint $ACTIONLINT_VERSION" "$HERE/actionlint" github.com/rhysd/actionlint/cmd/actionlint "$ACTIONLINT_BIN" \
            "-X github.com/rhysd/actionlint.version=$ACTIONLINT_VERSION" ;;
    *) echo "build.sh: unknown tool $w (helm, actionlint)" >&2; exit 2 ;;
  esac
done
print_env
