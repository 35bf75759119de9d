#!/usr/bin/env bash
# Installs what breakwater needs on Debian 12 (apt packages, as root or with sudo; LibTorch 2.11 from
# PyTorch's wheel in a project-local virtual environment, .venv/), then configures and builds it
# (Release, out of tree in build/). Idempotent, and quiet when there is nothing to do.
#   BW_BUILD_DIR   build folder (default: build/ in the source tree)
#   BW_PYTHON      a Python that already has torch (2.4 or newer): no .venv is made, its LibTorch
#                  is used (for the test oracles it needs scripts/requirements-test.txt too)
#   Torch_DIR      <libtorch>/share/cmake/Torch of a libtorch archive: used instead of the wheel's
#   BW_CUDA=1      configure the CUDA-capable variant (-DBW_CUDA=ON; needs the CUDA toolkit)
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=${BW_BUILD_DIR:-$root/build}

pkgs=(build-essential cmake pkg-config python3 python3-venv libgtest-dev libgmock-dev libbenchmark-dev libfmt-dev libpcre2-dev
      nlohmann-json3-dev libcli11-dev libtomlplusplus-dev fortunes librsvg2-bin
      ccache libssl-dev iproute2  # ccache: cached compilations; HMAC of the run token; network namespaces of the multi-host tests
      openssh-server openssh-client  # `launch` over a real sshd (the test starts its own)
      libcurl4-openssl-dev etcd-server etcd-client)  # the control store's etcd backend; its tests run a 3-member etcd
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  sudo=""
  [ "$(id -u)" -eq 0 ] || sudo=sudo
  echo "breakwater setup: installing ${missing[*]}"
  $sudo apt-get update -qq
  # openssh-server's and etcd-server's maintainer scripts start their services through
  # invoke-rc.d; the tests only use their binaries, so no daemon may be left listening: where no
  # policy-rc.d says otherwise (containers usually have one that denies), one denies service
  # starts during the install.
  policy=/usr/sbin/policy-rc.d
  own_policy=0
  if [ ! -e "$policy" ]; then
    printf '#!/bin/sh\nexit 101\n' | $sudo tee "$policy" >/dev/null
    $sudo chmod 755 "$policy"
    own_policy=1
  fi
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq \
    "${missing[@]}" >/dev/null
  if ((own_policy)); then $sudo rm -f "$policy"; fi
  # Under systemd the package also enables the service for the next boot: keep the machine as it
  # was (no sshd before this install, none after). etcd-server likewise: the tests start their own
  # members on free ports, and no etcd may be left listening on 2379.
  if [[ " ${missing[*]} " == *" openssh-server "* ]] && [ -d /run/systemd/system ]; then
    $sudo systemctl disable --now ssh.service >/dev/null 2>&1 || true
  fi
  if [[ " ${missing[*]} " == *" etcd-server "* ]] && [ -d /run/systemd/system ]; then
    $sudo systemctl disable --now etcd.service >/dev/null 2>&1 || true
  fi
fi

# LibTorch: PyTorch's own wheel (torch==2.11.0, the CUDA 13.0 build that PyPI serves for Linux; it
# runs on CPU-only machines too) and the Python packages the tests use as oracles, in .venv/.
# About 3 GB are downloaded once; pip's cache makes a second environment cheap.
venv=$root/.venv
python=${BW_PYTHON:-$venv/bin/python}
stamp=$venv/.breakwater-requirements
want=$(cat "$root/scripts/requirements.txt" "$root/scripts/requirements-test.txt")
if [ -z "${BW_PYTHON:-}" ] && [ -z "${Torch_DIR:-}" ] &&
   { [ ! -x "$python" ] || [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; }; then
  if [ ! -x "$python" ]; then
    echo "breakwater setup: making the virtual environment $venv"
    py=$(command -v python3)
    "$py" -m venv "$venv"
  fi
  echo "breakwater setup: installing LibTorch 2.11 (PyTorch's wheel, about 3 GB the first time) and the test oracles into $venv"
  "$venv/bin/pip" install --disable-pip-version-check --progress-bar on \
    -r "$root/scripts/requirements.txt" -r "$root/scripts/requirements-test.txt" 2>&1 |
    { grep --line-buffered -vE '^(Requirement already satisfied|  Using cached)' || true; }
  [ "${PIPESTATUS[0]}" -eq 0 ] || { echo "breakwater setup: pip failed" >&2; exit 1; }
  printf '%s' "$want" >"$stamp"
fi

cmake_args=(-DCMAKE_BUILD_TYPE=Release)
[ -n "${BW_PYTHON:-}" ] && cmake_args+=("-DBW_PYTHON=$BW_PYTHON")
[ -n "${Torch_DIR:-}" ] && cmake_args+=("-DTorch_DIR=$Torch_DIR")
[ "${BW_CUDA:-0}" = 1 ] && cmake_args+=(-DBW_CUDA=ON)
if [ ! -f "$build/CMakeCache.txt" ]; then
  echo "breakwater setup: configuring $build"
  cmake -S "$root" -B "$build" "${cmake_args[@]}" >/dev/null
fi
# Show what is being compiled, hide the bookkeeping lines make prints when nothing changed.
cmake --build "$build" -j"$(nproc)" 2>&1 |
  { grep --line-buffered -vE 'Built target|Consolidate compiler|Scanning dependencies|^make\[[0-9]\]: (Entering|Leaving)' || true; }
exit "${PIPESTATUS[0]}"
