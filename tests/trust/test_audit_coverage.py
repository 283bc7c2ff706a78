"""``audit`` names an entry's file that no provenance statement covers (issue 34 point 5).

Before, an entry holding a cache's appended ``sitecustomize.py`` (substituted by a rocmforge
that did not check the statement's file list) was ``verify``'d as uncovered, yet ``audit`` of its
wheel said VERIFIED with the signature valid: the signature vouches for the statement, never
for a file the statement does not name.
"""

from __future__ import annotations

import json
import os
import stat
import sys
from pathlib import Path

import pytest
from conftest import REPO, rf

sys.path.insert(0, str(REPO / "tests" / "cache"))
from test_cache_untrusted import _append_sitecustomize, _signed_push, _tamper


def _wheel(entry: Path) -> Path:
    [wheel] = entry.glob("*.whl")
    return wheel


@pytest.mark.slow
def test_audit_of_a_substituted_entry_with_an_appended_file_is_tampered(
    tiny_recipe: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from test_cache_faults import Warnings

    from rocmforge.cache.substitute import Wanted, substitute
    from rocmforge.store import coverage
    from rocmforge.store.store import open_store

    url = f"file://{tmp_path / 'cache'}"
    built, env_b = _signed_push(tiny_recipe, tmp_path, url)
    _tamper(url, built["hash"], _append_sitecustomize)
    for k, v in env_b.items():
        monkeypatch.setenv(k, v)
    store = open_store(tmp_path / "store-b")
    want = Wanted(built["hash"], built["name"], built["version"])
    with monkeypatch.context() as m:
        m.setattr(coverage, "file_set_problem", lambda *a: None)  # the old substitution
        entry = substitute(store, [url], want, Warnings())
    assert entry is not None and (entry.path / "sitecustomize.py").exists()
    proc = rf("audit", _wheel(entry.path), "--store", tmp_path / "store-b", env=env_b)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "TAMPERED" in proc.stdout and "VERIFIED" not in proc.stdout, proc.stdout
    assert (
        "! sitecustomize.py: in the store entry, but no provenance statement covers it (the "
        "valid signature covers the statement only): added after the build (by a cache?); "
        "`rocmforge verify --repair` moves it aside" in proc.stdout
    ), proc.stdout
    data = rf("audit", _wheel(entry.path), "--store", tmp_path / "store-b", "--json", env=env_b)
    [report] = json.loads(data.stdout)
    assert report["status"] == "tampered" and report["signature"]["status"] == "valid", report
    assert any(p.startswith("sitecustomize.py: ") for p in report["problems"]), report
    # Once verify --repair has moved it aside, the wheel is verified again.
    assert rf("verify", "--store", tmp_path / "store-b", "--repair", env=env_b).returncode == 0
    again = rf("audit", _wheel(entry.path), "--store", tmp_path / "store-b", env=env_b)
    assert again.returncode == 0 and "VERIFIED" in again.stdout, again.stdout


def test_audit_of_an_unsigned_entry_with_an_added_or_a_missing_file(
    tiny_recipe: Path, tmp_path: Path
) -> None:
    """An unsigned entry takes audit's quick read path: a file it does not list, or one gone,
    sends it to the full check, which names it."""
    env = {"XDG_CONFIG_HOME": str(tmp_path / "no-key"), "ROCMFORGE_TRUSTED_KEYS": ""}
    store = tmp_path / "store"
    proc = rf("realize", tiny_recipe, "--store", store, "--json", env=env)
    assert proc.returncode == 0, proc.stderr
    entry = Path(json.loads(proc.stdout)[0]["path"])
    ok = rf("audit", _wheel(entry), "--store", store, env=env)
    assert ok.returncode == 0 and "VERIFIED" in ok.stdout, ok.stdout + ok.stderr
    mode = entry.stat().st_mode
    os.chmod(entry, mode | stat.S_IWUSR)
    try:
        (entry / "sitecustomize.py").write_text("import os\n")
        added = rf("audit", _wheel(entry), "--store", store, env=env)
        assert added.returncode == 1 and "TAMPERED" in added.stdout, added.stdout
        assert "! sitecustomize.py: in the store entry, but no provenance statement covers it:" \
            in added.stdout, added.stdout
        (entry / "sitecustomize.py").unlink()
        os.unlink(entry / "build.log.zst")
        gone = rf("audit", _wheel(entry), "--store", store, env=env)
        assert gone.returncode == 1, gone.stdout
        assert "! build.log.zst: named by the provenance statement, but gone from the store " \
            "entry" in gone.stdout, gone.stdout
    finally:
        os.chmod(entry, mode)
