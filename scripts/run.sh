#!/usr/bin/env bash
# The main job on its default: set-up and build (scripts/setup.sh), then run breakwater.
# Extra arguments are passed to the main command.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
bash "$root/scripts/setup.sh"
build=${BW_BUILD_DIR:-$root/build}
cd "$root"
exec "$build/breakwater" --help "$@"
