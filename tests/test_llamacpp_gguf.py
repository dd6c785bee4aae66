"""`eagle3-quant gguf` with llama.cpp's own converter and llama-quantize (`make setup-llamacpp`) on the tiny pair:
the file, its manifest, the layers written, the types, llama.cpp's fallbacks, a Quark MXFP4 artifact's blocks carried
bit for bit and an NVFP4 one refused; and the refusals before any conversion (families llama.cpp cannot run, biases,
a target of other sizes, an FP8 artifact, no tools), each one line, exit 2, nothing left behind."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch
from llamacpp_env import needs_llamacpp, run
from safetensors.torch import load_file, save_file
from tiny_pair_fixtures import PAIR

from eagle3_quant.engines.llamacpp.gguf_files import describe_gguf
from eagle3_quant.engines.llamacpp.tools import find_tools
from eagle3_quant.records.manifest import Manifest
from eagle3_quant.records.public_names import recorded_target_path
from fixtures.synthetic import write_synthetic_draft

pytestmark = needs_llamacpp
TARGET = PAIR / "target"
GPT2 = ("--pre-tokenizer", "gpt-2")        # the tiny target's own BPE: llama.cpp's converter knows no hash of it


def gguf(draft: Path, out: Path, *flags: str) -> int:
    return run(["gguf", str(draft), str(out), "--target", str(TARGET), *GPT2, *flags])


def leftovers(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if p.name.startswith("."))


@pytest.fixture(scope="module")
def q8(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("gguf") / "q8"
    assert gguf(PAIR / "draft", out) == 0
    return out


def test_a_q8_0_gguf_feeds_the_trained_layers_and_keeps_fc_and_lm_head(q8):
    record = Manifest.read(q8).gguf
    assert record.file == "draft-Q8_0.gguf" and record.type == "q8_0"
    # the tiny draft names its layers only in eagle_config (SpecForge: outputs 0, 1, 2 = inputs 1, 2, 3), which
    # llama.cpp's converter never reads: alone, it would write [2, L//2, L-3] for the 4-layer target
    assert record.taps["target_layers"] == [1, 2, 3] and record.taps["converter_alone"] == [2, 2, 1]
    written = describe_gguf(find_tools(), q8 / record.file)
    assert written.architecture == "eagle3" and written.arch_field("target_layers") == [1, 2, 3]
    types = written.types
    assert types["fc.weight"] == types["output.weight"] == "bf16" and set(record.kept) == {"fc.weight",
                                                                                          "output.weight"}
    assert {types[f"blk.0.{n}.weight"] for n in ("attn_q", "attn_k", "attn_v", "attn_output", "ffn_gate",
                                                  "ffn_up", "ffn_down")} == {"q8_0"}
    assert record.tensors["blk.0.attn_q.weight"].source == "midlayer.self_attn.q_proj.weight"
    assert record.llama_cpp["build_info"] == find_tools().build.build_info
    assert recorded_target_path(q8) == TARGET.resolve()


def test_llama_quantize_falls_back_where_k_quant_blocks_do_not_divide_and_says_so(tmp_path):
    assert gguf(PAIR / "draft", tmp_path / "q4k", "--type", "q4_k_m", "--quantize-lm-head") == 0
    record = Manifest.read(tmp_path / "q4k").gguf
    # the tiny draft's rows are 128 or 256 wide: Q4_K's super-blocks of 256 fit only some, llama-quantize falls back
    assert record.fallbacks and all("llama-quantize's fallback" in line for line in record.fallbacks)
    assert record.type_of("output.weight") not in (None, "bf16") and "output.weight" not in record.kept
    assert record.type_of("fc.weight") == "bf16"


def test_draft_vocab_prunes_before_converting(tmp_path, tiny_pair):
    assert gguf(PAIR / "draft", tmp_path / "pruned", "--type", "q4_0", "--draft-vocab", "256", "--calib",
                str(tiny_pair.calib)) == 0
    manifest = Manifest.read(tmp_path / "pruned")
    assert manifest.vocab_pruning["draft_vocab"] == 256
    assert manifest.gguf.tensors["output.weight"].shape == [256, 128] and manifest.gguf.tensors["d2t"].shape == [256]


def test_an_unknown_pre_tokenizer_is_refused_naming_the_flag(tmp_path, capsys):
    assert run(["gguf", str(PAIR / "draft"), str(tmp_path / "out"), "--target", str(TARGET)]) == 2
    err = [line for line in capsys.readouterr().err.strip().splitlines() if line.startswith("error:")]
    assert len(err) == 1 and "pre-tokenizer was not recognized" in err[0] and "--pre-tokenizer" in err[0]
    assert str(PAIR / "draft") in err[0] and not (tmp_path / "out").exists() and leftovers(tmp_path) == []


def with_bias(tmp_path: Path) -> Path:
    draft = tmp_path / "biased"
    shutil.copytree(PAIR / "draft", draft)
    tensors = load_file(draft / "model.safetensors")
    tensors["midlayer.self_attn.q_proj.bias"] = torch.zeros(128, dtype=torch.bfloat16)
    save_file(tensors, draft / "model.safetensors")
    return draft


@pytest.mark.parametrize("make, words", [
    (lambda p: write_synthetic_draft(p / "qwen3", "tiny-qwen3"), "qwen3-family Eagle3 draft cannot run in llama.cpp"),
    (lambda p: write_synthetic_draft(p / "mla", "tiny-mla"), "its attention is MLA"),
    (lambda p: write_synthetic_draft(p / "two", "tiny-2aux"), "llama.cpp feeds exactly 3"),
    (with_bias, "has no biases"),
    (lambda p: write_synthetic_draft(p / "small", "tiny"), "hidden size 128"),
])
def test_what_llamacpp_cannot_run_is_refused_before_converting(tmp_path, capsys, make, words):
    draft = make(tmp_path)
    before = {f.name: f.read_bytes() for f in draft.iterdir()}
    assert gguf(draft, tmp_path / "out") == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and words in err[0], err
    assert not (tmp_path / "out").exists() and {f.name: f.read_bytes() for f in draft.iterdir()} == before


def test_an_fp8_artifact_has_no_ggml_block(tmp_path, capsys, tiny_pair):
    assert gguf(tiny_pair.fp8, tmp_path / "out", "--type", "mxfp4") == 2
    assert "ptpc_fp8 artifact: GGML has no block for its weights" in capsys.readouterr().err
    assert gguf(PAIR / "draft", tmp_path / "out", "--type", "nvfp4") == 2
    assert "--type nvfp4 carries a Quark nvfp4 artifact's blocks" in capsys.readouterr().err


def test_no_tools_names_the_make_target(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("EAGLE3_QUANT_LLAMACPP", str(tmp_path / "nowhere"))
    assert gguf(PAIR / "draft", tmp_path / "out") == 2
    err = capsys.readouterr().err
    assert "no llama.cpp tools" in err and "make setup-llamacpp" in err and not (tmp_path / "out").exists()


@pytest.mark.slow
def test_quark_mxfp4_blocks_are_carried_bit_for_bit_and_nvfp4_is_refused(tmp_path, capsys, tiny_pair):
    from eagle3_quant.quantize.api import quantize_draft

    art = quantize_draft(PAIR / "draft", tmp_path / "mx", scheme="w_mxfp4_a_mxfp4", device="cpu").output
    assert gguf(art, tmp_path / "gguf-mx", "--type", "mxfp4") == 0
    record = Manifest.read(tmp_path / "gguf-mx").gguf
    assert record.carried["tensors"] == record.carried["equal"] == 7 and record.carried["max_abs_diff"] == 0.0
    assert {record.type_of(f"blk.0.{n}.weight") for n in ("attn_q", "attn_k", "ffn_down")} == {"mxfp4"}
    assert record.type_of("fc.weight") == "bf16"
    nv = quantize_draft(PAIR / "draft", tmp_path / "nv", scheme="nvfp4", calib=tiny_pair.calib, device="cpu").output
    capsys.readouterr()
    assert gguf(nv, tmp_path / "gguf-nv", "--type", "nvfp4") == 2
    err = capsys.readouterr().err
    assert "weight_scale_2 is" in err and "no per-tensor scale" in err and not (tmp_path / "gguf-nv").exists()
    assert json.loads((nv / "config.json").read_text())["quantization_config"]


def test_a_pipeline_makes_the_gguf_as_a_sixth_stage_and_skips_it_once_present(tmp_path, tiny_pair):
    import yaml

    from eagle3_quant.pipeline import plan_pipeline, run_pipeline

    shutil.copytree(tiny_pair.fp8, tmp_path / "work" / "draft-fp8")
    data = {"pipeline_version": 1, "source": str(PAIR / "draft"), "target": str(TARGET),
            "workdir": str(tmp_path / "work"), "validate": {"kernel": False, "vllm": False, "sglang": False},
            "bench": {"enabled": False}, "push": {"enabled": False},
            "gguf": {"enabled": True, "type": "q4_0", "pre_tokenizer": "gpt-2"}}
    path = tmp_path / "p.yaml"
    path.write_text(yaml.safe_dump(data))
    planned = {s.name: s.status for s in plan_pipeline(path).stages}
    assert list(planned) == ["calibrate", "quantize", "validate", "bench", "push", "gguf"]
    assert planned["gguf"] == "would run"
    first = {s.name: s for s in run_pipeline(path).stages}
    assert first["gguf"].status == "ran" and first["gguf"].detail.startswith("Q4_0 GGUF in "), first["gguf"]
    assert Manifest.read(tmp_path / "work" / "draft-gguf").gguf.type == "q4_0"
    again = {s.name: s for s in run_pipeline(path).stages}
    assert again["gguf"].status == "skipped" and again["gguf"].detail.startswith("present:")
    bad = {**data, "gguf": {"enabled": True, "type": "q3_k"}}
    path.write_text(yaml.safe_dump(bad))
    from eagle3_quant.errors import PipelineSpecError

    with pytest.raises(PipelineSpecError, match="gguf.type.*unknown GGUF type 'q3_k'"):
        plan_pipeline(path)
