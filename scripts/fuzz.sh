#!/usr/bin/env bash
# Runs every fuzz target (fuzz/, docs/fuzzing.md) for SECONDS each and prints one line per target:
# executions, executions per second, coverage (libFuzzer's cov: edges, ft: features), corpus size
# and crashes. Builds build-fuzz/ first (clang, -DBW_FUZZ=ON -DBW_WITH_TORCH=OFF), seeds the
# corpora from the repository (fuzz/seeds.py) and keeps them there, so later runs go on from
# where earlier ones stopped. Fuzzers run under `nice -n 19` with a 2 GiB RSS limit.
#   scripts/fuzz.sh SECONDS [TARGET ...]      (default: every target)
# Crashing inputs land in build-fuzz/fuzz/crashes/TARGET/; reproduce one with
#   build-fuzz/fuzz/TARGET_fuzz FILE
# and keep it as a regression test (tests/fuzz_regressions, docs/fuzzing.md).
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
seconds=${1:?usage: scripts/fuzz.sh SECONDS [TARGET ...]}
shift
build=${BW_FUZZ_BUILD_DIR:-$root/build-fuzz}
python=${BW_PYTHON:-$root/.venv/bin/python}
[ -x "$python" ] || python=python3

if [ ! -f "$build/CMakeCache.txt" ]; then
  cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_CXX_COMPILER=clang++ \
    -DBW_WITH_TORCH=OFF -DBW_FUZZ=ON >/dev/null
fi
nice -n 19 cmake --build "$build" -j"$(nproc)" --target bw_fuzz_all >/dev/null

targets=("$@")
if [ ${#targets[@]} -eq 0 ]; then
  for t in "$build"/fuzz/*_fuzz; do targets+=("$(basename "${t%_fuzz}")"); done
fi

seeds="$build/fuzz/seeds"
rm -rf "$seeds"
"$python" "$root/fuzz/seeds.py" "$seeds"

printf '%-20s %12s %9s %7s %7s %7s %8s\n' target execs exec/s cov ft corpus crashes
for t in "${targets[@]}"; do
  exe="$build/fuzz/${t}_fuzz"
  corpus="$build/fuzz/corpus/$t"
  crashes="$build/fuzz/crashes/$t"
  log="$build/fuzz/logs/$t.log"
  mkdir -p "$corpus" "$crashes" "$(dirname "$log")"
  status=0
  nice -n 19 "$exe" -max_total_time="$seconds" -rss_limit_mb=2048 -timeout=10 -max_len=65536 \
    -print_final_stats=1 -artifact_prefix="$crashes/" "$corpus" "$seeds/$t" >"$log" 2>&1 ||
    status=$?
  execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
  rate=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$log" | tail -1)
  last=$(grep -E '^#[0-9]+' "$log" | tail -1 || true)
  cov=$(sed -n 's/.* cov: \([0-9]*\).*/\1/p' <<<"$last")
  ft=$(sed -n 's/.* ft: \([0-9]*\).*/\1/p' <<<"$last")
  found=$(find "$crashes" -type f | wc -l)
  printf '%-20s %12s %9s %7s %7s %7s %8s\n' "$t" "${execs:-?}" "${rate:-?}" "${cov:-?}" \
    "${ft:-?}" "$(find "$corpus" -type f | wc -l)" "$found"
  if [ "$status" -ne 0 ]; then
    echo "  $t stopped with status $status: see $log and $crashes/" >&2
  fi
done
