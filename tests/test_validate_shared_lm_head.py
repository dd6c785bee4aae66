"""`validate`'s fidelity checks on a draft that shares its target's lm_head: the runtime runs it on the target's
head (read from the target folder, as vLLM swaps it in), for the FP8 artifact and the BF16 reference alike."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from calib_fixtures import write_calibration, write_target
from safetensors.torch import load_file, save_file
from test_runtime_shared_lm_head import without_lm_head

from eagle3_quant.errors import DraftFormatError
from fixtures.synthetic import write_synthetic_draft


def _with_lm_head(target: Path) -> Path:
    tensors = load_file(target / "model.safetensors")
    gen = torch.Generator().manual_seed(5)
    tensors["lm_head.weight"] = (torch.randn(512, 64, generator=gen) * 0.1).to(torch.bfloat16)
    save_file(tensors, target / "model.safetensors")
    return target


@pytest.fixture(scope="module")
def shared(tmp_path_factory):
    from eagle3_quant.quantize.api import quantize_draft

    root = tmp_path_factory.mktemp("shared-lm-head")
    src = without_lm_head(write_synthetic_draft(root / "src", "tiny-mla", aux_layer_ids=[1, 2, 3]))
    quantize_draft(src, root / "out", device="cpu", serve_taps="as-is")   # the lm_head is the subject here
    return root, src, root / "out"


def test_fidelity_checks_run_on_the_targets_lm_head(shared):
    from eagle3_quant.validate.api import validate_draft

    root, src, out = shared
    target = _with_lm_head(write_target(root / "target"))
    calib = write_calibration(root / "calib", target)
    report = validate_draft(out, reference=str(src), calib=calib, kernel=False, vllm=False,
                            report=root / "report.json")
    check = report.check("top1_agreement")
    assert check.status == "passed", check.detail
    assert report.check("acceptance_ratio").status in ("passed", "failed")     # measured, whatever its value


def test_a_target_without_an_lm_head_is_named(shared):
    from eagle3_quant.validate.api import validate_draft

    root, src, out = shared
    target = write_target(root / "untied")          # embedding only, not tied
    calib = write_calibration(root / "calib-untied", target)
    with pytest.raises(DraftFormatError, match="does not tie it") as err:
        validate_draft(out, reference=str(src), calib=calib, kernel=False, vllm=False, report=root / "r2.json")
    assert err.value.tensor == "lm_head.weight"
