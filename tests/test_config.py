"""Configuration files (rocmforge/config.py): per user and per project, their precedence, and
one-line errors naming the file and key."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from conftest import rf

from rocmforge.config import ConfigError, effective_settings, parse_config

KEY = "ci-1:" + "A" * 43 + "="  # 32 zero bytes, base64


def _env(tmp_path: Path, **extra: str) -> dict[str, str]:
    return {"XDG_CONFIG_HOME": str(tmp_path / "xdg"), **extra}


def _user(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "xdg" / "rocmforge" / "config.toml"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def test_parse_keys_key_files_and_slurm_table(tmp_path: Path) -> None:
    (tmp_path / "keys").mkdir()
    (tmp_path / "keys" / "team.pub").write_text(
        f"# the team's builder\n{KEY.replace('ci-1', 'team')}\n"
    )
    cfg = parse_config(
        f'caches = ["file:///a", "oci://r.example/x"]\ntrusted-keys = ["{KEY}", "keys/team.pub"]\n'
        'substitute = false\nrequire-substitute = true\n[slurm]\npartition = "gpu"\n',
        tmp_path / "rocmforge.toml",
        user=False,
    )
    assert cfg.caches == ("file:///a", "oci://r.example/x")
    assert [k.text.split(":")[0] for k in cfg.trusted_keys] == ["ci-1", "team"]
    assert "keys/team.pub" in cfg.trusted_keys[1].where
    assert cfg.substitute is False and cfg.require_substitute is True
    assert cfg.slurm == {"partition": "gpu"}


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("cache = []", "cache: unknown key"),
        ('caches = "file:///a"', "caches: expected a list of non-empty strings"),
        ("caches = [1]", "caches: expected a list of non-empty strings"),
        ('caches = ["s3://bucket"]', "caches: s3://bucket: unsupported scheme 's3'"),
        ('substitute = "no"', "substitute: expected true or false"),
        ("slurm = 3", "slurm: expected a table"),
        ("trust-project-keys = true", "trust-project-keys: only the user file"),
        ('trusted-keys = ["nope/missing.pub"]', "trusted-keys: cannot read key file"),
        ("caches = [", "not valid TOML"),
    ],
)
def test_bad_project_file_is_one_line_naming_file_and_key(
    tmp_path: Path, text: str, message: str
) -> None:
    file = tmp_path / "rocmforge.toml"
    with pytest.raises(ConfigError) as info:
        parse_config(text, file, user=False)
    assert str(info.value).startswith(f"{file}: ") and "\n" not in str(info.value)
    assert message in str(info.value)


def test_precedence_flags_env_project_user(tmp_path: Path) -> None:
    _user(tmp_path, 'caches = ["file:///user", "file:///both"]\nsubstitute = false\n')
    project = tmp_path / "proj"
    (project / "recipes").mkdir(parents=True)
    (project / "rocmforge.toml").write_text(
        'caches = ["file:///project", "file:///both"]\nsubstitute = true\n'
        "require-substitute = true\n"
    )
    env = _env(tmp_path, ROCMFORGE_CACHES="file:///env")
    s = effective_settings(caches=["file:///flag"], starts=[project / "recipes"], environ=env)
    assert s.caches == ("file:///flag", "file:///env", "file:///project", "file:///both",
                        "file:///user")  # fmt: skip
    assert s.project_file == project / "rocmforge.toml"
    assert s.substitute is True and s.origins["substitute"] == str(project / "rocmforge.toml")
    assert s.require_substitute is True
    s = effective_settings(require_substitute=False, starts=[project / "recipes"], environ=env)
    assert s.require_substitute is False and s.origins["require_substitute"] == "command line"
    # Without the project file the user file decides; '' (no_project) reads none.
    s = effective_settings(starts=[project], no_project=True, environ=env)
    assert s.substitute is False and s.caches == ("file:///env", "file:///user", "file:///both")


def test_project_keys_count_only_when_the_user_says_so(tmp_path: Path) -> None:
    project = tmp_path / "proj"
    project.mkdir()
    (project / "rocmforge.toml").write_text(f'trusted-keys = ["{KEY}"]\n')
    s = effective_settings(starts=[project], environ=_env(tmp_path))
    assert s.trusted_keys == () and "trusted-keys ignored" in s.notes[0]
    _user(tmp_path, "trust-project-keys = true\n")
    s = effective_settings(starts=[project], environ=_env(tmp_path))
    assert [k.text for k in s.trusted_keys] == [KEY] and not s.notes


def test_project_file_of_another_user_is_ignored(tmp_path: Path) -> None:
    if os.getuid() != 0:
        pytest.skip("needs root to give the file to another user")
    project = tmp_path / "proj"
    project.mkdir()
    planted = project / "rocmforge.toml"
    planted.write_text('caches = ["oci://evil.example/x"]\n')
    os.chown(planted, 54321, 54321)
    s = effective_settings(starts=[project / "deeper"], environ=_env(tmp_path))
    assert s.caches == () and s.project_file is None
    assert "owned by uid 54321" in s.notes[0]
    # Named explicitly with --config, it is used.
    s = effective_settings(project=planted, environ=_env(tmp_path))
    assert s.caches == ("oci://evil.example/x",)


@pytest.mark.slow
def test_cli_bad_user_config_exits_2_naming_file_and_key(tmp_path: Path, tiny_recipe: Path) -> None:
    path = _user(tmp_path, "caches = [1]\n")
    proc = rf("plan", tiny_recipe, "--store", tmp_path / "s", env=_env(tmp_path))
    assert proc.returncode == 2, proc.stderr
    assert f"{path}: caches: expected a list of non-empty strings" in proc.stderr
    assert "Traceback" not in proc.stderr and str(tiny_recipe) not in proc.stderr
    path.write_text("")
    proc = rf(
        "plan", tiny_recipe, "--store", tmp_path / "s", "--config", tmp_path / "nope.toml",
        env=_env(tmp_path),
    )  # fmt: skip
    assert proc.returncode == 2 and "nope.toml: no such file" in proc.stderr


@pytest.mark.slow
def test_cli_bad_trusted_key_in_config_names_the_file(tmp_path: Path, tiny_recipe: Path) -> None:
    path = _user(tmp_path, f'caches = ["file://{tmp_path}/c"]\ntrusted-keys = ["k:notbase64!"]\n')
    proc = rf("realize", tiny_recipe, "--store", tmp_path / "s", env=_env(tmp_path))
    assert proc.returncode == 2, proc.stderr
    assert f"{path}: trusted-keys: key 'k' is not valid base64" in proc.stderr


@pytest.mark.slow
def test_config_command_and_cache_ls_of_configured_caches(tmp_path: Path) -> None:
    project = tmp_path / "proj"
    project.mkdir()
    (project / "rocmforge.toml").write_text(
        f'caches = ["file://{tmp_path}/c1"]\n[slurm]\npartition = "gpu"\n'
    )
    _user(tmp_path, f'caches = ["file://{tmp_path}/c2"]\ntrusted-keys = ["{KEY}"]\n')
    env = _env(tmp_path)
    proc = rf("config", "--json", cwd=project, env=env)
    assert proc.returncode == 0, proc.stderr
    shown = json.loads(proc.stdout)
    assert shown["caches"] == [f"file://{tmp_path}/c1", f"file://{tmp_path}/c2"]
    assert shown["origins"]["caches"][f"file://{tmp_path}/c1"] == str(project / "rocmforge.toml")
    assert shown["trusted_key_names"] == ["ci-1"] and shown["slurm"] == {"partition": "gpu"}
    (trusted,) = shown["trusted"]  # each trusted key by name and fingerprint
    assert trusted["name"] == "ci-1" and len(trusted["fingerprint"]) == 64
    text = rf("config", cwd=project, env=env).stdout
    assert f"project file:       {project / 'rocmforge.toml'}" in text, text
    assert f"trusted keys:       ci-1 (ed25519 {trusted['fingerprint'][:8]}..)" in text
    listed = rf("cache", "ls", cwd=project, env=env)
    assert listed.returncode == 0, listed.stderr
    assert listed.stdout.splitlines() == [
        f"0 entries in file://{tmp_path}/c1",
        f"0 entries in file://{tmp_path}/c2",
    ]
    none = rf("cache", "ls", "--config", "", cwd=tmp_path, env={"XDG_CONFIG_HOME": str(project)})
    assert none.returncode == 2 and "none configured" in none.stderr
