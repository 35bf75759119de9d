#!/usr/bin/env bash
# Installs what breakwater needs on Debian 12 (apt packages, as root or with sudo), then configures
# and builds it (Release, out of tree in build/). Idempotent, and quiet when there is nothing to do.
#   BW_BUILD_DIR   build folder (default: build/ in the source tree)
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=${BW_BUILD_DIR:-$root/build}

pkgs=(build-essential cmake pkg-config libgtest-dev libgmock-dev libbenchmark-dev libfmt-dev
      nlohmann-json3-dev libcli11-dev libtomlplusplus-dev libtorch-dev libgloo-dev libopenblas0-openmp fortunes librsvg2-bin
      libssl-dev iproute2  # HMAC of the run token; network namespaces of the multi-host tests
      openssh-server openssh-client)  # `launch` over a real sshd (the test starts its own)
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  sudo=""
  [ "$(id -u)" -eq 0 ] || sudo=sudo
  echo "breakwater setup: installing ${missing[*]}"
  $sudo apt-get update -qq
  # openssh-server's maintainer scripts start the ssh service through invoke-rc.d; the tests only
  # use its sshd binary, so no daemon may be left listening: where no policy-rc.d says otherwise
  # (containers usually have one that denies), one denies service starts during the install.
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
  # was (no sshd before this install, none after).
  if [[ " ${missing[*]} " == *" openssh-server "* ]] && [ -d /run/systemd/system ]; then
    $sudo systemctl disable --now ssh.service >/dev/null 2>&1 || true
  fi
fi

if [ ! -f "$build/CMakeCache.txt" ]; then
  echo "breakwater setup: configuring $build"
  cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=Release >/dev/null
fi
# Show what is being compiled, hide the bookkeeping lines make prints when nothing changed.
cmake --build "$build" -j"$(nproc)" 2>&1 |
  { grep -vE 'Built target|Consolidate compiler|Scanning dependencies|^make\[[0-9]\]: (Entering|Leaving)' || true; }
