#!/usr/bin/env bash
# Process start-up of a program that links LibTorch and runs one tensor op, side by side in one
# run: the wheel's LibTorch 2.11 linked as breakwater's CPU build links it (libtorch_cpu, libc10),
# the same linked as libtorch.so (which pulls libtorch_cuda and cuDNN, cuBLAS, NCCL, ... in: what
# the CUDA variant loads), and Debian's LibTorch 1.13 when it is installed (libtorch-dev). Prints
# the median wall milliseconds of N runs and the ratios to the CPU build.
# Usage: bench/runtime/torch_startup.sh [python with torch] [runs]   (default: .venv/bin/python, 21)
set -euo pipefail
cd "$(dirname "$0")/../.."
python=${1:-.venv/bin/python}
runs=${2:-21}
root=$("$python" -c 'import os, torch; print(os.path.dirname(torch.__file__))')
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cat >"$tmp/one_op.cc" <<'CC'
#include <torch/torch.h>
int main() { return torch::ones({4, 4}).matmul(torch::ones({4, 4})).sum().item<float>() == 64 ? 0 : 1; }
CC
inc=(-isystem "$root/include" -isystem "$root/include/torch/csrc/api/include")
g++ -std=c++17 -O1 "${inc[@]}" "$tmp/one_op.cc" -o "$tmp/cpu" -L"$root/lib" -Wl,-rpath,"$root/lib" \
  -ltorch_cpu -lc10
g++ -std=c++17 -O1 "${inc[@]}" "$tmp/one_op.cc" -o "$tmp/cuda" -L"$root/lib" -Wl,-rpath,"$root/lib" \
  -Wl,--no-as-needed -ltorch -ltorch_cpu -lc10
variants=(cpu cuda)
if [ -e /usr/include/torch/csrc/api/include/torch/torch.h ]; then
  g++ -std=c++17 -O1 -isystem /usr/include/torch/csrc/api/include "$tmp/one_op.cc" -o "$tmp/debian" \
    -ltorch -ltorch_cpu -lc10
  variants+=(debian)
fi
median_ms() {
  local times=()
  for ((i = 0; i < runs; i++)); do
    local t0=$(date +%s%N)
    "$1"
    times+=($(( ($(date +%s%N) - t0) / 1000 )))
  done
  printf '%s\n' "${times[@]}" | sort -n | awk '{a[NR] = $1} END {printf "%.1f", a[int((NR + 1) / 2)] / 1000}'
}
declare -A label=([cpu]="2.11 wheel, libtorch_cpu + libc10 (breakwater CPU build)"
                  [cuda]="2.11 wheel, libtorch.so with libtorch_cuda (CUDA variant)"
                  [debian]="Debian 1.13, libtorch + libtorch_cpu + libc10")
declare -A ms
for v in "${variants[@]}"; do "$tmp/$v"; ms[$v]=$(median_ms "$tmp/$v"); done
printf '%-62s %10s %8s\n' "start-up of one tensor op" "median ms" "x cpu"
for v in "${variants[@]}"; do
  printf '%-62s %10s %8.2f\n' "${label[$v]}" "${ms[$v]}" "$(echo "${ms[$v]} / ${ms[cpu]}" | bc -l)"
done
