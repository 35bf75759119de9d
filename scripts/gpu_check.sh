#!/usr/bin/env bash
# The GPU check (docs/gpu.md): on a machine with NVIDIA GPUs, a CUDA PyTorch 2.11 in its python3
# and no network, builds breakwater's CUDA variant against that PyTorch (build-gpu/), runs the
# `gpu` tests and the GPU benchmarks, and writes one report, gpu_report.md, into $OUT (or the
# folder given as the first argument; default gpu-report/). Each step has its own deadline and
# the whole check ends within 8 minutes. What the build needs besides CMake, a compiler, the CUDA
# toolkit and PyTorch travels in .gpu-deps/: run scripts/gpu_prepare.sh first, on a machine with
# network. Exit status: 0 when every GPU test ran and passed; 1 when a test or the build failed,
# or a test skipped although nvidia-smi lists the GPUs it needs; 2 when the machine cannot run the
# check (no .gpu-deps/, no CUDA PyTorch); 3 when nothing failed but some test could not run on
# this machine (too few GPUs: the NCCL test needs two), which is not a pass
# (scripts/gpu_verdict.py decides from the tests' XML and nvidia-smi).
#   BW_PYTHON   the Python with CUDA PyTorch (default: python3)
#   BW_GPU_QUICK=1  the build and the tests only, no benchmarks
#   BW_GPU_NONE_OK=1  go on where no GPU is visible (the script's own check on a machine without
#                     one: the tests then skip, each with one line, and the check ends with 3)
set -uo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
out=${1:-${OUT:-$root/gpu-report}}
mkdir -p "$out"
report=$out/gpu_report.md
python=${BW_PYTHON:-python3}
deps=$root/.gpu-deps/sysroot/usr
build=$root/build-gpu
start=$SECONDS
jobs=$(nproc)
status=0

say() { echo "$@" | tee -a "$report"; }
section() { say ""; say "## $1"; say ""; }
# run LIMIT_S TITLE CMD...: the command's output (tail) into the report, in a code block.
run() {
  local limit=$1 title=$2
  shift 2
  section "$title"
  local t0=$SECONDS
  timeout --kill-after=10 "$limit" "$@" >"$out/step.log" 2>&1
  local rc=$?
  say '```'
  tail -n 60 "$out/step.log" | tee -a "$report" >/dev/null
  say '```'
  say "exit $rc after $((SECONDS - t0)) s (limit $limit s)"
  cat "$out/step.log" >>"$out/full.log"
  return $rc
}

: >"$report"
: >"$out/full.log"
say "# breakwater GPU check"
say ""
say "$(date -u '+%Y-%m-%d %H:%M UTC'), $(git -C "$root" rev-parse --short HEAD 2>/dev/null || echo 'no git')"
if [ ! -d "$deps" ]; then
  say "error: $root/.gpu-deps/ is missing; run scripts/gpu_prepare.sh on a machine with network first"
  exit 2
fi
if [ "${BW_GPU_NONE_OK:-0}" != 1 ] &&
   ! "$python" -c 'import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)' 2>/dev/null; then
  say "error: $python has no CUDA PyTorch that sees a GPU (set BW_PYTHON)"
  exit 2
fi
run 30 "Machine" bash -c "nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.max.sm --format=csv;
  $python -c 'import torch; print(\"torch\", torch.__version__, \"cuda\", torch.version.cuda, torch.cuda.get_device_name(0))';
  nproc; nvcc --version | tail -1; cmake --version | head -1"

# pkg-config, where the machine has one, would find that machine's own packages: the build takes
# PCRE2 from .gpu-deps/ directly (src/tokenizer/CMakeLists.txt).
mkdir -p "$build/no-pkg-config"
export PKG_CONFIG_LIBDIR="$build/no-pkg-config"
torch_lib=$("$python" -c 'import torch, os; print(os.path.join(os.path.dirname(torch.__file__), "lib"))')
export LD_LIBRARY_PATH="$deps/lib/x86_64-linux-gnu:$torch_lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
generator=()
command -v ninja >/dev/null 2>&1 && generator=(-G Ninja)
if [ ! -f "$build/CMakeCache.txt" ]; then
  run 120 "Configure" cmake -S "$root" -B "$build" "${generator[@]}" -DCMAKE_BUILD_TYPE=Release \
    -DBW_CUDA=ON -DBW_PYTHON="$(command -v "$python")" -DCMAKE_PREFIX_PATH="$deps" \
    -DOPENSSL_ROOT_DIR="$deps" -DCMAKE_CXX_FLAGS="-isystem $deps/include/x86_64-linux-gnu" ||
    { say "the configure failed: full.log"; exit 1; }
fi
run 330 "Build" cmake --build "$build" -j"$jobs" --target breakwater breakwater-torch bw_gpu_test \
  bw_runtime_test bw_sharded_step_bench || { say "the build failed: full.log"; exit 1; }

rm -f "$out/gpu_tests.xml"
run 240 "GPU tests (bw_gpu_test)" "$build/tests/gpu/bw_gpu_test" \
  --gtest_output=xml:"$out/gpu_tests.xml" || status=1
# Which tests ran: a skip is a failure where nvidia-smi lists the GPUs the test needs, and a test
# that cannot run here (the NCCL one on one GPU) leaves the check incomplete, not passed.
run 40 "What ran (scripts/gpu_verdict.py)" "$python" "$root/scripts/gpu_verdict.py" \
  "$out/gpu_tests.xml"
case $? in
  0) ;;
  3) [ $status -eq 0 ] && status=3 ;;
  *) status=1 ;;
esac
# The CPU-only tests of the seams, with this build (they also pass without a GPU).
run 60 "Device placement tests" "$build/tests/runtime/bw_runtime_test" \
  --gtest_filter='Devices.*:CollectiveSpin.*' || status=1

if [ "${BW_GPU_QUICK:-0}" != 1 ]; then
  left=$((480 - (SECONDS - start)))
  if [ "$left" -gt 60 ]; then
    run $((left > 150 ? 150 : left - 20)) "gpt2-124m, bf16, seq 1024, one GPU: step against PyTorch eager and torch.compile" \
      "$python" "$root/bench/runtime/step_vs_eager.py" --build "$build" --device cuda \
      --models gpt2-124m --precisions bf16 --steps 8
  fi
  left=$((480 - (SECONDS - start)))
  if [ "$left" -gt 40 ]; then
    run $((left > 90 ? 90 : left - 10)) "Sharded-stage step (bw_sharded_step_bench, unchanged)" \
      "$build/bench/runtime/bw_sharded_step_bench"
  fi
fi
section "Total"
case $status in
  0) verdict="passed: every GPU test ran and passed" ;;
  3) verdict="INCOMPLETE, not passed: some GPU tests could not run on this machine (What ran)" ;;
  *) verdict="FAILED" ;;
esac
say "$((SECONDS - start)) s; tests $verdict"
exit $status
