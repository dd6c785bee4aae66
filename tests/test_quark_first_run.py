"""Quark's first run (issue 23): on a machine with nothing cached, the FP8 paths never compile Quark's C++ kernels
(quantize/quark_kernels.py builds them on first use), and what they write is what Quark's plainly imported call
writes; a path that needs the kernels gets them built, through the same module, when it first calls one."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from calib_fixtures import write_calibration, write_target

from fixtures.synthetic import write_synthetic_draft

ROOT = Path(__file__).resolve().parents[1]
FP8_RUNS = """
import json, sys
from eagle3_quant.quantize.api import quantize_draft
from eagle3_quant.quantize.quark_kernels import kernels_built
src, out, cal = sys.argv[1:4]
quantize_draft(src, out + "/ptpc", device="cpu")
quantize_draft(src, out + "/static", scheme="fp8", calib=cal, device="cpu")
quantize_draft(src, out + "/gptq", gptq=True, calib=cal, device="cpu")
print(json.dumps({"kernels_built": kernels_built()}))
"""
BUILD = """
import json, torch
from eagle3_quant.quantize.quark_import import import_quark
from eagle3_quant.quantize.quark_kernels import build_kernels, kernels_built
import_quark()
before = kernels_built()
from quark.torch.kernel.hw_emulation.hw_emulation_interface import kernel_ext   # what Quark's code calls
build_kernels()
x = torch.tensor([[0.26, 1.3, 5.2, 7.0]])
fp4 = kernel_ext.fake_quantize_to_low_precision_fp(x, 2, 1, 6.0, 0)          # E2M1: 0, 0.5, 1, 1.5, 2, 3, 4, 6
print(json.dumps({"before": before, "after": kernels_built(), "fp4": fp4.tolist()}))
"""


def _fresh(tmp_path: Path) -> dict[str, str]:
    return {**os.environ, "TORCH_EXTENSIONS_DIR": str(tmp_path / "ext"), "XDG_CACHE_HOME": str(tmp_path / "xdg")}


def _run(code: str, *args, env) -> str:
    done = subprocess.run([sys.executable, "-c", code, *map(str, args)], capture_output=True, text=True, env=env,
                          cwd=ROOT, timeout=1800)
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout.strip().splitlines()[-1]


@pytest.mark.slow
def test_fp8_paths_on_a_fresh_machine_compile_nothing_and_write_what_quark_writes(tmp_path):
    import json

    src = write_synthetic_draft(tmp_path / "draft", "tiny", aux_layer_ids=[2, 4, 5])
    cal = write_calibration(tmp_path / "cal", write_target(tmp_path / "target"), samples=2, seq_len=12)
    env = _fresh(tmp_path)
    assert json.loads(_run(FP8_RUNS, src, tmp_path / "out", cal, env=env)) == {"kernels_built": False}
    assert not list((tmp_path / "ext").rglob("*.so"))               # PTPC, static FP8, GPTQ: nothing compiled
    assert (tmp_path / "xdg" / "eagle3-quant" / "quark-expert-scan.json").is_file()
    # Quark's own call, imported plainly (machine caches), on the same draft and exclude list: the same bytes
    subprocess.run([sys.executable, str(ROOT / "benchmarks" / "bare_quark.py"), str(src), str(tmp_path / "bare"),
                    "fc", "lm_head"], check=True, capture_output=True, cwd=ROOT, timeout=1800)
    assert (tmp_path / "out" / "ptpc" / "model.safetensors").read_bytes() == \
        (tmp_path / "bare" / "model.safetensors").read_bytes()


@pytest.mark.slow
def test_the_kernels_are_built_when_first_used(tmp_path):
    import json

    result = json.loads(_run(BUILD, env=_fresh(tmp_path)))
    assert result == {"before": False, "after": True, "fp4": [[0.5, 1.5, 6.0, 6.0]]}
    assert list((tmp_path / "ext").rglob("*.so"))                    # into the folder torch's cache names
