"""Loading drafts into the runtime: three formats, shards, embeddings, FP8 checkpoints, strictness."""

from __future__ import annotations

import json

import pytest
import torch
from draft_variants import write_fp8_checkpoint
from safetensors.torch import load_file, save_file

from eagle3_quant import load_draft
from eagle3_quant.errors import DraftFormatError
from eagle3_quant.reading.formats import DraftFormat
from eagle3_quant.runtime.fp8_linear import Fp8Linear

T = 10


def _batch(vocab: int = 512, target_hidden: int = 64, seed: int = 0):
    gen = torch.Generator().manual_seed(seed)
    return (torch.randint(0, vocab, (2, T), generator=gen), torch.randn(2, T, 3 * target_hidden, generator=gen),
            torch.randn(vocab, 64, generator=gen))


def test_three_formats_and_shards_give_identical_logits(make_draft):
    ids, aux, emb = _batch()
    outputs = {}
    for fmt in DraftFormat:
        for shards in (1, 3):
            draft = load_draft(make_draft(fmt, shards=shards, name=f"{fmt.value}-{shards}"), dtype=torch.float32,
                               embedding=emb)
            outputs[(fmt, shards)] = draft(ids, aux)[0]
    # same weights under other names; EAGLE's config has another rope_theta and fp16 weights
    reference = outputs[(DraftFormat.SPECFORGE, 1)]
    for fmt, shards in [(DraftFormat.SPECFORGE, 3), (DraftFormat.SPECULATORS, 1), (DraftFormat.SPECULATORS, 3)]:
        assert torch.equal(outputs[(fmt, shards)], reference), (fmt, shards)
    assert torch.equal(outputs[(DraftFormat.EAGLE, 1)], outputs[(DraftFormat.EAGLE, 3)])


def test_dtype_defaults_to_config_and_state_dict_is_the_checkpoint(make_draft):
    src = make_draft(DraftFormat.SPECULATORS)
    draft = load_draft(src)
    assert draft.dtype == torch.bfloat16
    stored = load_file(src / "model.safetensors")
    state = draft.state_dict()
    assert set(state) == set(stored)
    for name, tensor in stored.items():
        assert torch.equal(state[name], tensor), name
    assert load_draft(make_draft(DraftFormat.EAGLE, name="eagle")).dtype == torch.float16


def test_to_target_ids_uses_d2t(make_draft):
    src = make_draft()
    draft = load_draft(src)
    d2t = load_file(src / "model.safetensors")["d2t"]
    ids = torch.tensor([[0, 5, 255]])
    assert torch.equal(draft.to_target_ids(ids), ids + d2t[ids])
    t2d = load_file(src / "model.safetensors")["t2d"]
    assert bool(t2d[draft.to_target_ids(torch.arange(256))].all())


def test_embedding_from_target_folder(tmp_path, make_draft):
    ids, aux, emb = _batch()
    target = tmp_path / "target"
    target.mkdir()
    other = torch.randn(8, 8)
    save_file({"model.embed_tokens.weight": emb}, target / "model-00001-of-00002.safetensors")
    save_file({"model.norm.weight": other[0]}, target / "model-00002-of-00002.safetensors")
    index = {"weight_map": {"model.embed_tokens.weight": "model-00001-of-00002.safetensors",
                            "model.norm.weight": "model-00002-of-00002.safetensors"}}
    (target / "model.safetensors.index.json").write_text(json.dumps(index))
    src = make_draft()
    from_folder = load_draft(src, dtype=torch.float32, embedding=target)
    from_tensor = load_draft(src, dtype=torch.float32, embedding=emb)
    assert torch.equal(from_folder(ids, aux)[0], from_tensor(ids, aux)[0])
    assert "embed_tokens.weight" not in from_folder.state_dict()   # borrowed, never saved with the draft


def test_missing_embedding_is_one_clear_error(make_draft):
    ids, aux, _ = _batch()
    draft = load_draft(make_draft())
    with pytest.raises(DraftFormatError, match="no embedding.*embedding="):
        draft(ids, aux)
    with pytest.raises(DraftFormatError, match="embedding shape"):
        draft.set_embedding(torch.zeros(10, 64))


def test_wrong_aux_width_is_refused(make_draft):
    ids, _, emb = _batch()
    draft = load_draft(make_draft(), embedding=emb)
    with pytest.raises(DraftFormatError, match="3 x target hidden = 192"):
        draft(ids, torch.zeros(2, T, 64))


def test_unknown_and_missing_tensors_are_refused(make_draft):
    src = make_draft()
    tensors = load_file(src / "model.safetensors")
    save_file({**tensors, "midlayer.mystery.weight": torch.zeros(4)}, src / "model.safetensors")
    with pytest.raises(DraftFormatError, match="midlayer.mystery.weight"):
        load_draft(src)
    del tensors["midlayer.mlp.up_proj.weight"]
    save_file(tensors, src / "model.safetensors")
    with pytest.raises(DraftFormatError, match="midlayer.mlp.up_proj.weight"):
        load_draft(src)


@pytest.mark.parametrize("static,per_tensor", [(False, False), (True, True), (True, False)])
def test_fp8_checkpoint_scaled_mm_equals_dequantized_reference(tmp_path, make_draft, static, per_tensor):
    ids, aux, emb = _batch()
    src = make_draft()
    out = write_fp8_checkpoint(src, tmp_path / "fp8", static, per_tensor)
    fast = load_draft(out, embedding=emb)
    ref = load_draft(out, embedding=emb, fp8_mode="dequant")
    quantized = [m for m in fast.modules() if isinstance(m, Fp8Linear)]
    assert len(quantized) == 7 and all(m.mode == "scaled_mm" for m in quantized)
    assert all((m.input_scale is not None) == static for m in quantized)
    with torch.no_grad():
        a, b = fast(ids, aux)[0], ref(ids, aux)[0]
        base = load_draft(src, embedding=emb)(ids, aux)[0]
    assert torch.equal(a, b)
    agreement = (a.argmax(-1) == base.argmax(-1)).float().mean().item()
    assert agreement >= 0.7      # FP8 error, not garbage: random drafts have near-tied logits


def test_fused_shards_share_scales_as_vllm_fuses_them(tmp_path, make_draft):
    out = write_fp8_checkpoint(make_draft(), tmp_path / "fp8", static=True, per_tensor=True)
    draft = load_draft(out)
    stored = load_file(out / "model.safetensors")
    attn = draft.layer.self_attn
    scales = [stored[f"midlayer.self_attn.{r}_proj.input_scale"] for r in "qkv"]
    top = torch.stack(scales).max()
    for proj in (attn.q_proj, attn.k_proj, attn.v_proj):
        assert proj.input_scale.item() == top.item()
        assert proj.weight_scale.item() == max(stored[f"midlayer.self_attn.{r}_proj.weight_scale"].item()
                                               for r in "qkv")
    assert attn.o_proj.input_scale.item() == stored["midlayer.self_attn.o_proj.input_scale"].item()


def test_half_quantized_fused_group_is_refused(tmp_path, make_draft):
    src = make_draft()
    out = write_fp8_checkpoint(src, tmp_path / "fp8", static=False, per_tensor=False)
    tensors = load_file(out / "model.safetensors")
    tensors["midlayer.self_attn.k_proj.weight"] = load_file(src / "model.safetensors")[
        "midlayer.self_attn.k_proj.weight"]
    del tensors["midlayer.self_attn.k_proj.weight_scale"]
    save_file(tensors, out / "model.safetensors")
    with pytest.raises(DraftFormatError, match="must all be FP8"):
        load_draft(out)


def test_static_config_without_input_scale_is_refused(tmp_path, make_draft):
    out = write_fp8_checkpoint(make_draft(), tmp_path / "fp8", static=False, per_tensor=True)
    config = json.loads((out / "config.json").read_text())
    config["quantization_config"]["global_quant_config"]["input_tensors"]["is_dynamic"] = False
    (out / "config.json").write_text(json.dumps(config))
    with pytest.raises(DraftFormatError, match="input_scale"):
        load_draft(out)


@pytest.mark.slow
def test_loads_this_projects_ptpc_output(quantized_tiny):
    src, out = quantized_tiny(DraftFormat.SPECFORGE)
    ids, aux, emb = _batch()
    draft = load_draft(out, embedding=emb)
    quantized = {n for n, m in draft.named_modules() if isinstance(m, Fp8Linear)}
    assert quantized == {f"midlayer.{p}" for p in ("self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj",
                                                    "self_attn.o_proj", "mlp.gate_proj", "mlp.up_proj",
                                                    "mlp.down_proj")}
    with torch.no_grad():
        a = draft(ids, aux)[0]
        draft.set_fp8_mode("dequant")
        assert torch.equal(a, draft(ids, aux)[0])
        base = load_draft(src, embedding=emb)(ids, aux)[0]
    assert (a.argmax(-1) == base.argmax(-1)).float().mean().item() >= 0.7
