#!/usr/bin/env bash
# The test suite never changes the host (issue 26): a digest of the system trees a test could
# write to and of the package databases, taken before and after the suite by scripts/test.sh.
#   scripts/host-digest.sh snapshot FILE   # write the digest to FILE
#   scripts/host-digest.sh check FILE      # take it again; exit 1 naming each path that changed
# The digest is a listing (type, mode, owner, size, mtime, link target of every file and
# directory under /usr/include, /usr/local and /opt: a changed mtime or size is a change, no
# file is read), the same listing of every directory under /usr (a file added or removed
# anywhere there changes its directory: headless Chromium made /usr/lib/chromium/extensions,
# which moved the system manifest's hash under later tests; __pycache__ left out, Python
# writes those), plus the same listing of /var/lib/dpkg and the rpm databases, and the sha256
# of dpkg's status file and of the rpm database files (small).
set -euo pipefail

TREES=(/usr/include /usr/local /opt)
DATABASES=(/var/lib/dpkg /var/lib/rpm /usr/lib/sysimage/rpm)

digest() {
  local existing=()
  for d in "${TREES[@]}" "${DATABASES[@]}"; do
    [[ -e "$d" ]] && existing+=("$d")
  done
  # path<TAB>what: one line per path, sorted, so two digests compare path by path
  find "${existing[@]}" -xdev -printf '%p\t%y %m %U:%G %s %T@ %l\n' 2>/dev/null || true
  find /usr -xdev -type d -name __pycache__ -prune -o -type d \
    -printf '%p\t%y %m %U:%G %s %T@ %l\n' 2>/dev/null || true
  for d in "${DATABASES[@]}"; do
    [[ -d "$d" ]] || continue
    find "$d" -xdev -type f \( -name status -o -path '*rpm/*' \) -print0 2>/dev/null \
      | xargs -0 -r sha256sum | awk '{ print $2 "\tsha256 " $1 }'
  done
}

case "${1:-}" in
  snapshot)
    digest | LC_ALL=C sort >"$2"
    ;;
  check)
    now=$(mktemp)
    trap 'rm -f "$now"' EXIT
    digest | LC_ALL=C sort >"$now"
    if cmp -s "$2" "$now"; then
      exit 0
    fi
    echo "error: the test suite changed the host (scripts/host-digest.sh; tests must change" \
      "system files only in a private root, tests/privroot.py):" >&2
    LC_ALL=C awk -F'\t' '
      NR == FNR { before[$1 "\t" substr($0, index($0, "\t") + 1)] = 1; paths[$1] = 1; next }
      { after[$1 "\t" substr($0, index($0, "\t") + 1)] = 1; now[$1] = 1 }
      END {
        for (k in before) if (!(k in after)) { split(k, f, "\t"); gone[f[1]] = 1 }
        for (k in after) if (!(k in before)) { split(k, f, "\t"); came[f[1]] = 1 }
        for (p in gone) print "  " ((p in now) ? "changed" : "removed") ": " p
        for (p in came) if (!(p in paths)) print "  added: " p
      }' "$2" "$now" | LC_ALL=C sort -k2 -u | head -n 50 >&2
    exit 1
    ;;
  *)
    echo "usage: scripts/host-digest.sh snapshot FILE | check FILE" >&2
    exit 2
    ;;
esac
