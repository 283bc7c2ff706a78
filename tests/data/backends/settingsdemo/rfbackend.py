"""An in-tree PEP 517 backend that writes what it was given into the wheel it builds."""

import json
import os
import subprocess
import sys


def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
    os.makedirs("rfsettings", exist_ok=True)
    seen = {"config_settings": config_settings, "CFLAGS": os.environ.get("CFLAGS")}
    with open("rfsettings/__init__.py", "w") as f:
        f.write(f"SEEN = {json.dumps(seen, sort_keys=True)!r}\n")
    subprocess.run([sys.executable, "mkwheel.py", wheel_directory, "rfsettings", "0.1"], check=True)
    return "rfsettings-0.1-py3-none-any.whl"
