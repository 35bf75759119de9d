#!/usr/bin/env bash
# Prepares, on a Debian 12 machine with network, what scripts/gpu_check.sh needs on a GPU machine
# that has no network and none of breakwater's build dependencies besides CMake, a C++ compiler,
# the CUDA toolkit and a CUDA PyTorch: the files of Debian's -dev packages (headers, CMake
# packages, the few shared libraries) unpacked into .gpu-deps/ (git-ignored, about 15 MB), which
# travels with the working tree. LibTorch itself (and fmt, which breakwater takes from it) comes
# from that machine's PyTorch. Idempotent; docs/gpu.md.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
dest=$root/.gpu-deps
pkgs=(nlohmann-json3-dev libcli11-dev libtomlplusplus-dev libtomlplusplus3 libgtest-dev
      libgmock-dev libbenchmark-dev libbenchmark1debian libpcre2-dev libpcre2-8-0 libssl-dev
      libssl3)
stamp=$dest/.packages
if [ -d "$dest/sysroot/usr" ] && [ "$(cat "$stamp" 2>/dev/null)" = "${pkgs[*]}" ]; then
  echo "gpu_prepare: $dest is up to date"
  exit 0
fi
rm -rf "$dest"
mkdir -p "$dest/debs" "$dest/sysroot"
(cd "$dest/debs" && apt-get download "${pkgs[@]}" >/dev/null)
for deb in "$dest"/debs/*.deb; do dpkg -x "$deb" "$dest/sysroot"; done
rm -rf "$dest/debs" "$dest/sysroot/usr/share/doc" "$dest/sysroot/usr/share/man" "$dest/sysroot/usr/src"
# Static archives are not linked (the shared libraries are): leave them behind.
find "$dest/sysroot" -name '*.a' ! -name 'libgtest*.a' ! -name 'libgmock*.a' \
  ! -name 'libbenchmark*.a' -delete
printf '%s' "${pkgs[*]}" >"$stamp"
echo "gpu_prepare: $(du -sh "$dest" | cut -f1) in $dest (${#pkgs[@]} packages)"
