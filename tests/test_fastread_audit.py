"""``audit WHEEL...`` on the console's read path: the same bytes as the full CLI, over a real build.

Same method as ``test_fastread.py``: each form runs through the console entry and through
``rocmforge.cli.main.main`` in fresh interpreters; stdout, stderr and the exit code must agree, and
the
console's loaded modules say whether the read path answered. The read path answers only when
every wheel is verified by the index and nothing (a signature, a configuration file, trusted
keys) needs the full command; every other form falls through and still prints the same.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest
from conftest import WHEELHOUSE, build_tiny_entry
from test_fastread import CONSOLE, FULL, _run

from rocmforge.store.audittext import audit_facts
from rocmforge.util import leanjson


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """One real build of the tiny project."""
    base = tmp_path_factory.mktemp("audit")
    info = build_tiny_entry(base)
    info["base"] = base
    info["path"] = info["store"] / "entries" / info["entry"] / info["wheel"]
    return info


def _both(
    argv: list[str], cwd: Path, extra: dict[str, str] | None = None
) -> tuple[bool, tuple[int, str, str]]:
    """Run ``argv`` both ways (with ``extra`` environment); assert they agree; return (read path
    answered, the result)."""
    code, out, err = _run(CONSOLE, argv, cwd, extra)
    err, _, mods = err.rpartition("\nMODULES ")
    full = _run(FULL, argv, cwd, extra)
    assert (code, out, err) == full, argv
    loaded = set(mods.split())
    if "rocmforge.cli.main" not in loaded:  # the read path answered: nothing heavy came with it
        heavy = {"argparse", "dataclasses", "typing", "re", "json", "pathlib", "contextlib",
                 "rocmforge.errors", "rocmforge.store.store", "nacl"}  # fmt: skip
        assert not heavy & loaded, heavy & loaded
    return "rocmforge.cli.main" not in loaded, full


@pytest.mark.slow
def test_verified_wheels_are_answered_by_the_read_path(built: dict[str, Any], tmp_path: Path):
    store, wheel = str(built["store"]), str(built["path"])
    copy = tmp_path / "renamed.whl"
    shutil.copy(wheel, copy)
    # the wheel in the store, its copy elsewhere, both; --store before or after the command
    for argv in (["audit", wheel, "--store", store], ["audit", str(copy), "--store", store],
                 ["--store", store, "audit", wheel, str(copy)],
                 ["audit", "--store", store, str(copy), wheel]):  # fmt: skip
        fast, (code, out, err) = _both(argv, tmp_path)
        assert fast and code == 0, argv
        assert err == f"rocmforge: auditing against the store at {store} (--store)\n"
        assert out.count(": VERIFIED: byte-identical") == len(argv) - 3
        assert f"  store path   {built['store'] / 'entries' / built['entry']}\n" in out
        assert "  signature    unsigned\n" in out and "  input hash   " in out
    fast, (_, out, _) = _both(["audit", wheel, str(copy), "--store", store], tmp_path)
    assert fast and f"{built['entry']}\n\n{copy}: VERIFIED" in out  # a blank line between
    # the store found above the wheel, above the current directory, and by $ROCMFORGE_STORE
    fast, (code, _, err) = _both(["audit", wheel], Path("/"))
    assert fast and code == 0 and err.endswith("(found above)\n")
    entry = built["store"] / "entries" / built["entry"]
    fast, (code, _, err) = _both(["audit", built["wheel"]], entry)  # a relative path
    assert fast and code == 0 and err.endswith("(found above)\n")
    fast, (code, _, err) = _both(["audit", str(copy)], built["base"])
    assert fast and code == 0 and err.endswith("(found above)\n")
    fast, (code, _, err) = _both(["audit", str(copy)], tmp_path, {"ROCMFORGE_STORE": store})
    assert fast and code == 0 and err.endswith("($ROCMFORGE_STORE)\n")


@pytest.mark.slow
def test_other_audits_fall_through_and_print_the_same(built: dict[str, Any], tmp_path: Path):
    store, wheel = str(built["store"]), str(built["path"])
    tampered = tmp_path / built["wheel"]
    raw = bytearray(built["path"].read_bytes())
    raw[len(raw) // 2] ^= 1
    tampered.write_bytes(raw)
    foreign = next(WHEELHOUSE.glob("*.whl"))
    shutil.copy(wheel, tmp_path / "copy.whl")
    for argv, want in (
        (["audit", wheel, "--json"], 0),
        (["audit", str(foreign)], 6),  # not built by rocmforge
        (["audit", str(tampered)], 1),
        (["audit", wheel, str(tampered)], 1),  # one bad wheel: the full command does all
        (["audit", str(tmp_path / "missing.whl")], 2),
        (["audit", str(tmp_path)], 2),  # a directory
        (["audit", "./copy.whl"], 0),  # pathlib drops the ./ when it prints it
        (["audit", wheel, "--config", ""], 0),
        (["audit", wheel, "--store", store, str(built["path"])], 2),  # argparse refuses it
        (["audit"], 2),
    ):
        fast, (code, _, err) = _both([*argv, "--store", store], tmp_path)
        assert not fast and code == want, (argv, err)
    # no store there: nothing can be verified (the full command says so)
    fast, (code, _, err) = _both(["audit", wheel, "--store", str(tmp_path / "none")], tmp_path)
    assert not fast and code == 5 and "there is no store there" in err


def _writable_copy(built: dict[str, Any], tmp_path: Path) -> tuple[Path, str]:
    """A copy of the built store (``tmp_path/store``) whose entry can be edited: (entry, its
    wheel)."""
    store = tmp_path / "store"
    shutil.copytree(built["store"], store, symlinks=True)
    entry = store / "entries" / built["entry"]
    entry.chmod(0o755)
    return entry, str(entry / built["wheel"])


@pytest.mark.slow
def test_signatures_and_configuration_files_fall_through(built: dict[str, Any], tmp_path: Path):
    from rocmforge.trust.signing import generate_key, sign_payload

    entry, wheel = _writable_copy(built, tmp_path)
    key = generate_key(tmp_path / "signing.key", "ci-1")
    argv = ["audit", wheel]
    config = tmp_path / "config"
    assert _both(argv, tmp_path, {"XDG_CONFIG_HOME": str(config)})[0]
    # trusted keys set: the full command reads them (a bad one is an error)
    trusted = {"ROCMFORGE_TRUSTED_KEYS": key.public.text()}
    fast, (code, out, _) = _both(argv, tmp_path, trusted)
    assert not fast and code == 0 and "  signature    unsigned\n" in out
    fast, (code, _, err) = _both(argv, tmp_path, {"ROCMFORGE_TRUSTED_KEYS": "nonsense"})
    assert not fast and code == 2, err
    (config / "rocmforge").mkdir(parents=True)
    (config / "rocmforge" / "trusted-keys").write_text(key.public.text() + "\n")
    fast, (code, _, _) = _both(argv, tmp_path, {"XDG_CONFIG_HOME": str(config)})
    assert not fast and code == 0
    (config / "rocmforge" / "trusted-keys").unlink()
    # a user or project configuration file (its notes and errors are the full command's)
    (config / "rocmforge" / "config.toml").write_text("substitute = false\n")
    assert not _both(argv, tmp_path, {"XDG_CONFIG_HOME": str(config)})[0]
    (config / "rocmforge" / "config.toml").unlink()
    (tmp_path / "rocmforge.toml").write_text("bogus = 1\n")
    fast, (code, _, _) = _both(argv, tmp_path, {"XDG_CONFIG_HOME": str(config)})
    assert not fast and code == 2
    (tmp_path / "rocmforge.toml").unlink()
    # a signed entry: valid with its key trusted, untrusted without
    envelope = sign_payload((entry / "provenance.json").read_bytes(), key)
    (entry / "provenance.dsse.json").write_text(json.dumps(envelope))
    fast, (code, out, _) = _both(argv, tmp_path, {"XDG_CONFIG_HOME": str(config)})
    assert not fast and code == 0 and "  signature    untrusted (key ci-1)" in out
    fast, (code, out, _) = _both(argv, tmp_path, trusted)
    assert not fast and code == 0 and "  signature    valid (key ci-1)" in out


@pytest.mark.slow
def test_stack_entries_and_odd_meta_fall_through(built: dict[str, Any], tmp_path: Path):
    entry, wheel = _writable_copy(built, tmp_path)
    meta = entry / "meta.json"
    data = json.loads(meta.read_bytes())
    data["archs"] = {built["wheel"]: {"lib/x.so": {"union": ["gfx942"], "common": ["gfx942"],
                                                    "bundles": 1}}}  # fmt: skip
    data["links"] = {built["wheel"]: [{"member": "x.so", "soname": "libz.so.1",
                                       "provider": "package", "package": "zlib1g",
                                       "version": "1:1.2.13"}]}  # fmt: skip
    data["origin"] = {"cache": "file:///c", "host": "builder"}
    meta.chmod(0o644)
    meta.write_text(json.dumps(data))
    fast, (code, out, _) = _both(["audit", wheel], tmp_path)
    assert fast and code == 0
    assert "  gpu archs    lib/x.so: gfx942 (1 bundle(s))\n" in out
    assert "links libz.so.1 from zlib1g 1:1.2.13" in out
    assert "  substituted  from file:///c, built on builder\n" in out
    data["archs"] = ["not", "a", "table"]
    meta.write_text(json.dumps(data))
    fast, (code, _, _) = _both(["audit", wheel], tmp_path)
    assert not fast and code != 0  # the full command rejects the meta.json
    data["archs"] = {}
    meta.write_text(json.dumps(data))
    provenance = entry / "provenance.json"
    saved = provenance.read_bytes()
    provenance.unlink()  # an entry built before provenance: the note
    fast, (code, out, _) = _both(["audit", wheel], tmp_path)
    assert fast and code == 0 and "  note: the store entry has no provenance statement" in out
    provenance.write_bytes(saved)
    derivation = entry / "derivation.json"
    drv = json.loads(derivation.read_bytes())
    drv["recipes"] = [{"name": "dep", "version": "1", "hash": "0" * 32}]
    derivation.chmod(0o644)
    derivation.write_text(json.dumps(drv))
    fast, (code, out, _) = _both(["audit", wheel], tmp_path)
    assert not fast and code == 0 and "(not in this store)" in out


@pytest.mark.slow
def test_audit_facts_read_the_entry_as_the_report_does(built: dict[str, Any]) -> None:
    from rocmforge.store.store import open_store
    from rocmforge.trust.audit import audit_wheel

    report = audit_wheel(built["path"], store=open_store(built["store"]))
    entry = built["store"] / "entries" / built["entry"]
    derivation = leanjson.loads((entry / "derivation.json").read_bytes())
    statement = leanjson.loads((entry / "provenance.json").read_bytes())
    assert audit_facts(derivation, statement) == report.facts() == report.to_json()["facts"]
    assert report.facts()["recipe"]["file"] == str(built["recipe"])
