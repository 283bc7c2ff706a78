# Sourced by the GPU machine's scripts (host-check.sh, acceptance.sh): bubblewrap from
# Debian's .deb (dpkg -x, nothing installed) and rocmforge from the wheels in $CARRY (see
# host-check.sh --prepare); defines rf(). Needs CARRY, PY and step() from the caller.
step "bubblewrap from Debian's .deb (dpkg -x, no install)"
bw=/tmp/bwrap-deb
rm -rf "$bw" && for d in "$CARRY"/deb/*.deb; do dpkg -x "$d" "$bw"; done
mkdir -p /tmp/rfbin
cat > /tmp/rfbin/bwrap <<EOF
#!/bin/sh
LD_LIBRARY_PATH=$bw/lib/x86_64-linux-gnu:$bw/usr/lib/x86_64-linux-gnu exec $bw/usr/bin/bwrap "\$@"
EOF
chmod +x /tmp/rfbin/bwrap
export PATH=/tmp/rfbin:$PATH
bwrap --version

step "rocmforge from wheels"
site=/tmp/rfsite
rm -rf "$site"
$PY -m pip --version >/dev/null 2>&1 || PIPPY=/opt/torch/.venv/bin/python
${PIPPY:-$PY} -m pip install -q --no-index --no-deps --no-compile --target "$site" "$CARRY"/whl/*.whl
export PYTHONPATH=$site PATH=$site/bin:$PATH
rf() { $PY -m rocmforge "$@"; }
