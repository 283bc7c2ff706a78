#!/usr/bin/env bash
# Make the AMDGPU device-library directory a plain clang needs to compile HIP for gfx942 on Debian:
# a copy of every bitcode file of Debian's rocm-device-libs plus oclc_isa_version_942.bc, which
# Debian 12's 5.2 libraries lack, compiled by clang from upstream's one-line OpenCL source.
# clang reads only the last --rocm-device-lib-path, hence one merged directory.
# Usage: scripts/make-device-libs.sh DIR [CLANG]   (CLANG defaults to clang-19)
# Idempotent and reproducible: the same packages give byte-identical files (a relative source name
# and -mcode-object-version=none keep paths and the code object version out of the bitcode).
set -euo pipefail
dest=${1:?usage: make-device-libs.sh DIR [CLANG]}
clang=${2:-clang-19}
src=""
for pkg in rocm-device-libs rocm-device-libs-17; do
  f=$(dpkg-query -L "$pkg" 2>/dev/null | grep '/oclc_isa_version_90a\.bc$' | head -n1 || true)
  if [ -n "$f" ]; then src=$(dirname "$f"); break; fi
done
if [ -z "$src" ]; then
  f=$(find /usr/lib -name oclc_isa_version_90a.bc 2>/dev/null | head -n1 || true)
  [ -n "$f" ] && src=$(dirname "$f")
fi
if [ -z "$src" ]; then
  echo "make-device-libs: no AMDGPU device libraries found; install rocm-device-libs" >&2
  exit 3
fi
if [ -f "$dest/oclc_isa_version_942.bc" ] && [ -f "$dest/ocml.bc" ]; then
  exit 0
fi
tmp=$(mktemp -d "${dest%/}.tmp.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
cp -p "$src"/*.bc "$tmp"/
if [ ! -f "$tmp/oclc_isa_version_942.bc" ]; then
  work=$(mktemp -d)
  printf 'const __constant int __oclc_ISA_version = 9402;\n' > "$work/isa_version_942.cl"
  (cd "$work" && "$clang" -x cl -Xclang -cl-std=CL2.0 -target amdgcn-amd-amdhsa \
     -fvisibility=protected -nogpulib -cl-no-stdinc -Xclang -mcode-object-version=none \
     -emit-llvm -c isa_version_942.cl -o "$tmp/oclc_isa_version_942.bc")
  rm -rf "$work"
fi
chmod 755 "$tmp"
chmod 644 "$tmp"/*.bc
touch -d @0 "$tmp"/*.bc
rm -rf "$dest"
mv "$tmp" "$dest"
trap - EXIT
echo "make-device-libs: $dest ($(ls "$dest" | wc -l) files, from $src)" >&2
