#!/usr/bin/env bash
# Whole-process CPU time (user + sys) of the pure commands, median of N runs, against the targets
# of docs/cli.md. Usage: bench/cli/startup.sh [build dir] [runs]   (default: build, 9)
# With a LibTorch build it also times the same commands through `breakwater-torch`, which links
# LibTorch as the single executable did before the split.
set -euo pipefail
cd "$(dirname "$0")/../.."
build=${1:-build}
runs=${2:-9}
commands=(
  "--help|20"
  "schedule --kind hanayo --devices 64 --microbatches 512 --waves 4|100"
  "plan --profile examples/gpt3-6.7b-a100.json --nodes 16 --devices-per-node 8 --fault-tolerance 2 --microbatches 128|100"
  "plan --profile examples/gpt3-6.7b-a100.json --nodes 64 --devices-per-node 8 --fault-tolerance 2 --microbatches 512|100"
)
tmp=$(mktemp)
trap 'rm -f "$tmp"' EXIT
median_ms() {  # median CPU ms of `$@` over $runs runs
  local times=()
  for ((i = 0; i < runs; i++)); do
    /usr/bin/time -o "$tmp" -f '%U %S' "$@" > /dev/null 2>&1
    times+=("$(awk '{printf "%.0f", ($1 + $2) * 1000}' "$tmp")")
  done
  printf '%s\n' "${times[@]}" | sort -n | awk '{a[NR] = $1} END {print a[int((NR + 1) / 2)]}'
}
printf '%-110s %9s %8s %s\n' "command" "cpu ms" "target" "breakwater-torch ms"
for entry in "${commands[@]}"; do
  cmd=${entry%|*}
  target=${entry##*|}
  # shellcheck disable=SC2086
  ms=$(median_ms "$build/breakwater" $cmd)
  torch="-"
  if [[ -x "$build/breakwater-torch" ]]; then
    # shellcheck disable=SC2086
    torch=$(OMP_WAIT_POLICY=PASSIVE median_ms "$build/breakwater-torch" $cmd)
  fi
  verdict=$([[ $ms -lt $target ]] && echo ok || echo OVER)
  printf '%-110s %9s %6s %s %s\n' "breakwater $cmd" "$ms" "<$target" "$verdict" "$torch"
done
