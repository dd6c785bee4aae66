"""vLLM's own Eagle3 code loads a vocabulary-pruned artifact (`quantize --draft-vocab N`): every tensor consumed,
``d2t`` honoured. Needs `make setup-vllm`; skipped with the reason without it."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from vllm_artifacts import calibration_set

from eagle3_quant.validate.vllm_load import (
    MAX_RELATIVE_DLOGIT,
    MIN_TOP1,
    VllmLoadOptions,
    run_vllm_load,
    vllm_load_check,
    vllm_missing_reason,
)
from fixtures.synthetic import write_synthetic_draft

pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(vllm_missing_reason() is not None, reason=str(vllm_missing_reason()))]

KEPT = 100


@pytest.fixture(scope="module")
def pruned(tmp_path_factory) -> tuple[Path, dict]:
    """The tiny synthetic draft (256 of 512 tokens, with d2t) pruned to 100 tokens through real Quark, and
    vLLM's worker result on it."""
    from eagle3_quant.quantize.api import quantize_draft

    root = tmp_path_factory.mktemp("vllm-pruned")
    src = write_synthetic_draft(root / "src", "tiny")
    cal = calibration_set(root)
    out = quantize_draft(src, root / "pruned", device="cpu", calib=cal, draft_vocab=KEPT).output
    cwd = os.getcwd()
    os.chdir(root)       # relative paths, as a pipeline's workdir gives them (the worker runs in its own folder)
    try:
        result = run_vllm_load(out.relative_to(root), VllmLoadOptions(calib=Path(cal).relative_to(root)))
    finally:
        os.chdir(cwd)
    return out, result


def test_vocab_pruned_artifact_loads_in_vllm_through_its_d2t(pruned):
    """vLLM consumes every tensor (lm_head's rows, d2t into draft_id_to_target_id, byte-identical), and its
    target-vocabulary logits, read at the targets of its own d2t, match the runtime's on calibration inputs."""
    from safetensors import safe_open

    path, result = pruned
    with safe_open(str(path / "model.safetensors"), framework="pt") as fh:
        d2t, head = fh.get_tensor("d2t"), fh.get_tensor("lm_head.weight")
    assert d2t.shape == (KEPT,) and head.shape[0] == KEPT and int(d2t.max()) > 0     # a real remapping
    assert result["ok"], result.get("traceback")
    assert result["not_consumed"] == [] and result["not_identical"] == [] and result["uninitialized"] == []
    assert result["skipped_on_purpose"] == ["t2d"] and result["identical"] == result["tensors"] - 1
    check = vllm_load_check(result)
    assert check.status == "passed", check.detail
    assert result["inputs"] == "calibration set"
    assert result["logits"]["top1_agreement"] >= MIN_TOP1
    assert result["logits"]["relative_dlogit"] <= MAX_RELATIVE_DLOGIT
