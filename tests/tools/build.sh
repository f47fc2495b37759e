#!/usr/bin/env bash
# Builds the chart and workflow checkers (helm, actionlint) from the Go wrapper
# modules next to this script, and libfaketime (a replica on a skewed clock in
# tests/chaos/clock_skew.rs) from the C source vendored in the pinned PyPI
# wheel `libfaketime` (its prebuilt library is not used), once, into a cache
# outside the checkout:
#
#   ${EA_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/eviction-autoscaler}/bin/
#     helm-v<helm>/helm
#     actionlint-v<actionlint>/actionlint
#     libfaketime-<version>/libfaketime.so.1
#
# Binaries that exist are not rebuilt. Versions come from the wrapper go.mod
# files and, for libfaketime, the pin below (wheel version and sha256).
#
# Usage: build.sh [helm|actionlint|faketime ...]   build what is missing (default: all)
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
# The PyPI wheel libfaketime 3.0.1 vendors libfaketime 0.9.10's source.
FAKETIME_WHEEL=libfaketime==3.0.1
FAKETIME_WHEEL_SHA256=5eed7c17f3d4ba0f6f828de4975f69a622b06b1e792674e6c1b069c0689fab79
FAKETIME_VERSION=0.9.10
FAKETIME_LIB="$CACHE_DIR/bin/libfaketime-$FAKETIME_VERSION/libfaketime.so.1"

print_env() {
  printf 'HELM_VERSION=%q\nACTIONLINT_VERSION=%q\n' "$HELM_VERSION" "$ACTIONLINT_VERSION"
  printf 'HELM_BIN=%q\nACTIONLINT_BIN=%q\n' "$HELM_BIN" "$ACTIONLINT_BIN"
  printf 'FAKETIME_LIB=%q\n' "$FAKETIME_LIB"
}
if [[ "${1:-}" == "--print-env" ]]; then print_env; exit 0; fi

# libfaketime from the wheel's vendored C source, checked against the pin;
# the wheel's own prebuilt library is deleted before the build.
build_faketime() {
  [[ -f "$FAKETIME_LIB" ]] && return 0
  echo "build.sh: building libfaketime $FAKETIME_VERSION"
  command -v cc >/dev/null || { echo "build.sh: cc is not on PATH (libfaketime)" >&2; return 1; }
  local t work whl dest tmp
  t=$(now)
  work="$(mktemp -d)"
  python3 -m pip download --quiet --no-deps --only-binary=:all: -d "$work" "$FAKETIME_WHEEL" \
    || { rm -rf "$work"; echo "build.sh: cannot download $FAKETIME_WHEEL from PyPI" >&2; return 1; }
  whl="$(ls "$work"/libfaketime-*.whl)"
  echo "$FAKETIME_WHEEL_SHA256  $whl" | sha256sum -c --quiet - \
    || { rm -rf "$work"; echo "build.sh: $whl does not match the pinned sha256" >&2; return 1; }
  python3 -m zipfile -e "$whl" "$work/x"
  local src="$work/x/libfaketime/vendor/libfaketime/src"
  grep -q "version $FAKETIME_VERSION" "$src/libfaketime.c" \
    || { rm -rf "$work"; echo "build.sh: the wheel does not vendor libfaketime $FAKETIME_VERSION" >&2; return 1; }
  rm -f "$src"/*.so*
  make -s -C "$src" libfaketime.so.1 >/dev/null || { rm -rf "$work"; return 1; }
  dest="$FAKETIME_LIB"; mkdir -p "$(dirname "$dest")"
  tmp="$(mktemp "$dest.XXXXXX")"
  cp "$src/libfaketime.so.1" "$tmp" && chmod 644 "$tmp" && mv -f "$tmp" "$dest"
  rm -rf "$work"
  echo "build.sh: libfaketime built in $(($(now) - t))s"
}

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

want=("$@"); ((${#want[@]})) || want=(helm actionlint faketime)
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
    faketime) build_faketime ;;
    *) echo "build.sh: unknown tool $w (helm, actionlint, faketime)" >&2; exit 2 ;;
  esac
done
print_env
