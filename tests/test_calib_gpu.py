"""accelerate device_map="auto": a target spread over the GPU and CPU gives the states the CPU gives."""

from __future__ import annotations

import pytest
import torch

from eagle3_quant.calib.api import calibrate_target
from eagle3_quant.records.calibration import load_calibration

pytestmark = [pytest.mark.gpu,
              pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA/ROCm GPU (device_map='auto')")]


def test_target_spread_over_gpu_and_cpu_matches_cpu(tiny_target, tiny_draft, chat_jsonl, target_model, tmp_path,
                                                    monkeypatch):
    from transformers import AutoModelForCausalLM

    placements = []
    real = AutoModelForCausalLM.from_pretrained

    def spy(*args, **kwargs):
        model = real(*args, **kwargs)
        placements.append(dict(getattr(model, "hf_device_map", {})))
        return model

    monkeypatch.setattr(AutoModelForCausalLM, "from_pretrained", spy)
    # ~0.9 MB of fp32 weights: 300 KB of GPU memory holds the embedding and a layer or so, the rest goes to CPU
    result = calibrate_target(tiny_target, tiny_draft, chat_jsonl, tmp_path / "cal", num_samples=4, seq_len=40,
                              min_tokens=4, max_memory={0: "300KB", "cpu": "1GB"})
    devices = {str(d) for d in placements[0].values()}
    assert "cpu" in devices and devices & {"0", "cuda:0"}, placements
    agree = total = 0
    for sample in load_calibration(result.path).samples():
        with torch.no_grad():
            out = target_model(input_ids=sample.input_ids[None], output_hidden_states=True)
        expected = torch.cat([out.hidden_states[k][0] for k in result.taps], -1)
        torch.testing.assert_close(sample.aux_hidden_states, expected, rtol=1e-4, atol=1e-4)
        agree += int((sample.target_next_ids == out.logits[0].argmax(-1)).sum())
        total += sample.target_next_ids.numel()
    assert agree / total >= 0.95
