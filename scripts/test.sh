#!/usr/bin/env bash
# Runs the whole test suite: set-up and build first (scripts/setup.sh), then CTest.
# Extra arguments go to ctest (e.g. -L unit, -R Hanayo).
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
bash "$root/scripts/setup.sh"
build=${BW_BUILD_DIR:-$root/build}
cd "$build"
ctest --output-on-failure -j"$(nproc)" "$@"
