"""Write the wheel: ``python3 pack.py OUT`` zips cxxmany/ (with libcxxmany.so) into
OUT/cxxmany-1.0-py3-none-linux_x86_64.whl with METADATA, WHEEL and RECORD."""

import base64
import hashlib
import os
import sys
import zipfile

out, name, version = sys.argv[1], "cxxmany", "1.0"
files = {}
for root, dirs, names in os.walk(name):
    dirs.sort()
    for n in sorted(names):
        if n.endswith(".pyc"):
            continue
        p = os.path.join(root, n)
        with open(p, "rb") as f:
            files[p.replace(os.sep, "/")] = f.read()
di = f"{name}-{version}.dist-info"
files[f"{di}/METADATA"] = f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n".encode()
files[f"{di}/WHEEL"] = (
    b"Wheel-Version: 1.0\nGenerator: cxxmany-pack\nRoot-Is-Purelib: false\n"
    b"Tag: py3-none-linux_x86_64\n"
)
record = []
for p, data in files.items():
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    record.append(f"{p},sha256={digest},{len(data)}")
record.append(f"{di}/RECORD,,")
files[f"{di}/RECORD"] = ("\n".join(record) + "\n").encode()
with zipfile.ZipFile(os.path.join(out, f"{name}-{version}-py3-none-linux_x86_64.whl"), "w") as z:
    for p, data in files.items():
        z.writestr(p, data)
print("pack: wrote", name, version)
