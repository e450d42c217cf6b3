#!/usr/bin/env bash
# The README's main command: installs what is missing, builds, packages and installs DDO (the
# Debian packages of tools/package.sh: ddod with ddoctl and the systemd units, enabled; the C++
# client's libraries and -dev files; the Python client for Debian's python3), then, as the
# ordinary user who ran it (SUDO_USER under sudo), starts ddod with the warm_process preset on a
# private socket and runs the demo client with the installed programs and packages: what the
# README's "Using it" does by hand.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${DDO_BUILD_DIR:-$root/build}
cd "$root"

tools/install-deps.sh
tools/build.sh "$@"

echo "== package and install"
packages=$(DDO_BUILD_DIR="$build" tools/package.sh "$build/debs")  # their paths, one a line
mapfile -t debs <<< "$packages"
sudo=""
[[ $(id -u) -ne 0 ]] && sudo="sudo"
DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "${debs[@]}" > /dev/null
for deb in "${debs[@]}"; do
  dpkg-query -W -f='installed ${Package} ${Version}\n' "$(dpkg-deb --field "$deb" Package)"
done

# The demo runs as the ordinary user: the one behind sudo, else whoever runs this. A command
# prefix, not a function: `$!` must be ddod's pid (or sudo's, which passes SIGTERM on).
as_user=()
if [[ $(id -u) -eq 0 && -n "${SUDO_USER:-}" && "${SUDO_USER}" != root ]]; then
  as_user=(sudo -u "$SUDO_USER" --)
fi
run_dir=$("${as_user[@]}" mktemp -d /tmp/ddo-demo-XXXXXX)
socket="$run_dir/ddod.sock"
"${as_user[@]}" ddod --preset warm_process --discard --socket "$socket" \
  --state-dir "$run_dir/state" &
ddod_pid=$!
cleanup() {
  kill -TERM "$ddod_pid" 2>/dev/null && wait "$ddod_pid" || true
  rm -rf "$run_dir"
}
trap cleanup EXIT

for _ in $(seq 100); do
  [[ -S "$socket" ]] && break
  sleep 0.05
done
echo "== ddoctl status (as $("${as_user[@]}" id -un))"
"${as_user[@]}" ddoctl --daemon "unix:$socket" status
echo
echo "== demo client (Debian's python3, the installed package)"
"${as_user[@]}" env DDO_DAEMON="unix:$socket" /usr/bin/python3 -m diffusers_dynamic_offloader.demo
