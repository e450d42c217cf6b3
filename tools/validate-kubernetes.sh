#!/usr/bin/env bash
# Validates every manifest in deploy/kubernetes against the Kubernetes OpenAPI schemas, offline:
# no cluster, no kubectl. Also checks that the manifests agree with each other and with
# deploy/kubernetes/Dockerfile (ddod's uid, the socket's host path, the RAM budget against the
# memory limit), and refuses made-up broken manifests first-hand so that it cannot pass by
# accepting everything (tools/kubernetes/validate.js says what is checked).
#
#   tools/validate-kubernetes.sh [DIR]
#
# The validator's npm packages (tools/kubernetes/package-lock.json, pinned: kubernetes-models,
# yaml and their dependencies; no install scripts run) are installed with `npm ci` into DIR,
# default ${DDO_BUILD_DIR:-build}/kubernetes-validate, never into the source tree; an install
# whose lock file matches is reused. Needs node (18 or later) and npm; the install needs the npm
# registry, the validation nothing. Exits 0 when everything is valid, 1 when something is not,
# 2 when it cannot run.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${DDO_BUILD_DIR:-$root/build}
dir=${1:-$build/kubernetes-validate}
for tool in node npm; do
  if ! command -v "$tool" > /dev/null; then
    echo "validate-kubernetes: $tool is missing (Debian: apt install nodejs npm)" >&2
    exit 2
  fi
done
if ! node -e 'process.exit(Number(process.versions.node.split(".")[0]) >= 18 ? 0 : 1)'; then
  echo "validate-kubernetes: node $(node --version) is too old; 18 or later needed" >&2
  exit 2
fi

lock="$root/tools/kubernetes/package-lock.json"
mkdir -p "$dir"
dir=$(cd "$dir" && pwd)
if [[ -f "$dir/node_modules/.package-lock.json" ]] && cmp -s "$lock" "$dir/package-lock.json"; then
  echo "validate-kubernetes: packages already installed in $dir"
else
  cp "$root/tools/kubernetes/package.json" "$lock" "$dir/"
  start=$(date +%s%N)
  if ! npm ci --prefix "$dir" --ignore-scripts --no-audit --no-fund --omit=dev \
      --loglevel=error > "$dir/npm-ci.log" 2>&1; then
    cat "$dir/npm-ci.log" >&2
    rm -f "$dir/package-lock.json"   # not installed: the next run tries again
    echo "validate-kubernetes: npm ci failed in $dir (the log is above)" >&2
    exit 2
  fi
  elapsed_ms=$(( ($(date +%s%N) - start) / 1000000 ))
  printf 'validate-kubernetes: installed the validator into %s in %d.%03d s\n' "$dir" \
    $(( elapsed_ms / 1000 )) $(( elapsed_ms % 1000 ))
fi

shopt -s nullglob
manifests=("$root"/deploy/kubernetes/*.yaml "$root"/deploy/kubernetes/*.yml)
if (( ${#manifests[@]} == 0 )); then
  echo "validate-kubernetes: no manifest in $root/deploy/kubernetes" >&2
  exit 2
fi
cd "$root"
exec node tools/kubernetes/validate.js "$dir" \
  --dockerfile deploy/kubernetes/Dockerfile --require-ddo "${manifests[@]#"$root"/}"
