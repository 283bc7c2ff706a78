#!/usr/bin/env bash
# A clang that emits gfx950 (MI355X / MI350X) code, for the gfx950 arch-check test
# (tests/toolchain/test_gfx950.py, docs/flagship.md "MI355X"). LLVM learned gfx950 in 20; Debian 12's
# clang-19 rejects it ("invalid target ID 'gfx950'"), Debian 13 (trixie) main has clang-22.
# Usage: scripts/gfx950-clang.sh [DIR]      (DIR defaults to /usr/local/lib/rocmforge; needs root)
#  - where apt has clang-22 (Debian 13): installs clang-22 and lld-22 and links DIR/clang-gfx950 to it;
#  - elsewhere (Debian 12): downloads trixie's clang-22, lld-22 and the libraries they run on (their
#    own glibc 2.41, libstdc++ and every library of libllvm22) from deb.debian.org, checks InRelease
#    with gpgv against the host's Debian archive keyring, Packages.xz by the sha256 InRelease names
#    and each .deb by the sha256 Packages names, unpacks them with dpkg-deb -x (nothing is installed)
#    into DIR/trixie-llvm and writes DIR/clang-gfx950 and DIR/ld.lld-gfx950, which run clang and lld
#    through trixie's own loader (trixie's libLLVM needs glibc >= 2.38; Debian 12 has 2.36).
# Idempotent: a second run with the same package list only checks. About 70 MB download.
set -euo pipefail
dest=${1:-/usr/local/lib/rocmforge}
mirror=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
suite=trixie
keyring=/usr/share/keyrings/debian-archive-keyring.gpg
# clang-22's driver and front end, lld-22 (the device link), the clang resource headers, and the
# run-time closure of libllvm22 / libclang-cpp22 in trixie (read from trixie's Packages: Depends of
# libllvm22 are libc6 libedit2 libffi8 libgcc-s1 libstdc++6 libxml2 libz3-4 libzstd1 zlib1g; theirs
# add libbsd0 libmd0 libtinfo6 liblzma5). Not taken: libstdc++-14-dev, libgcc-14-dev, libc6-dev,
# binutils (host compiles are not what this clang is for), clang-tools-22 (Debian 12's
# clang-offload-bundler-19 bundles any arch's code objects).
pkgs="clang-22 libclang-cpp22 libllvm22 libclang-common-22-dev lld-22 libc6 libstdc++6 libgcc-s1
      libedit2 libffi8 libxml2 libz3-4 libzstd1 zlib1g libbsd0 libmd0 libtinfo6 liblzma5"

apt_candidate() {
  apt-cache policy "$1" 2>/dev/null | awk '/Candidate:/ {print $2}'
}

mkdir -p "$dest"
# GFX950_CLANG_FROM=trixie takes the second way even where apt has clang-22 (to check it)
c=$(apt_candidate clang-22)
if [ "${GFX950_CLANG_FROM:-}" != trixie ] && [ -n "$c" ] && [ "$c" != "(none)" ]; then
  for p in clang-22 lld-22; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed" || need="${need:-} $p"
  done
  if [ -n "${need:-}" ]; then
    # shellcheck disable=SC2086
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $need >/dev/null
  fi
  for link in clang-gfx950:/usr/bin/clang-22 ld.lld-gfx950:/usr/bin/ld.lld-22; do
    [ "$(readlink "$dest/${link%%:*}" 2>/dev/null)" = "${link#*:}" ] || ln -sfn "${link#*:}" "$dest/${link%%:*}"
  done
  exit 0
fi

root="$dest/trixie-llvm"
stamp="$root/.packages"
want=$(echo $pkgs | tr ' ' '\n' | sort | tr '\n' ' ')
if [ -f "$stamp" ] && [ "$(head -n1 "$stamp")" = "$want" ] && [ -x "$dest/clang-gfx950" ]; then
  exit 0
fi
for tool in curl gpgv xz dpkg-deb sha256sum python3; do
  command -v "$tool" >/dev/null || { echo "gfx950-clang: needs $tool" >&2; exit 1; }
done
[ -f "$keyring" ] || { echo "gfx950-clang: no Debian archive keyring at $keyring" >&2; exit 1; }
work=$(mktemp -d "${dest%/}/.trixie-llvm.XXXXXX")
trap 'rm -rf "$work"' EXIT
fetch() { curl -fsSL --retry 3 --connect-timeout 20 -o "$2" "$1"; }

fetch "$mirror/dists/$suite/InRelease" "$work/InRelease"
gpgv --quiet --keyring "$keyring" --output "$work/Release" "$work/InRelease" 2>"$work/gpgv.log" || {
  cat "$work/gpgv.log" >&2; echo "gfx950-clang: $suite InRelease: bad signature" >&2; exit 1; }
index=main/binary-amd64/Packages.xz
sum=$(awk -v f="$index" '/^SHA256:/ {s=1; next} /^[^ ]/ {s=0} s && $3 == f {print $1}' "$work/Release")
[ -n "$sum" ] || { echo "gfx950-clang: $suite Release lists no $index" >&2; exit 1; }
fetch "$mirror/dists/$suite/$index" "$work/Packages.xz"
echo "$sum  $work/Packages.xz" | sha256sum --quiet -c - || {
  echo "gfx950-clang: $index: sha256 differs from the signed Release" >&2; exit 1; }
xz -dc "$work/Packages.xz" > "$work/Packages"
# Filename and SHA256 of each wanted package (the newest version listed, as apt would pick).
python3 - "$work/Packages" $pkgs > "$work/list" <<'EOF'
import sys
want = set(sys.argv[2:])
found = {}
for para in open(sys.argv[1], encoding="utf-8").read().split("\n\n"):
    d = dict(
        line.split(": ", 1) for line in para.splitlines() if ": " in line and line[0] != " "
    )
    if d.get("Package") in want and d.get("Architecture") in ("amd64", "all"):
        found.setdefault(d["Package"], []).append(d)
missing = sorted(want - set(found))
if missing:
    sys.exit("gfx950-clang: not in trixie main: " + " ".join(missing))
for name in sorted(found):
    d = found[name][-1]
    print(name, d["Version"], d["SHA256"], d["Filename"])
EOF
rm -rf "$work/root" && mkdir "$work/root"
while read -r name version sha file; do
  fetch "$mirror/$file" "$work/pkg.deb"
  echo "$sha  $work/pkg.deb" | sha256sum --quiet -c - || {
    echo "gfx950-clang: $file: sha256 differs from trixie's Packages" >&2; exit 1; }
  dpkg-deb -x "$work/pkg.deb" "$work/root"
  echo "$name $version $sha" >> "$work/versions"
done < "$work/list"
lib='$root/usr/lib/x86_64-linux-gnu'
for tool in clang ld.lld; do
  case $tool in clang) out=clang-gfx950 ;; ld.lld) out=ld.lld-gfx950 ;; esac
  # the loader runs the program with the trixie libraries first; argv[0] stays the program, and
  # -no-canonical-prefixes (clang only) makes the driver find its resource dir beside it, not
  # beside the loader (/proc/self/exe)
  extra=""; [ $tool = clang ] && extra=" -no-canonical-prefixes"
  cat > "$work/root/$out" <<EOF
#!/bin/sh
# $tool from Debian 13 (trixie) LLVM 22, run through trixie's own loader (scripts/gfx950-clang.sh)
root=\$(dirname "\$(readlink -f "\$0")")/trixie-llvm
exec "$lib/ld-linux-x86-64.so.2" --library-path "$lib" "\$root/usr/lib/llvm-22/bin/$tool"$extra "\$@"
EOF
  chmod 755 "$work/root/$out"
done
{ echo "$want"; cat "$work/versions"; } > "$work/root/.packages"
rm -rf "$root.old"
[ -e "$root" ] && mv "$root" "$root.old"
mv "$work/root" "$root"
rm -rf "$root.old"
for out in clang-gfx950 ld.lld-gfx950; do
  mv "$root/$out" "$dest/$out"
done
