"""`cost` counts MX bytes: 4-bit (or 6-bit) elements packed in bytes plus one E8M0 byte per 32 inputs."""

from __future__ import annotations

import pytest

from eagle3_quant.cost import (
    DraftDims,
    as_bf16,
    checkpoint_cost,
    layer_linear_modules,
    project_scheme,
    step_cost,
)
from eagle3_quant.schemes import SCHEMES

KIMI = DraftDims(hidden_size=7168, num_attention_heads=64, num_key_value_heads=8, head_dim=128,
                 intermediate_size=18432, vocab_size=163840, draft_vocab_size=32000)


def test_mxfp4_projection_counts_half_a_byte_per_weight_and_one_scale_byte_per_32():
    tensors = KIMI.tensors()
    modules = set(layer_linear_modules(tensors))
    weights = {t.name: t for t in tensors if t.name.removesuffix(".weight") in modules}
    elements = sum(t.shape[0] * t.shape[1] for t in weights.values())
    bf16 = step_cost(tensors, "bf16")
    fp8 = step_cost(project_scheme(tensors, "ptpc_fp8"), "fp8")
    mxfp4 = step_cost(project_scheme(tensors, "w_mxfp4_a_mxfp4"), "mxfp4")
    layers = ("attention", "mlp")
    assert sum(mxfp4.bytes_by_part[p] for p in layers) == elements // 2 + elements // 32
    assert sum(fp8.bytes_by_part[p] for p in layers) == elements + 4 * sum(t.shape[0] for t in weights.values())
    assert sum(bf16.bytes_by_part[p] for p in layers) == 2 * elements
    # fc, lm_head, norms unchanged; the FLOPs are the unpacked GEMMs'
    for part in ("fc", "lm_head", "norm", "vocab_map"):
        assert mxfp4.bytes_by_part[part] == bf16.bytes_by_part[part]
    assert mxfp4.flops_per_token == bf16.flops_per_token
    # the static FP8-input variant adds one float32 input scale per linear
    a8 = step_cost(project_scheme(tensors, "w_mxfp4_a_fp8"), "a8")
    assert a8.total_bytes == mxfp4.total_bytes + 4 * len(weights)
    # every registered scheme can be projected (the `--scheme auto` ladder orders them by step bytes)
    order = sorted(SCHEMES, key=lambda s: step_cost(project_scheme(tensors, s), s).total_bytes)
    assert order.index("w_mxfp4_a_mxfp4") < order.index("ptpc_fp8")
    assert as_bf16(project_scheme(tensors, "w_mxfp4_a_mxfp4")) == tensors


@pytest.mark.slow
def test_cost_of_an_mx_artifact_reads_its_packed_headers(tmp_path):
    from eagle3_quant import quantize_draft
    from fixtures.synthetic import write_synthetic_draft

    src = write_synthetic_draft(tmp_path / "src", "tiny")
    out = quantize_draft(src, tmp_path / "out", scheme="w_mxfp4_a_mxfp4", device="cpu").output
    source, written = checkpoint_cost(src), checkpoint_cost(out)
    assert written.bf16 == source.bf16                     # unpacked back to the BF16 draft's bytes and FLOPs
    projected = step_cost(project_scheme(as_bf16(written.tensors), "w_mxfp4_a_mxfp4"), "as written")
    assert written.written.bytes_by_part == projected.bytes_by_part
    assert written.written.flops_per_token == source.bf16.flops_per_token


def test_inspect_estimates_the_packed_output(make_draft):
    from eagle3_quant.inspection import inspect_draft

    src = make_draft()
    fp8, mx4 = inspect_draft(src, "ptpc_fp8"), inspect_draft(src, "w_mxfp4_a_mxfp4")
    assert mx4.estimated_output_bytes < fp8.estimated_output_bytes
    quantized = [row for row in fp8.linears if row.quantize]
    elements = sum(row.shape[0] * row.shape[1] for row in quantized)
    rows = sum(row.shape[0] for row in quantized)
    assert fp8.estimated_output_bytes - mx4.estimated_output_bytes == (
        elements + 4 * rows - elements // 2 - elements // 32)


def test_mxfp6_projection_counts_three_quarters_of_a_byte_per_weight_and_the_scales():
    tensors = KIMI.tensors()
    modules = set(layer_linear_modules(tensors))
    elements = sum(t.shape[0] * t.shape[1] for t in tensors if t.name.removesuffix(".weight") in modules)
    for scheme in ("w_mxfp6_e2m3_a_mxfp6_e2m3", "w_mxfp6_e3m2_a_mxfp6_e3m2"):
        cost = step_cost(project_scheme(tensors, scheme), scheme)
        assert sum(cost.bytes_by_part[p] for p in ("attention", "mlp")) == elements * 3 // 4 + elements // 32
    order = sorted(SCHEMES, key=lambda s: step_cost(project_scheme(tensors, s), s).total_bytes)
    assert order.index("w_mxfp4_a_mxfp4") < order.index("w_mxfp6_e2m3_a_mxfp6_e2m3") < order.index("ptpc_fp8")
