#!/usr/bin/env bash
# Runs two `breakwater` binaries over a grid of `schedule` cases and reports every case whose
# output differs: stdout (tables and --json), stderr, exit status, and the --csv, --trace, --svg
# files it writes. Use it to check that a speed change leaves every result byte-identical.
# Usage: bench/cli/compare_outputs.sh OLD_BINARY NEW_BINARY   (exit status 1 on any difference)
set -uo pipefail
cd "$(dirname "$0")/../.."
old=$(realpath "$1")
new=$(realpath "$2")
work=$(mktemp -d)
trap '[[ -n "${KEEP:-}" ]] && echo "outputs kept in $work" || rm -rf "$work"' EXIT

cases=()
for kind in gpipe 1f1b interleaved chimera hanayo zb-h1 zb-v; do
  for p in 1 2 3 4 8 16; do
    for b in 1 2 4 6 8 16 32 64; do
      cases+=("--kind $kind -P $p -B $b")
    done
  done
done
for p in 2 4 8; do
  for b in 4 8 16 32; do
    for w in 2 3 4; do cases+=("--kind hanayo -P $p -B $b -W $w"); done
    for v in 1 3 4; do cases+=("--kind interleaved -P $p -B $b -v $v"); done
    cases+=("--kind interleaved -P $p -B $b --group-size 2")
  done
done
costs="--forward-ms 1.5 --backward-ms 2.5 --activation-bytes 3e6 --output-bytes 2e6 \
--latency-ms 0.05 --bandwidth-gbps 100"
for kind in gpipe 1f1b interleaved chimera hanayo zb-h1 zb-v; do
  for sem in async rendezvous synchronous; do
    for look in 0 1 3; do
      cases+=("--kind $kind -P 4 -B 8 --semantics $sem --recv-lookahead $look")
    done
  done
  cases+=("--kind $kind -P 4 -B 8 $costs")
  cases+=("--kind $kind -P 8 -B 32 $costs --backward-input-ms 1 --backward-weight-ms 1.5")
  cases+=("--kind $kind -P 4 -B 8 --fsdp")
  cases+=("--kind $kind -P 4 -B 16 --fsdp --unshard-ms 0.3 --reduce-grad-ms 0.7 $costs")
  cases+=("--kind $kind -P 4 -B 8 --overlap-f-b 0.5")
  cases+=("--kind $kind -P 8 -B 16 --profile $PWD/examples/gpt3-medium-a100.json")
  cases+=("--kind $kind -P 4 -B 8 --compute-only")
done
cases+=("--kind hanayo -P 64 -B 512 -W 4")
cases+=("--kind hanayo -P 32 -B 256 -W 2 $costs")
cases+=("--kind zb-v -P 32 -B 128 --fsdp")
cases+=("--kind interleaved -P 16 -B 128 -v 4 --semantics rendezvous")
for p in 2 4 8; do
  for b in 8 16 32; do cases+=("--compare -P $p -B $b" "--compare -P $p -B $b $costs"); done
done
cases+=("--compare -P 4 -B 8 --fsdp" "--compare -P 4 -B 16 --semantics rendezvous")
for f in "$PWD"/tests/golden/pytorch/*.csv; do
  cases+=("--from-csv $f" "--from-csv $f --fsdp" "--from-csv $f $costs")
  cases+=("--from-csv $f --semantics rendezvous" "--from-csv $f --compute-only")
done
# Bad input: the messages and exit statuses must not change either.
cases+=("--kind 1f1b -P 8 -B 4" "--kind hanayo -P 0 -B 4" "--kind nope" "--kind zb-v -P 3 -B 2")

differ=0
n=0
run_case() {  # run_case BINARY DIR ARGS...: every output of one case into DIR
  local bin=$1 dir=$2
  shift 2
  mkdir -p "$dir"
  (cd "$dir" && "$bin" schedule "$@" --csv out.csv > table.txt 2> table.err; echo $? > table.rc)
  (cd "$dir" && "$bin" schedule "$@" --json > json.txt 2> json.err; echo $? > json.rc)
}
for c in "${cases[@]}"; do
  n=$((n + 1))
  # shellcheck disable=SC2086
  run_case "$old" "$work/old/$n" $c
  # shellcheck disable=SC2086
  run_case "$new" "$work/new/$n" $c
  if ! diff -r "$work/old/$n" "$work/new/$n" > /dev/null; then
    differ=$((differ + 1))
    echo "DIFFERS: schedule $c"
    diff -r "$work/old/$n" "$work/new/$n" | head -5
  fi
done
# Timelines for the small cases: Chrome trace, SVG and ASCII.
for kind in gpipe 1f1b interleaved chimera hanayo zb-h1 zb-v; do
  for extra in "" "--fsdp --unshard-ms 0.3" "$costs"; do
    n=$((n + 1))
    for side in old new; do
      bin=$old
      [[ $side == new ]] && bin=$new
      mkdir -p "$work/$side/$n"
      # shellcheck disable=SC2086
      (cd "$work/$side/$n" && "$bin" schedule --kind $kind -P 4 -B 8 $extra --trace t.json \
        --svg t.svg --ascii > out.txt 2>&1; echo $? > rc)
    done
    if ! diff -r "$work/old/$n" "$work/new/$n" > /dev/null; then
      differ=$((differ + 1))
      echo "DIFFERS: schedule --kind $kind -P 4 -B 8 $extra --trace --svg --ascii"
    fi
  done
done
echo "$n cases, $differ differ"
[[ $differ -eq 0 ]]
