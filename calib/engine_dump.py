"""Read the hidden states a serving engine exports: vLLM's ``extract_hidden_states`` and speculators' data generation.

vLLM (>= 0.18; read in 0.33): the speculative method ``extract_hidden_states`` with the ``ExampleHiddenStatesConnector``
(``distributed/kv_transfer/kv_connector/v1/example_hidden_states_connector.py``) writes one safetensors file per
request, ``{shared_storage_path}/{request_id}.safetensors`` (and a ``.lock`` companion while it writes), with two keys:
``hidden_states`` [seq, n, H] in the model dtype and ``token_ids`` int64 [seq] (the prompt; with the request's
``kv_transfer_params.include_output_tokens`` the prompt and the generated tokens but the last, whose state was never
computed). ``n`` is ``len(eagle_aux_hidden_state_layer_ids)`` of the speculative config. The states are stacked in
ascending layer order, whatever the order of the ids (the model appends them as it walks its layers, a repeated id
once); id k is the input of decoder layer k (``hidden_states + residual``, transformers' ``hidden_states[k]``), and
id L (the layer count) the output of the last layer *before* the final norm. Only tensor-parallel rank 0 writes,
after the states are all-gathered, so every file holds the full hidden width.

speculators (0.9, ``speculators generate-offline-data``): the same files from the same connector, moved to
``{output}/hs_{i}.safetensors`` (i: the row of its preprocessed dataset; default output
``{preprocessed_data}/hidden_states``). Its vLLM launcher appends the final layer id; its trainer reads
``hidden_states[:, :-1]`` as the draft's taps and ``hidden_states[:, -1]`` as the verifier's last state, which it
normalises with the verifier's final norm and projects with its lm_head.

Neither records the layer ids nor the target's predictions: the ids are given (``dump_layer_ids``) or taken as the
draft's taps as the engine reads them plus the final layer, and the next tokens are the target's final norm and
lm_head applied to the final layer's state (`final_norm.py`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

import torch
from safetensors import safe_open

from eagle3_quant.calib.dump_formats import DumpFormat
from eagle3_quant.errors import CalibrationDataError, CheckpointFileError, TargetMismatchError
from eagle3_quant.reading.safetensors_header import read_header
from eagle3_quant.records.sample_limits import check_declared_bytes, check_finite, header_bytes

KEYS = frozenset({"hidden_states", "token_ids"})
SPECULATORS_PATTERN = re.compile(r"^hs_(\d+)\.safetensors$")



@dataclass(frozen=True)
class EngineRecord:
    token_ids: torch.Tensor       # int64 [T]
    hidden_states: torch.Tensor   # [T, n, H], ascending layer order


def speculators_files(folder: Path) -> list[Path]:
    """hs_{i}.safetensors in FOLDER or FOLDER/hidden_states (speculators' default output), ordered by i."""
    for where in (folder, folder / "hidden_states"):
        found = [p for p in where.glob("hs_*.safetensors") if SPECULATORS_PATTERN.match(p.name)]
        if found:
            return sorted(found, key=lambda p: int(SPECULATORS_PATTERN.match(p.name).group(1)))
    return []


def _keys(file: Path) -> set[str] | None:
    try:
        with safe_open(str(file), framework="pt") as fh:
            return set(fh.keys())
    except Exception:     # safetensors' own error types: not a safetensors file, truncated, bad header
        return None


def vllm_files(folder: Path) -> list[Path]:
    """The *.safetensors files of FOLDER (vLLM names them by request id, in no order: sorted by name)."""
    return sorted(p for p in folder.glob("*.safetensors") if p.is_file()) if folder.is_dir() else []


def detect_engine_dump(folder: Path) -> tuple[DumpFormat, list[Path]] | None:
    """speculators' hs_{i} files, else vLLM's files when the first holds exactly hidden_states and token_ids."""
    files = speculators_files(folder)
    if files:
        return DumpFormat.speculators, files
    files = vllm_files(folder)
    if files and _keys(files[0]) == KEYS:
        return DumpFormat.vllm, files
    return None


def engine_files(folder: Path, fmt: DumpFormat) -> list[Path]:
    files = speculators_files(folder) if fmt is DumpFormat.speculators else vllm_files(folder)
    if not files:
        expected = "hs_{i}.safetensors files" if fmt is DumpFormat.speculators else "*.safetensors files"
        raise CalibrationDataError(f"holds no {expected} ({fmt.value} format)", path=folder)
    return files


def read_engine_record(file: Path) -> EngineRecord:
    """One request's file, checked: the two keys, token_ids an integer vector, hidden_states [T, n, H] float and
    finite; its header read first, and what it declares bounded (`sample_limits`), before a tensor is read."""
    try:
        header = read_header(file)
    except CheckpointFileError as exc:
        raise CalibrationDataError(f"cannot read as a safetensors file ({exc.message})", path=file,
                                   tensor=exc.tensor) from None
    check_declared_bytes(header_bytes(header, KEYS), file, CalibrationDataError)
    try:
        with safe_open(str(file), framework="pt") as fh:
            keys = set(fh.keys())
            missing = sorted(KEYS - keys)
            if missing:
                raise CalibrationDataError(f"has no {missing[0]!r} (keys: {', '.join(sorted(keys)) or 'none'}); "
                                           "not an extract_hidden_states file", path=file, field=missing[0])
            ids, states = fh.get_tensor("token_ids"), fh.get_tensor("hidden_states")
    except CalibrationDataError:
        raise
    except Exception as exc:      # safetensors' own error types: truncated, malformed header
        text = str(exc).strip().splitlines()
        raise CalibrationDataError(f"cannot read as a safetensors file ({text[0] if text else type(exc).__name__})",
                                   path=file) from exc
    if ids.dim() != 1 or ids.dtype.is_floating_point or ids.dtype == torch.bool:
        raise CalibrationDataError(f"token_ids must be an integer vector, got {ids.dtype} {tuple(ids.shape)}",
                                   path=file, field="token_ids")
    if states.dim() != 3 or not states.dtype.is_floating_point:
        raise CalibrationDataError(f"hidden_states must be a float [seq, layers, hidden] tensor, got {states.dtype} "
                                   f"{tuple(states.shape)}", path=file, field="hidden_states")
    if states.shape[0] != ids.shape[0] or ids.shape[0] == 0:
        raise CalibrationDataError(f"hidden_states hold {states.shape[0]} positions, token_ids {ids.shape[0]}",
                                   path=file, field="hidden_states")
    check_finite({"hidden_states": states}, file, CalibrationDataError)
    return EngineRecord(ids.to(torch.int64), states)


@dataclass(frozen=True)
class DumpLayout:
    """Where each wanted hidden_states index sits along a dump's layer axis."""

    layer_ids: tuple[int, ...]     # the dump's ids, ascending and unique, as stored
    origin: str                    # in words: given, or assumed from the draft's taps

    def position(self, index: int) -> int:
        return self.layer_ids.index(index)


def dump_layout(taps: tuple[int, ...], num_layers: int, given: tuple[int, ...] | None, stored: int,
                where: Path) -> DumpLayout:
    """The dump's layer ids: `given` (the engine's eagle_aux_hidden_state_layer_ids), else the draft's taps plus
    the final layer. Checked: as many as stored, within 0..num_layers, holding the taps and the final layer."""
    if given is not None:
        ids, origin = tuple(sorted(set(given))), "dump_layer_ids"
    else:
        ids, origin = tuple(sorted({*taps, num_layers})), "the draft's taps plus the final layer (assumed)"
    if len(ids) != stored:
        raise TargetMismatchError(
            f"the dump stores {stored} layer(s) per position, {origin} names {len(ids)}: {list(ids)}", path=where,
            field="hidden_states", hint="pass --dump-layer-ids with the eagle_aux_hidden_state_layer_ids the engine "
                                        "ran with")
    outside = [i for i in ids if not 0 <= i <= num_layers]
    if outside:
        raise TargetMismatchError(f"layer id(s) {outside} outside 0..{num_layers} for a {num_layers}-layer target",
                                  path=where, field="dump_layer_ids")
    absent = [i for i in taps if i not in ids]
    if absent:
        raise TargetMismatchError(f"the draft reads hidden_states{list(taps)}, the dump holds hidden_states{list(ids)} "
                                  f"({origin}): {absent} missing", path=where, field="dump_layer_ids",
                                  hint="check --engine / --tap-convention, or --dump-layer-ids")
    if num_layers not in ids:
        raise TargetMismatchError(
            f"the dump holds no final layer (id {num_layers}), whose state gives the target's next tokens",
            path=where, field="dump_layer_ids", hint=f"add {num_layers} to eagle_aux_hidden_state_layer_ids when "
                                                     "extracting")
    return DumpLayout(ids, origin)
