"""The same artifact bytes from a GPU as from a CPU: the CPU rule of Quark's FP8 weights, pinned here, and the
rewrite of what CUDA's scalar division changes (recorded on an H200: tests/fixtures/h200/artifact_compare.json)."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest
import torch
from safetensors import safe_open
from safetensors.torch import load_file, save_file

from eagle3_quant import options
from eagle3_quant.errors import QuantizationError
from eagle3_quant.quantize import quark_file
from eagle3_quant.quantize.cpu_bits import cpu_fp8_weight
from eagle3_quant.runtime.fp8 import FP8_MAX
from fixtures.real_pair.draft_files import DRAFT_DIR

RECORDED = json.loads((Path(__file__).parent / "fixtures/h200/artifact_compare.json").read_text())
pytestmark = pytest.mark.slow


def cuda_scalar_division(weight: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """What Quark computes on a CUDA device: ``amax / 448`` as ``amax * (1 / 448)`` in fp32 (ATen's div by a CPU
    scalar), then the same weight rule."""
    scale = weight.abs().amax(dim=1).to(torch.float32) * (torch.tensor(1.0) / FP8_MAX)
    codes = (weight / scale.to(weight.dtype).reshape(-1, 1)).clamp(-FP8_MAX, FP8_MAX).to(torch.float8_e4m3fn)
    return codes, scale


def _as_if_on_cuda(out: Path, src: Path, tamper: str | None = None) -> None:
    source = load_file(src / "model.safetensors")
    file = out / "model.safetensors"
    with safe_open(str(file), framework="pt") as fh:
        metadata, tensors = fh.metadata(), {name: fh.get_tensor(name) for name in fh.keys()}
    for name in [n for n in tensors if n.endswith(".weight_scale")]:
        module = name.removesuffix(".weight_scale")
        tensors[module + ".weight"], tensors[name] = cuda_scalar_division(source[module + ".weight"])
        if name == tamper:
            tensors[name] = tensors[name] * 1.001
    save_file(tensors, str(file), metadata=metadata)


@pytest.fixture(scope="module")
def cpu_artifact(tmp_path_factory) -> Path:
    from eagle3_quant.quantize.api import quantize_draft

    return quantize_draft(DRAFT_DIR, tmp_path_factory.mktemp("cpu") / "out", device="cpu").output


def _quantize_on_simulated_cuda(out: Path, monkeypatch, tamper: str | None = None):
    from eagle3_quant.quantize.api import quantize_draft

    quark_on_cpu = quark_file.run_file_to_file

    def quark_on_cuda(draft, plan, staging, device, verbose=False):
        assert device == "cuda"
        quark_on_cpu(draft, plan, staging, "cpu", verbose)
        _as_if_on_cuda(staging, DRAFT_DIR, tamper)

    monkeypatch.setattr(quark_file, "run_file_to_file", quark_on_cuda)
    monkeypatch.setattr(options, "require_device", lambda device: None)
    return quantize_draft(DRAFT_DIR, out, device="cuda")


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_quarks_cpu_run_is_the_cpu_rule(cpu_artifact):
    source = load_file(DRAFT_DIR / "model.safetensors")
    written = load_file(cpu_artifact / "model.safetensors")
    scales = [n for n in written if n.endswith(".weight_scale")]
    assert len(scales) == 7
    for name in scales:
        module = name.removesuffix(".weight_scale")
        codes, scale = cpu_fp8_weight(source[module + ".weight"], per_channel=True)
        assert torch.equal(written[name], scale), name
        assert torch.equal(written[module + ".weight"].view(torch.uint8), codes.view(torch.uint8)), module


# The draft the H200 quantized (shipped until the plateau draft replaced it), read from git history.
H200_DRAFT = "147ca890063511acf417c31c2c5f7bff0588721a:tests/fixtures/real_pair/draft/model.safetensors"


def test_the_cuda_rule_reproduces_the_rows_an_h200_changed():
    import subprocess

    from safetensors.torch import load

    shown = subprocess.run(["git", "show", H200_DRAFT], capture_output=True, cwd=Path(__file__).parent)
    if shown.returncode != 0:
        pytest.skip(f"the draft the H200 ran is not in this clone's history ({H200_DRAFT})")
    source = load(shown.stdout)
    for name, recorded in RECORDED["weight_scale_rows_differing"].items():
        weight = source[name.removesuffix("_scale")]
        _, on_cuda = cuda_scalar_division(weight)
        _, on_cpu = cpu_fp8_weight(weight, per_channel=True)
        assert int((on_cuda != on_cpu).sum()) == recorded["differ"], name
        assert on_cuda.numel() == recorded["of"]


def test_an_artifact_made_on_cuda_has_the_cpu_bytes(cpu_artifact, tmp_path, monkeypatch):
    made = _quantize_on_simulated_cuda(tmp_path / "gpu", monkeypatch)
    assert _sha256(made.output / "model.safetensors") == _sha256(cpu_artifact / "model.safetensors")
    manifest = {json.dumps(f, sort_keys=True) for f in json.loads(made.manifest_path.read_text())["outputs"]}
    reference = json.loads((cpu_artifact / "eagle3_quant.json").read_text())["outputs"]
    assert manifest == {json.dumps(f, sort_keys=True) for f in reference}


def test_a_scale_off_by_more_than_the_devices_rounding_is_refused(tmp_path, monkeypatch):
    name = "midlayer.mlp.down_proj.weight_scale"
    with pytest.raises(QuantizationError, match="more than one fp32 ulp") as caught:
        _quantize_on_simulated_cuda(tmp_path / "gpu", monkeypatch, tamper=name)
    assert caught.value.tensor == name
    assert not (tmp_path / "gpu").exists()
