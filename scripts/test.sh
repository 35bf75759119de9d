#!/usr/bin/env bash
# Runs the whole test suite: set-up and build first (scripts/setup.sh), then CTest.
# Extra arguments go to ctest (e.g. -L unit, -R Hanayo).
#
# CTest runs nproc + 2 tests at a time (the resource spec below): every test holds one of nproc
# slots of `cores`, except the few that mostly wait on a deadline and use less than half a
# core (bw_add_test's WAITS in CMakeLists.txt), which hold one of 2 slots of `waits` instead and so
# run beside the others.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
bash "$root/scripts/setup.sh"
build=${BW_BUILD_DIR:-$root/build}
cd "$build"
cores=$(nproc)
((cores >= 2)) || cores=2  # a TIGHT test holds two (CMakeLists.txt, bw_add_test)
printf '{"version": {"major": 1, "minor": 0}, "local": [{"cores": [{"id": "0", "slots": %d}], %s}]}\n' \
  "$cores" '"waits": [{"id": "0", "slots": 2}]' >ctest-resources.json
ctest --output-on-failure -j"$((cores + 2))" --resource-spec-file ctest-resources.json "$@"
