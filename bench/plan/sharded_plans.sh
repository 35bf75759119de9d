#!/usr/bin/env bash
# Sharded stages in `breakwater plan`: whole-command CPU time for GPT-3 175B on 64 nodes x 8
# A100s with f = 2 and 512 microbatches, and for smaller GPT-3 models the predicted throughput of
# the best plan with sharded stages against the best with one device per stage
# (--max-stage-devices 1), at the same global batch (samples), over microbatch sizes b.
#
#   bench/plan/sharded_plans.sh [BUILD_DIR]      (default: build)
#
# Prints one line per run; "none" where no plan fits (the reason is the command's error).
set -euo pipefail
build=${1:-build}
bw="$build/breakwater"
[ -x "$bw" ] || { echo "no $bw; build the breakwater target first" >&2; exit 2; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

profile() {  # model b -> path
  local path="$tmp/$1-b$2.json"
  [ -f "$path" ] || "$bw" profile synth --model "$1" --device a100 --microbatch-size "$2" \
    -o "$path" >/dev/null
  echo "$path"
}

# run PROFILE NODES MEMORY_GB MICROBATCHES K: prints "cpu_s throughput" (throughput "none").
run() {
  local out rc=0
  out=$(/usr/bin/time -f "cpu %U %S" "$bw" plan --profile "$1" --nodes "$2" --devices-per-node 8 \
    --memory-gb "$3" --fault-tolerance 2 --microbatches "$4" --max-stage-devices "$5" 2>&1) || rc=$?
  local cpu thr
  cpu=$(echo "$out" | awk '/^cpu /{printf "%.2f", $2 + $3}')
  thr=$(echo "$out" | sed -n 's/.*throughput \([0-9.]*\) samples\/s.*/\1/p')
  if [ "$rc" -ne 0 ] && [ "$rc" -ne 2 ]; then echo "$out" >&2; exit "$rc"; fi
  echo "$cpu ${thr:-none}"
}

echo "== GPT-3 175B, 64 nodes x 8, f = 2, 512 microbatches: whole command (user + sys CPU s)"
for mem in 80 141; do
  for b in 1 8; do
    read -r cpu thr < <(run "$(profile gpt3-175b $b)" 64 "$mem" 512 8)
    echo "memory ${mem} GB, b = $b: cpu ${cpu} s, throughput ${thr} samples/s"
  done
done

echo "== sharded (--max-stage-devices 8) vs one device per stage (1); 1024 samples per step"
for spec in "gpt3-6.7b 16 80" "gpt3-6.7b 16 40" "gpt3-13b 16 80" "gpt3-13b 32 40"; do
  read -r model nodes mem <<<"$spec"
  best_s=0 best_u=0
  for b in 1 2 4 8 16; do
    mbs=$((1024 / b))
    read -r _ ts < <(run "$(profile "$model" $b)" "$nodes" "$mem" $mbs 8)
    read -r _ tu < <(run "$(profile "$model" $b)" "$nodes" "$mem" $mbs 1)
    echo "$model on $nodes x 8 x ${mem} GB, b = $b: sharded $ts, unsharded $tu samples/s"
    [ "$ts" != none ] && best_s=$(echo "$ts $best_s" | awk '{print ($1 > $2) ? $1 : $2}')
    [ "$tu" != none ] && best_u=$(echo "$tu $best_u" | awk '{print ($1 > $2) ? $1 : $2}')
  done
  echo "$model on $nodes x 8 x ${mem} GB: best sharded $best_s, best unsharded $best_u samples/s" \
    "$(echo "$best_s $best_u" | awk '{if ($2 > 0) printf "(ratio %.2f)", $1 / $2}')"
done
