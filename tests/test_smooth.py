"""`quantize --smooth-alpha` (quantize/smooth.py): power-of-two SmoothQuant scales folded into the BF16 draft
leave what it computes unchanged, move each FP8 input site's channels as SmoothQuant's formula says, and are
refused where they cannot apply. The measured acceptance on the tiny MLA pair is in tests/test_tiny_mla_pair.py."""

from __future__ import annotations

import pytest
import torch
from safetensors.torch import load_file

from eagle3_quant.errors import OptionsError, SchemeError
from eagle3_quant.runtime.loading import load_draft
from fixtures.synthetic import write_synthetic_draft
from quantize.options import QuantizeOptions
from quantize.smooth import SCALE_LOG2_LIMIT, site_scale, smooth_sites, smoothed_tensors


def _random_scales(draft, sites, seed: int = 0) -> dict[str, torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    scales = {}
    for site in sites:
        width = draft.layer.get_submodule(site.readers[0]).in_features
        scales[site.name] = torch.exp2(torch.randint(-4, 5, (width,), generator=gen).float())
    return scales


@pytest.mark.parametrize("shape", ["tiny", "tiny-mla", "tiny-mla-no-qlora"])
def test_folded_power_of_two_scales_leave_the_bf16_draft_bit_identical(tmp_path, shape):
    folder = write_synthetic_draft(tmp_path / "src", shape)
    draft = load_draft(folder, "cpu", torch.float32, embedding=torch.randn(512, 64) * 0.02)
    sites = smooth_sites(draft)
    names = {s.name for s in sites}
    assert names == ({"qkv", "gate_up_proj", "down_proj"} | ({"o_proj"} if "mla" in shape else set())
                     | ({"q_b_proj"} if shape == "tiny-mla" else set()))
    tensors = load_file(folder / "model.safetensors")
    before = {n: t.clone() for n, t in tensors.items()}
    smoothed = smoothed_tensors(tensors, draft.spec.layer_prefix, draft, sites, _random_scales(draft, sites))
    assert all(torch.equal(tensors[n], before[n]) for n in tensors)            # the input is not modified
    changed = {n for n in tensors if not torch.equal(smoothed[n], tensors[n])}
    assert "midlayer.mlp.down_proj.weight" in changed and "midlayer.post_attention_layernorm.weight" in changed
    assert {smoothed[n].dtype for n in smoothed} == {tensors[n].dtype for n in tensors}

    out = tmp_path / "smoothed"
    out.mkdir()
    from safetensors.torch import save_file

    save_file(smoothed, out / "model.safetensors")
    (out / "config.json").write_text((folder / "config.json").read_text())
    emb = draft.embedding_weight
    other = load_draft(out, "cpu", torch.float32, embedding=emb)
    gen = torch.Generator().manual_seed(1)
    ids = torch.randint(0, 512, (2, 16), generator=gen)
    aux = torch.randn(2, 16, 3 * 64, generator=gen)
    with torch.no_grad():
        expected, got = draft.propose_all(ids, aux, 3, return_logits=True), other.propose_all(ids, aux, 3,
                                                                                                return_logits=True)
    torch.testing.assert_close(got.logits, expected.logits, rtol=1e-5, atol=1e-6)
    assert torch.equal(got.target_ids, expected.target_ids)


def test_site_scale_follows_smoothquant_and_is_a_centred_power_of_two():
    x = torch.tensor([1.0, 4.0, 64.0, 0.0])
    w = torch.tensor([[1.0, 1.0, 1.0, 1.0], [0.5, 0.25, 1.0, 2.0]])
    s = site_scale(x, [w], alpha=0.5)
    # raw s = sqrt(amax x) / sqrt(amax w) = [1, 2, 8, -] -> log2 [0, 1, 3], median 1 -> [-1, 0, 2]; no input -> 1
    assert s.tolist() == [0.5, 1.0, 4.0, 1.0]
    assert torch.equal(site_scale(x, [w], alpha=0.0), torch.ones(4))       # alpha 0 with unit weights: nothing
    big = site_scale(torch.tensor([1.0, 2.0 ** 40, 1.0]), [torch.ones(1, 3)], alpha=1.0)
    assert big.tolist() == [1.0, 2.0 ** SCALE_LOG2_LIMIT, 1.0]


def test_smooth_alpha_is_checked_with_the_other_options(tmp_path):
    with pytest.raises(SchemeError, match="--calib"):
        QuantizeOptions(smooth_alpha=0.5)
    with pytest.raises(OptionsError, match=r"\[0, 1\]"):
        QuantizeOptions(smooth_alpha=1.5, calib=tmp_path)
    with pytest.raises(SchemeError, match="FP8 and INT8 schemes .*drop scheme w_mxfp4"):
        QuantizeOptions(smooth_alpha=0.5, calib=tmp_path, scheme="w_mxfp4_a_mxfp4", engine="vllm")
    with pytest.raises(SchemeError, match="smooth-alpha"):
        QuantizeOptions(scheme="auto", smooth_alpha=0.5, calib=tmp_path)
    assert QuantizeOptions(smooth_alpha=0.5, calib=tmp_path).smooth_alpha == 0.5
