"""`cost`: bytes of one draft step from headers, checked against tensor sizes, real Quark output and the CLI."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from eagle3_quant.cli import main
from eagle3_quant.cost import (
    DraftDims,
    WeightTensor,
    checkpoint_cost,
    dims_cost,
    part_of,
)
from eagle3_quant.devices import DEVICE_PROFILES
from eagle3_quant.errors import SchemeError
from eagle3_quant.reading.safetensors_header import DTYPE_SIZES

# Kimi-K2.5's Eagle3 draft (TorchSpec's template): full-vocabulary lm_head, own embedding, MHA.
KIMI = DraftDims(hidden_size=7168, num_attention_heads=64, num_key_value_heads=64, head_dim=128,
                 intermediate_size=12288, vocab_size=163840, embedding=True)
H, INTER, V, QKV = 7168, 12288, 163840, 64 * 128
KIMI_LINEAR_NUMEL = {"fc": H * 3 * H, "attention": 3 * QKV * 2 * H + H * QKV, "mlp": 3 * INTER * H, "lm_head": V * H}


def write_sparse_safetensors(path: Path, tensors: dict[str, tuple[str, tuple[int, ...]]]) -> None:
    """A valid safetensors file whose data section is a hole: real headers, no bytes written."""
    header, offset = {}, 0
    for name, (dtype, shape) in tensors.items():
        size = math.prod(shape) * DTYPE_SIZES[dtype]
        header[name] = {"dtype": dtype, "shape": list(shape), "data_offsets": [offset, offset + size]}
        offset += size
    raw = json.dumps(header).encode()
    raw += b" " * (-len(raw) % 8)
    with path.open("wb") as fh:
        fh.write(len(raw).to_bytes(8, "little") + raw)
        fh.truncate(8 + len(raw) + offset)


def kimi_config(**extra) -> dict:
    return {"architectures": ["LlamaForCausalLMEagle3"], "model_type": "llama", "hidden_size": H,
            "intermediate_size": INTER, "num_attention_heads": 64, "num_key_value_heads": 64, "head_dim": 128,
            "vocab_size": V, "rms_norm_eps": 1e-6, "rope_theta": 1e6, "max_position_embeddings": 262144,
            "eagle_config": {"eagle_aux_hidden_state_layer_ids": [2, 30, 58], "use_aux_hidden_state": True},
            "torch_dtype": "bfloat16", **extra}


def write_kimi(folder: Path, tensors: list[WeightTensor], **config) -> Path:
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(kimi_config(**config)))
    write_sparse_safetensors(folder / "model.safetensors", {t.name: (t.dtype, t.shape) for t in tensors})
    return folder


@pytest.fixture
def kimi_bf16(tmp_path: Path) -> Path:
    return write_kimi(tmp_path / "kimi", KIMI.tensors())


def test_kimi_bf16_step_bytes_match_tensor_sizes(kimi_bf16: Path):
    cost = checkpoint_cost(kimi_bf16)
    step = cost.bf16.bytes_by_part
    for part, numel in KIMI_LINEAR_NUMEL.items():
        assert step[part] == 2 * numel, part
    assert step["embedding"] == 2 * H          # one gathered row, not the 2.35 GB matrix
    assert step["norm"] == 2 * 4 * H
    assert cost.bf16.total_bytes == 2 * sum(KIMI_LINEAR_NUMEL.values()) + 2 * H + 8 * H
    assert round(cost.bf16.total_bytes / 1e9, 2) == 4.01
    assert cost.bf16.flops_per_token == 2 * sum(KIMI_LINEAR_NUMEL.values())
    assert cost.kv_bytes_per_context_token == 2 * 64 * 128 * 2
    assert cost.attention_flops_per_context_token == 4 * 64 * 128


def test_kimi_ptpc_and_pruned_vocab_ratios(kimi_bf16: Path):
    ptpc = checkpoint_cost(kimi_bf16)
    layer = KIMI_LINEAR_NUMEL["attention"] + KIMI_LINEAR_NUMEL["mlp"]
    rows = 3 * QKV + H + 2 * INTER + H       # output rows of q, k, v, o, gate, up, down: one float32 scale each
    assert ptpc.written.total_bytes == ptpc.bf16.total_bytes - layer + 4 * rows
    assert ptpc.ratio == pytest.approx(0.83, abs=0.005)
    pruned = checkpoint_cost(kimi_bf16, draft_vocab=32000)
    assert pruned.written.bytes_by_part["lm_head"] == 2 * 32000 * H
    assert pruned.written.bytes_by_part["vocab_map"] == 8 * 32000
    assert pruned.ratio <= 0.37
    assert dims_cost(KIMI, quantize=True, draft_vocab=32000).written.total_bytes == pruned.written.total_bytes


def test_kimi_fp8_artifact_as_written(tmp_path: Path):
    """A quantized Kimi-shaped output (FP8 weights + float32 row scales, 32K vocab + d2t) read as written."""
    written = dims_cost(KIMI, quantize=True, draft_vocab=32000).tensors
    out = write_kimi(tmp_path / "kimi-fp8", list(written), draft_vocab_size=32000,
                     quantization_config={"quant_method": "quark"})
    cost = checkpoint_cost(out, device_profile="mi355x")
    full = checkpoint_cost(write_kimi(tmp_path / "kimi", KIMI.tensors()))
    assert cost.written.label == "as written"
    assert cost.written.total_bytes == dims_cost(KIMI, quantize=True, draft_vocab=32000).written.total_bytes
    assert cost.written.total_bytes / full.bf16.total_bytes <= 0.37
    # its own BF16 column: the same pruned draft unquantized (scales dropped, FP8 read back as BF16)
    assert cost.bf16.total_bytes == dims_cost(KIMI, draft_vocab=32000).written.total_bytes
    floors = cost.to_dict()["device_profile"]
    assert floors["written_step_floor_ms"] == pytest.approx(cost.written.total_bytes / 8e12 * 1e3)
    fc = cost.written.bytes_by_part["fc"]
    assert floors["written_cycle_floor_ms"] == pytest.approx((fc + 3 * (cost.written.total_bytes - fc)) / 8e9)


def test_projection_equals_what_quark_writes(quantized_tiny):
    """The PTPC projection of a BF16 source is byte for byte what `quantize` (real Quark) wrote."""
    src, out = quantized_tiny()
    projected, written = checkpoint_cost(src), checkpoint_cost(out)
    assert projected.written.bytes_by_part == written.written.bytes_by_part
    assert projected.bf16.bytes_by_part == written.bf16.bytes_by_part
    assert written.written.label == "as written"


def test_part_of_names():
    assert part_of("midlayer.self_attn.q_proj.weight_scale") == "attention"
    assert part_of("layers.0.mlp.down_proj.weight") == "mlp"
    assert part_of("midlayer.self_attn.q_a_layernorm.weight") == "norm"
    assert part_of("fc_norm.0.weight") == "norm"
    assert part_of("model.embed_tokens.weight") == "embedding"
    assert part_of("t2d") == "vocab_map" and part_of("mask_hidden") == "extra"


def test_refusals(kimi_bf16: Path):
    with pytest.raises(SchemeError, match="163840"):
        checkpoint_cost(kimi_bf16, draft_vocab=200000)
    with pytest.raises(SchemeError, match="mi355x, mi300x, h200"):
        checkpoint_cost(kimi_bf16, device_profile="a100")
    assert set(DEVICE_PROFILES) == {"mi355x", "mi300x", "h200", "h100", "b200"}


def test_cli_json_and_table(kimi_bf16: Path, capsys):
    with pytest.raises(SystemExit) as exit_:
        main(["cost", str(kimi_bf16), "--json", "--device-profile", "h200", "--draft-vocab", "32000"])
    assert exit_.value.code == 0
    data = json.loads(capsys.readouterr().out)
    assert data["written_over_bf16"] <= 0.37
    assert data["device_profile"]["bf16_step_floor_ms"] == pytest.approx(data["bf16"]["total_bytes"] / 4.8e9)
    with pytest.raises(SystemExit) as exit_:
        main(["cost", str(kimi_bf16), "--device-profile", "mi355x"])
    text = capsys.readouterr().out
    assert exit_.value.code == 0
    assert "4.01 GB" in text and "0.832" in text and "MI355X" in text
    with pytest.raises(SystemExit) as exit_:
        main(["cost", str(kimi_bf16), "--device-profile", "tpu"])
    assert exit_.value.code != 0
    assert "valid profiles" in capsys.readouterr().err
