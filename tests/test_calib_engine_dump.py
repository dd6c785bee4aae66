"""`calibrate --from-dump` with vLLM's extract_hidden_states files and speculators' hs_{i}.safetensors.

The dumps hold the tiny target's states as vLLM's models return them: id k the input of layer k, id L the last
layer's output before the final norm, stacked in ascending layer order. With vLLM installed (`make setup-vllm`) the
files are written by vLLM 0.33's own code: `basic_cache` (the CacheOnlyAttention layer's cache write),
`extract_from_kv_cache` and `ExampleHiddenStatesConnector._write_tensors` (the connector's disk write); only the
CUDA copy event is a stub (no GPU here). Without vLLM the same two keys are written with safetensors' `save_file`,
exactly as that writer does, and the writer test is skipped."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch
from calib_capture_fixtures import TARGET
from safetensors.torch import save_file

from eagle3_quant.calib.importer import import_calibration
from eagle3_quant.cli import main
from eagle3_quant.errors import CalibrationDataError, TargetMismatchError
from eagle3_quant.records.calibration import load_calibration

L = TARGET.layers
VLLM_IDS = (0, 1, 2, L)          # the tiny draft's taps as vLLM reads them (nested ids as inputs), plus the final
SGLANG_IDS = (1, 2, 3, L)        # ... as SGLang reads them (its trained taps): the `captured` set's
BLOCK = 4


def vllm_writer():
    """vLLM 0.33's own cache write, extraction and file write, or None when vLLM is not installed."""
    # vLLM resolves its platform once per process: importing it without the CPU target caches an unspecified
    # platform, and every later in-process vLLM test in the session then fails to infer a device
    os.environ.setdefault("VLLM_TARGET_DEVICE", "cpu")
    try:
        from vllm.distributed.kv_transfer.kv_connector.v1.example_hidden_states_connector import (
            ExampleHiddenStatesConnector,
            extract_from_kv_cache,
        )
        from vllm.model_executor.models.extract_hidden_states import basic_cache
    except Exception:       # not installed, or its import needs what this machine lacks
        return None
    return basic_cache, extract_from_kv_cache, ExampleHiddenStatesConnector._write_tensors


class CopyDone:
    """Stands in for the torch.cuda.Event the connector waits on before writing (the copy is synchronous here)."""

    def synchronize(self) -> None:
        pass


def engine_states(model, ids: torch.Tensor, layer_ids) -> torch.Tensor:
    """[T, n, H]: hidden_states[k] for k < L, the last layer's output before the final norm for k == L."""
    final = {}
    hook = model.model.layers[-1].register_forward_hook(lambda m, a, out: final.setdefault(
        "x", out[0] if isinstance(out, tuple) else out))
    with torch.no_grad():
        states = model(input_ids=ids[None], output_hidden_states=True).hidden_states
    hook.remove()
    last = len(model.model.layers)
    picked = [final["x"][0] if k == last else states[k][0] for k in sorted(set(layer_ids))]
    return torch.stack(picked, dim=1).contiguous()


def write_request(file: Path, ids: torch.Tensor, states: torch.Tensor, writer) -> None:
    if writer is None:                        # the connector's two keys, as its save_file call writes them
        save_file({"hidden_states": states, "token_ids": ids.clone()}, str(file))
        return
    basic_cache, extract, write = writer
    count = -(-ids.shape[0] // BLOCK)
    blocks = (torch.randperm(2 * count, generator=torch.Generator().manual_seed(count))[:count] + 1).tolist()
    cache = torch.zeros(2 * count + 1, states.shape[1], BLOCK, states.shape[2], dtype=states.dtype)  # 0: null
    slots = (torch.arange(BLOCK)[None] + torch.tensor(blocks)[:, None] * BLOCK).flatten()
    basic_cache(states, cache, slots[: ids.shape[0]])               # the forward pass caches the states
    write({"hidden_states": extract(cache, slots, ids.shape[0]), "token_ids": ids.clone()}, CopyDone(), str(file),
          None)


def write_dump(folder: Path, model, prompts, layer_ids=VLLM_IDS, *, speculators=False, writer=None) -> Path:
    target = folder / "hidden_states" if speculators else folder
    target.mkdir(parents=True, exist_ok=True)
    for n, ids in enumerate(prompts):
        name = f"hs_{n}.safetensors" if speculators else f"cmpl-{n:04x}-0.safetensors"   # vLLM: the request id
        write_request(target / name, ids, engine_states(model, ids, layer_ids), writer)
    return folder


@pytest.fixture(scope="module")
def prompts() -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(3)
    return [torch.randint(0, TARGET.vocab, (n,), generator=g) for n in (9, 14, 5)]


@pytest.fixture(scope="module")
def captured(tiny_target, tiny_draft, chat_jsonl, tmp_path_factory) -> Path:
    from eagle3_quant.calib.api import calibrate_target

    out = tmp_path_factory.mktemp("captured") / "cal"
    calibrate_target(tiny_target, tiny_draft, chat_jsonl, out, num_samples=3, seq_len=40, min_tokens=4,
                     generate_tokens=0, engine="sglang")
    return out


def expected(model, ids: torch.Tensor, taps) -> tuple[torch.Tensor, torch.Tensor]:
    with torch.no_grad():
        out = model(input_ids=ids[None], output_hidden_states=True)
    return torch.cat([out.hidden_states[k][0] for k in taps], -1), out.logits[0].argmax(-1)


def test_vllm_dump_written_by_vllms_own_writer_imports(tiny_target, tiny_draft, target_model, prompts, tmp_path):
    writer = vllm_writer()
    if writer is None:
        pytest.skip("vLLM is not installed (make setup-vllm): its writer cannot run here")
    dump = write_dump(tmp_path / "dump", target_model, prompts, writer=writer)
    result = import_calibration(dump, tiny_draft, tmp_path / "out", target=tiny_target)
    assert result.samples == 3 and result.taps == (0, 1, 2)
    info = result.info.extra
    assert info["format"] == "vllm-hidden-states" and info["dump_layer_ids"] == list(VLLM_IDS)
    assert info["engine"] == "vllm" and "assumed" in info["dump_layer_ids_origin"]
    files = sorted(p.name for p in dump.iterdir())
    for name, sample in zip(files, load_calibration(tmp_path / "out").samples(), strict=True):
        ids = prompts[int(name.split("-")[1], 16)]
        aux, next_ids = expected(target_model, ids, (0, 1, 2))
        assert torch.equal(sample.input_ids, ids)
        torch.testing.assert_close(sample.aux_hidden_states, aux, rtol=0, atol=1e-6)
        assert torch.equal(sample.target_next_ids, next_ids)      # final norm + lm_head == the target's argmax


@pytest.mark.parametrize("speculators", [False, True], ids=["vllm", "speculators"])
def test_dump_at_sglangs_taps_equals_our_capture(captured, tiny_target, tiny_draft, target_model, tmp_path,
                                                 speculators):
    reference = list(load_calibration(captured).select((1, 2, 3)).samples())
    dump = write_dump(tmp_path / "dump", target_model, [s.input_ids for s in reference], SGLANG_IDS,
                      speculators=speculators, writer=vllm_writer())
    result = import_calibration(dump, tiny_draft, tmp_path / "out", target=tiny_target,
                                dump_layer_ids=(L, 3, 2, 1))     # any order: vLLM stores them ascending
    fmt = "speculators" if speculators else "vllm"
    assert result.taps == (1, 2, 3) and result.info.extra["engine"] == "sglang"     # the engine whose taps it holds
    assert result.info.extra["format"] == f"{fmt}-hidden-states" and result.info.source.startswith(fmt)
    for ours, theirs in zip(reference, load_calibration(tmp_path / "out").samples(), strict=True):
        assert torch.equal(ours.input_ids, theirs.input_ids)
        torch.testing.assert_close(ours.aux_hidden_states, theirs.aux_hidden_states, rtol=0, atol=1e-6)
        assert torch.equal(ours.target_next_ids, theirs.target_next_ids)


def test_dump_needs_the_target_and_the_final_layer(tiny_target, tiny_draft, target_model, prompts, tmp_path):
    dump = write_dump(tmp_path / "dump", target_model, prompts[:1], (0, 1, 2))
    with pytest.raises(CalibrationDataError, match="pass --target"):
        import_calibration(dump, tiny_draft, tmp_path / "out")
    with pytest.raises(TargetMismatchError, match=r"stores 3 layer\(s\) per position.*names 4: \[0, 1, 2, 4\]"):
        import_calibration(dump, tiny_draft, tmp_path / "out", target=tiny_target)
    with pytest.raises(TargetMismatchError, match=r"holds no final layer \(id 4\).*add 4 to"):
        import_calibration(dump, tiny_draft, tmp_path / "out", target=tiny_target, dump_layer_ids=(0, 1, 2))
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("layer_ids, message", [
    ((0, 1, 3, L), r"reads hidden_states\[0, 1, 2\].*\[2\] missing"),
    ((0, 1, 2, 9), r"layer id\(s\) \[9\] outside 0\.\.4"),
])
def test_dump_layer_ids_are_checked_against_the_taps_and_the_target(tiny_target, tiny_draft, target_model, prompts,
                                                                    tmp_path, layer_ids, message):
    dump = write_dump(tmp_path / "dump", target_model, prompts[:1])
    with pytest.raises(TargetMismatchError, match=message):
        import_calibration(dump, tiny_draft, tmp_path / "out", target=tiny_target, engine="vllm",
                           dump_layer_ids=layer_ids)


def write_raw(folder: Path, name: str = "req-0.safetensors", **tensors) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    save_file(tensors, str(folder / name))
    return folder


def states(t: int = 6, n: int = 4, hidden: int = TARGET.hidden) -> torch.Tensor:
    return torch.randn(t, n, hidden)


@pytest.mark.parametrize("tensors, error, message", [
    ({"hidden_states": states(), "token_ids": torch.arange(5)}, CalibrationDataError,
     r"req-0\.safetensors: field 'hidden_states': hidden_states hold 6 positions, token_ids 5"),
    ({"hidden_states": states(hidden=48), "token_ids": torch.arange(6)}, TargetMismatchError,
     r"hidden_states are 48 wide, the draft expects target hidden size 64"),
    ({"hidden_states": states()[:, :, :], "token_ids": torch.arange(6) + TARGET.vocab - 3}, TargetMismatchError,
     r"token_ids has ids outside the target vocab 0\.\.511"),
    ({"hidden_states": states().flatten(1), "token_ids": torch.arange(6)}, CalibrationDataError,
     r"hidden_states must be a float \[seq, layers, hidden\] tensor"),
    ({"hidden_states": states(), "token_ids": torch.arange(6).float()}, CalibrationDataError,
     "token_ids must be an integer vector"),
])
def test_bad_files_name_the_file_and_field(tiny_target, tiny_draft, tmp_path, tensors, error, message):
    dump = write_raw(tmp_path / "dump", **tensors)
    with pytest.raises(error, match=message):
        import_calibration(dump, tiny_draft, tmp_path / "out", target=tiny_target, format="vllm")
    assert not (tmp_path / "out").exists() and not list(tmp_path.glob(".out*"))


def test_non_finite_states_are_refused(tiny_target, tiny_draft, tmp_path):
    bad = states()
    bad[3, 1, 5] = float("nan")
    dump = write_raw(tmp_path / "dump", hidden_states=bad, token_ids=torch.arange(6))
    with pytest.raises(CalibrationDataError,
                       match=r"req-0\.safetensors: field 'hidden_states': hidden_states hold 1 NaN/Inf"):
        import_calibration(dump, tiny_draft, tmp_path / "out", target=tiny_target)
    assert not (tmp_path / "out").exists()


def test_a_file_with_other_keys_and_an_empty_folder(tiny_target, tiny_draft, tmp_path):
    dump = write_raw(tmp_path / "dump", hidden_states=states(), input_ids=torch.arange(6))
    with pytest.raises(CalibrationDataError, match="neither a calibration set"):      # auto: not an engine file
        import_calibration(dump, tiny_draft, tmp_path / "out", target=tiny_target)
    with pytest.raises(CalibrationDataError, match=r"has no 'token_ids' \(keys: hidden_states, input_ids\)"):
        import_calibration(dump, tiny_draft, tmp_path / "out", target=tiny_target, format="vllm")
    (tmp_path / "empty").mkdir()
    with pytest.raises(CalibrationDataError, match=r"holds no hs_\{i\}\.safetensors files \(speculators format\)"):
        import_calibration(tmp_path / "empty", tiny_draft, tmp_path / "out", target=tiny_target, format="speculators")
    with pytest.raises(CalibrationDataError, match="'parquet' is not one of auto, calibration"):
        import_calibration(dump, tiny_draft, tmp_path / "out", format="parquet")


def test_cli_imports_a_vllm_dump(tiny_target, tiny_draft, target_model, prompts, tmp_path, capsys):
    dump = write_dump(tmp_path / "dump", target_model, prompts)
    with pytest.raises(SystemExit) as code:
        main(["calibrate", str(tmp_path / "out"), "--draft", str(tiny_draft), "--target", str(tiny_target),
              "--from-dump", str(dump), "--format", "vllm", "--dump-layer-ids", "0,1,2,4"])
    assert code.value.code == 0 and "3 samples" in capsys.readouterr().out
    with pytest.raises(SystemExit) as code:
        main(["calibrate", str(tmp_path / "o2"), "--draft", str(tiny_draft), "--target", str(tiny_target),
              "--from-dump", str(dump), "--dump-layer-ids", "0,1,2"])
    err = capsys.readouterr().err
    assert code.value.code == 2 and "stores 4 layer(s) per position" in err and err.count("\n") == 1
