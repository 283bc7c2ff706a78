"""What a build sees of its version control: the version and commit, since ``.git`` is not there.

The build copy of a source has no ``.git`` (it is stripped so the copy is a pure function of the
hashed tree), so ``setuptools_scm`` cannot ask git for a version and PyTorch's ``git_version`` is
"Unknown". :func:`source_env` hands the build what git would have said, from hashed inputs only
(so the input hash already covers it):

- ``SETUPTOOLS_SCM_PRETEND_VERSION`` and ``SETUPTOOLS_SCM_PRETEND_VERSION_FOR_<NAME>`` (the
  per-package form setuptools_scm reads first) from ``[package] version``;
- ``ROCMFORGE_SOURCE_COMMIT``: the commit of a ``git`` source (absent for a ``path`` source).

A recipe's own ``[env]`` wins over these.
"""

from __future__ import annotations

import re

from rocmforge.plan.resolve import Resolved


def scm_dist_name(name: str) -> str:
    """The package name as setuptools_scm spells it in ``..._PRETEND_VERSION_FOR_<NAME>``."""
    return re.sub(r"[-_.]+", "_", name).upper()


def source_env(resolved: Resolved) -> dict[str, str]:
    """Return the version-control variables for the build of ``resolved`` (see module doc)."""
    package = resolved.recipe.package
    env = {
        "SETUPTOOLS_SCM_PRETEND_VERSION": package.version,
        f"SETUPTOOLS_SCM_PRETEND_VERSION_FOR_{scm_dist_name(package.name)}": package.version,
    }
    if resolved.source.commit:
        env["ROCMFORGE_SOURCE_COMMIT"] = resolved.source.commit
    return env
