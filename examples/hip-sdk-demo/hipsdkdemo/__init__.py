"""hipsdkdemo: a HIP vector add, to show rocmforge building and verifying a GPU extension.

Importing works without a GPU; ``add`` raises :class:`HipError` (e.g. ``hipErrorNoDevice``,
code 100; the error carries ``code`` and ``name``) when no usable device is present.
"""

# Built from ROCm's SDK wheels the way TheRock builds torch, the wheel carries a generated
# _rocm_init.py that preloads the SDK's libraries through the rocm_sdk module (the idiom of
# torch/__init__.py, which catches ImportError: a missing submodule raises ImportError, not
# ModuleNotFoundError as TheRock's docs/packaging/python_packaging.md has it); without it,
# nothing to do.
try:
    from hipsdkdemo import _rocm_init
except ImportError:
    pass
else:
    _rocm_init.initialize()
    del _rocm_init

from hipsdkdemo import _hip  # noqa: E402
from hipsdkdemo._hip import HipError

__all__ = ["HipError", "add", "device_count"]


def _clear(exc):
    code, name, message = exc.args
    detail = "" if message == name else f": {message}"
    error = HipError(f"{name} (HIP error {code}){detail}")
    error.code, error.name = code, name
    return error


def add(a, b):
    """Return ``[x + y for x, y in zip(a, b)]``, computed by a HIP kernel on the GPU."""
    try:
        return _hip.add(a, b)
    except HipError as exc:
        raise _clear(exc) from None


def device_count():
    """Return the number of HIP devices; raises :class:`HipError` when there is none."""
    try:
        return _hip.device_count()
    except HipError as exc:
        raise _clear(exc) from None
