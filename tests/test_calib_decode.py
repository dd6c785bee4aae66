"""Capture with generated tokens keeps the states of its own KV-cached decoding passes (no second full pass): the
continuation is transformers' greedy `generate`, and the states and next tokens are the full pass's within float
rounding."""

from __future__ import annotations

import pytest
import torch
from calib_capture_fixtures import TARGET

from eagle3_quant.calib.capture import TargetRunner

TAPS = (1, 3, TARGET.layers)        # the final layer's state too: read before the final norm, pass by pass


@pytest.fixture(scope="module")
def runner(tiny_target):
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(tiny_target, dtype=torch.float32).eval()   # its own: a hook is added
    return TargetRunner(model, TAPS, torch.float32)


def test_decoding_states_equal_a_full_pass_and_generate(runner):
    from transformers import GenerationConfig

    prompt = torch.tensor([5, 17, 42, 99, 7, 256, 3, 64, 128, 11])
    full, aux, next_ids = runner.decode(prompt, 12)
    assert full.shape == (22,) and aux.shape == (22, 3 * TARGET.hidden) and next_ids.shape == (22,)
    assert torch.equal(full[:10], prompt) and torch.equal(full[10:], next_ids[9:-1])
    config = GenerationConfig(max_new_tokens=12, min_new_tokens=12, do_sample=False, pad_token_id=0)
    with torch.inference_mode():
        assert torch.equal(runner.model.generate(prompt[None], generation_config=config)[0], full)
    one_pass_aux, one_pass_next = runner.forward(full)
    assert torch.equal(one_pass_next, next_ids)
    torch.testing.assert_close(aux, one_pass_aux, rtol=1e-5, atol=1e-5)


def test_decoding_stops_after_an_eos(runner):
    prompt = torch.tensor([5, 17, 42, 99])
    first, _, _ = runner.decode(prompt, 6)
    eos = int(first[6])                                  # the third generated token, as the EOS
    end = 4 + first[4:].tolist().index(eos) + 1          # through its first occurrence
    stopping = TargetRunner(runner.model, TAPS, torch.float32, [eos])
    full, aux, next_ids = stopping.decode(prompt, 6)
    assert end < 10 and torch.equal(full, first[:end]) and aux.shape[0] == next_ids.shape[0] == end
    sample = stopping.capture(tuple(prompt.tolist()), 6)
    assert sample.generated == end - 4 and sample.sample.generated_from == 4 and not sample.cut


def test_taps_out_of_order_are_refused(runner):
    with pytest.raises(ValueError, match=r"taps \[3, 1, 4\] must be ascending"):
        TargetRunner(runner.model, (3, 1, 4), torch.float32)
