#!/usr/bin/env bash
# What the fork server saves (docs/cli.md "Children without LibTorch's start-up"): a local run of
# `breakwater train` with its children forked from the server, against the same run with every
# child exec'd (BW_FORK_SERVER=0), alternating, R runs each. Prints the median wall time and the
# median CPU time of each, and their ratios. The CPU time is the whole machine's (user, nice,
# system, irq, softirq from /proc/stat) over the run, since a forked child's time reaches its
# spawner's accounting only through the server; run it on an otherwise idle machine.
# Usage: bench/elastic/spawn.sh [build dir] [runs] [nodes] [steps]   (default: build 5 4 20)
set -euo pipefail
cd "$(dirname "$0")/../.."
build=${1:-build}
runs=${2:-5}
nodes=${3:-4}
steps=${4:-20}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cpu_ticks() { awk '/^cpu /{print $2 + $3 + $4 + $7 + $8}' /proc/stat; }
run() {  # $1: label, $2: value of BW_FORK_SERVER; appends "wall cpu" to $work/$1
  rm -rf "$work/out"
  local t0 c0 t1 c1
  t0=$(date +%s.%N)
  c0=$(cpu_ticks)
  BW_FORK_SERVER=$2 "$build/breakwater" train --quiet --cluster.nodes="$nodes" --model.name=tiny \
    --train.steps="$steps" --train.out_dir="$work/out" > "$work/log" 2>&1 ||
    { cat "$work/log"; exit 1; }
  c1=$(cpu_ticks)
  t1=$(date +%s.%N)
  awk -v t0="$t0" -v t1="$t1" -v c="$((c1 - c0))" -v hz="$(getconf CLK_TCK)" \
    'BEGIN {printf "%.3f %.3f\n", t1 - t0, c / hz}' >> "$work/$1"
}
for ((i = 0; i < runs; i++)); do
  run forked 1
  run execd 0
done
median() {  # column $2 of file $1
  awk -v c="$2" '{print $c}' "$1" | sort -n | awk '{a[NR] = $1} END {print a[int((NR + 1) / 2)]}'
}
printf '%d nodes of 1 device, tiny model, %d steps, %d runs each (median)\n' "$nodes" "$steps" "$runs"
printf '%-8s %8s %8s\n' "children" "wall s" "cpu s"
for label in forked execd; do
  printf '%-8s %8s %8s\n' "$label" "$(median "$work/$label" 1)" "$(median "$work/$label" 2)"
done
awk -v fw="$(median "$work/forked" 1)" -v ew="$(median "$work/execd" 1)" \
    -v fc="$(median "$work/forked" 2)" -v ec="$(median "$work/execd" 2)" \
    'BEGIN {printf "forked / exec'"'"'d: wall %.2fx, cpu %.2fx\n", fw / ew, fc / ec}'
