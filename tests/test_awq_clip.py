"""AWQ's clip search as matmuls (quantize/awq_clip.py) picks the bounds Quark's own ``_compute_best_clip`` picks:
the same tokens, grid and fake-quantizer, on linears with outlier input channels, for each INT4 group size, with few
rows (Quark keeps every row below 512) and with the outputs split into batches.

The two sum a group's products in different orders, so a group whose two best grid points are within float rounding
may pick either on another CPU or thread count: every group agreed here, and at least 99% must anywhere."""

from __future__ import annotations

import pytest
import torch

from eagle3_quant.quantize import awq_clip
from eagle3_quant.quantize.awq import _attach_quantizers, _quark_processor
from eagle3_quant.quantize.quark_import import import_quark
from eagle3_quant.schemes import get_scheme, resolve_group

pytestmark = pytest.mark.slow


class Layer(torch.nn.Module):
    def __init__(self, outputs: int, inputs: int) -> None:
        super().__init__()
        self.proj = torch.nn.Linear(inputs, outputs, bias=False)


def _case(outputs: int, inputs: int, rows: int, group: int, seed: int):
    import_quark()
    generator = torch.Generator().manual_seed(seed)
    layer = Layer(outputs, inputs)
    with torch.no_grad():
        layer.proj.weight.copy_(torch.randn(outputs, inputs, generator=generator) * 0.05)
    draft = type("Draft", (), {"layer": layer})()
    scheme = resolve_group(get_scheme("w4a16_int4"), [inputs])
    assert scheme.weight.group_size == group
    _attach_quantizers(draft, ["proj"], scheme)
    scale = 1 + 20 * (torch.rand(inputs, generator=generator) > 0.97)        # a few outlier channels
    return layer.proj, torch.randn(rows, inputs, generator=generator) * scale


def _agreeing(a: torch.Tensor, b: torch.Tensor) -> float:
    """The share of groups whose bounds are equal."""
    return float((a == b).float().mean())


@pytest.mark.parametrize(("outputs", "inputs", "rows", "group"), [
    (384, 512, 4096, 128),     # 512 of 4096 rows, every 8th
    (256, 192, 300, 64),       # fewer rows than 512: all of them
    (320, 96, 1000, 32),       # 1000 rows: Quark's stride is 1, so all 1000
])
def test_matmul_clip_equals_quarks(outputs, inputs, rows, group):
    from quark.torch.algorithm.awq.awq import AwqProcessor

    linear, feat = _case(outputs, inputs, rows, group, seed=outputs + rows)
    processor = _quark_processor()
    quarks = AwqProcessor._compute_best_clip(processor, linear, feat)
    ours = processor._compute_best_clip(linear, feat)
    assert ours.shape == quarks.shape == (outputs, inputs // group, 1)
    assert _agreeing(ours, quarks) >= 0.99
    clipped = ours < linear.weight.reshape(outputs, -1, group).abs().amax(-1, keepdim=True)
    assert 0 < clipped.float().mean() < 1        # the search moved some bounds and kept others


def test_output_batches_give_the_same_bounds(monkeypatch):
    linear, feat = _case(384, 512, 4096, 128, seed=7)
    processor = _quark_processor()
    whole = processor._compute_best_clip(linear, feat)
    monkeypatch.setattr(awq_clip, "OUTPUT_ELEMENTS", 100 * 512 * 4)     # 100 outputs a batch: 4 batches, one short
    assert _agreeing(processor._compute_best_clip(linear, feat), whole) >= 0.99
