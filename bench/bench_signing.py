"""Choose the ed25519 library by measurement: import cost, sign and verify, PyNaCl vs cryptography.

Usage: python bench/bench_signing.py [--quick]

Import cost is the median wall time of a fresh interpreter importing the signing classes minus
that of a bare interpreter (the cost a signing build or a verifying audit pays once); sign and
verify are per call over a 16 KB statement. rocmforge uses PyNaCl (see docs/traceability.md).
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time

IMPORTS = {
    "pynacl": "from nacl.signing import SigningKey, VerifyKey",
    "cryptography": "from cryptography.hazmat.primitives.asymmetric.ed25519 import "
    "Ed25519PrivateKey",
}


def _start(code: str, runs: int) -> float:
    times = []
    for _ in range(runs):
        t = time.perf_counter()
        subprocess.run([sys.executable, "-c", code], check=True)
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def _ops(lib: str, n: int) -> tuple[float, float]:
    msg = b"x" * 16384
    if lib == "pynacl":
        from nacl.signing import SigningKey

        key = SigningKey.generate()
        t = time.perf_counter()
        for _ in range(n):
            sig = key.sign(msg).signature
        sign = (time.perf_counter() - t) / n
        vk = key.verify_key
        t = time.perf_counter()
        for _ in range(n):
            vk.verify(msg, sig)
        return sign, (time.perf_counter() - t) / n
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    ck = Ed25519PrivateKey.generate()
    t = time.perf_counter()
    for _ in range(n):
        csig = ck.sign(msg)
    sign = (time.perf_counter() - t) / n
    pk = ck.public_key()
    t = time.perf_counter()
    for _ in range(n):
        pk.verify(csig, msg)
    return sign, (time.perf_counter() - t) / n


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--quick", action="store_true", help="fewer runs")
    args = ap.parse_args()
    runs, n = (5, 200) if args.quick else (15, 2000)
    bare = _start("pass", runs)
    results = {}
    for lib, code in IMPORTS.items():
        imp = _start(code, runs) - bare
        sign, verify = _ops(lib, n)
        results[lib] = imp
        print(f"{lib:<13} import {imp * 1000:6.1f} ms  sign {sign * 1e6:6.1f} us  "
              f"verify {verify * 1e6:6.1f} us")
    ratio = results["cryptography"] / results["pynacl"] if results["pynacl"] > 0 else float("nan")
    print(f"import cost cryptography/pynacl: {ratio:.2f}x")


if __name__ == "__main__":
    main()
