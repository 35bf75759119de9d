#!/usr/bin/env bash
# The planner's cost note against the real thing: for a grid of clusters (128 .. 65,536 devices)
# and global batches (512 .. 65,536 microbatches), runs `breakwater plan --cost` (which always
# prints the note), and prints the estimate next to the measured CPU time (user + sys; the
# estimate is for one thread on an idle core, and the development machine is shared, so wall
# time there would measure the other tenants) and peak RSS of the whole command, with their
# ratios. Usage: bench/plan/plan_cost.sh [build dir] [profile]
# (default: build, examples/gpt3-6.7b-a100.json). docs/planning.md "Cost of planning" has a run.
set -euo pipefail
cd "$(dirname "$0")/../.."
build=${1:-build}
profile=${2:-examples/gpt3-6.7b-a100.json}
grid=(  # nodes devices_per_node microbatches
  "16 8 512" "16 8 4096" "16 8 65536"
  "128 8 512" "128 8 4096" "128 8 65536"
  "1024 8 512" "1024 8 4096" "1024 8 65536"
  "4096 16 4096" "4096 16 65536"
)
out=$(mktemp)
err=$(mktemp)
trap 'rm -f "$out" "$err"' EXIT
printf '%8s %6s %7s %9s %9s %7s %10s %10s %7s\n' devices nodes B "est s" "cpu s" ratio \
  "est MB" "rss MB" ratio
for entry in "${grid[@]}"; do
  read -r nodes g b <<< "$entry"
  /usr/bin/time -o "$out" -f '%U %S %M' "$build/breakwater" plan --profile "$profile" \
    --nodes "$nodes" --devices-per-node "$g" --fault-tolerance 2 --microbatches "$b" --cost \
    > /dev/null 2> "$err" || true
  read -r user sys rss_kb < <(tail -n 1 "$out")
  wall=$(awk -v u="$user" -v s="$sys" 'BEGIN {print u + s}')
  note=$(grep '^note: planning' "$err" || true)
  # The search's note (an upper bound, for one search) plus the rest's.
  search_s=$(grep '^note: the template search' "$err" | sed -E 's/.*up to ([0-9.e+-]+) s.*/\1/')
  rest_s=$(sed -E 's/.*about ([0-9.e+-]+) s more.*/\1/' <<< "$note")
  est_s=$(awk -v a="${search_s:-0}" -v b="${rest_s:-0}" 'BEGIN {print a + b}')
  # The "in all" memory: the human_bytes figure, in MB.
  est_mb=$(sed -E 's/.* more and ([0-9.]+) ([KMGT]?i?B) in all.*/\1 \2/' <<< "$note" |
    awk '{u = $2; v = $1; if (u == "KiB") v /= 1024; if (u == "GiB") v *= 1024; if (u == "B") v /= 1048576; printf "%.1f", v}')
  awk -v d=$((nodes * g)) -v n="$nodes" -v b="$b" -v e="$est_s" -v w="$wall" -v em="$est_mb" \
    -v r="$rss_kb" 'BEGIN {
      rm = r / 1024;
      printf "%8d %6d %7d %9.2f %9.2f %7.2f %10.1f %10.1f %7.2f\n", d, n, b, e, w,
        (w > 0 ? e / w : 0), em, rm, (rm > 0 ? em / rm : 0) }'
done
