"""Calibration for drafts that read other than three target states: every tap is captured, the final-layer
tap last, and the stored states have the width the draft's fc reads."""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch
from calib_capture_fixtures import DRAFT, TARGET

from eagle3_quant.calib.api import calibrate_target
from eagle3_quant.records.calibration import load_calibration
from fixtures.synthetic import write_synthetic_draft

pytestmark = pytest.mark.slow


@pytest.mark.parametrize(("num_aux", "final", "ids", "taps"), [
    (2, False, [0, 2], (1, 3)),                  # SGLang reads SpecForge ids as outputs: hidden_states[id + 1]
    (4, True, [0, 1, 2], (1, 2, 3, 4)),         # the ids plus the final layer, before the final norm (vLLM's)
])
def test_capture_reads_every_state_the_draft_reads(tiny_target, chat_jsonl, target_model, tmp_path, num_aux, final,
                                                  ids, taps):
    draft = write_synthetic_draft(tmp_path / "draft", replace(DRAFT, num_aux=num_aux, aux_final=final),
                                  aux_layer_ids=ids)
    result = calibrate_target(tiny_target, draft, chat_jsonl, tmp_path / "cal", num_samples=2, seq_len=32,
                              min_tokens=4, engine="sglang")
    assert set(taps) <= set(result.taps)         # the set holds every candidate's layers; SGLang's among them
    calib = load_calibration(tmp_path / "cal").select(taps)
    h = TARGET.hidden
    for sample in calib.samples():
        t = sample.input_ids.shape[0]
        assert sample.aux_hidden_states.shape == (t, num_aux * h)
        last: dict[str, torch.Tensor] = {}
        hook = target_model.model.layers[-1].register_forward_hook(
            lambda _m, _a, out, last=last: last.__setitem__("out", out[0] if isinstance(out, tuple) else out))
        try:
            with torch.no_grad():
                states = target_model(input_ids=sample.input_ids[None], output_hidden_states=True).hidden_states
        finally:
            hook.remove()
        num_layers = len(target_model.model.layers)
        for j, k in enumerate(taps):
            expected = last["out"][0] if k == num_layers else states[k][0]
            torch.testing.assert_close(sample.aux_hidden_states[:, j * h:(j + 1) * h], expected, rtol=0, atol=1e-5)
        if final:          # the final tap is the last layer's output, not transformers' post-norm hidden_states[L]
            assert not torch.allclose(last["out"][0], states[num_layers][0], atol=1e-3)
