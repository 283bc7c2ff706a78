"""Write a minimal pure-Python wheel of the package directory NAME (argv[2]) into OUT (argv[1]).

Used by the tests as a fast, compiler-free build step: `python mkwheel.py $OUT tiny 0.1`.
"""

import base64
import hashlib
import os
import sys
import zipfile

out, name, version = sys.argv[1], sys.argv[2], sys.argv[3]
files = {}
for root, dirs, names in os.walk(name):
    dirs.sort()
    for n in sorted(names):
        p = os.path.join(root, n)
        with open(p, "rb") as f:
            files[p.replace(os.sep, "/")] = f.read()
di = f"{name}-{version}.dist-info"
files[f"{di}/METADATA"] = f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n".encode()
files[f"{di}/WHEEL"] = (
    b"Wheel-Version: 1.0\nGenerator: mkwheel\nRoot-Is-Purelib: true\nTag: py3-none-any\n"
)
record = []
for p, data in files.items():
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    record.append(f"{p},sha256={digest},{len(data)}")
record.append(f"{di}/RECORD,,")
files[f"{di}/RECORD"] = ("\n".join(record) + "\n").encode()
with zipfile.ZipFile(os.path.join(out, f"{name}-{version}-py3-none-any.whl"), "w") as z:
    for p, data in files.items():
        z.writestr(p, data)
print("mkwheel: wrote", name, version)
