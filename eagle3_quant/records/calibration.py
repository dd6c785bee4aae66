"""The on-disk calibration set: what the draft really receives from its target.

Folder layout::

    CAL/calib.json                 index: format, version, info, shards, complete (written after each shard)
    CAL/shard-00000.safetensors    per sample i: input_ids.{i} int64 [T],
                                   aux_hidden_states.{i} bf16/fp16/fp32 [T, n*H_target] (n stored layers),
                                   target_next_ids.{i} int64 [T]

Alignment (the Eagle3 convention vLLM uses): ``aux_hidden_states[t]`` are the target's hidden states at
position t (after reading tokens 0..t) at the draft's three layer taps, concatenated low/mid/high;
``target_next_ids[t]`` is the target's greedy (argmax) prediction for position t+1. A draft step at
position t reads ``aux_hidden_states[t]`` and the embedding of ``input_ids[t+1]`` and predicts the token
at t+2, to be compared with ``target_next_ids[t+1]``. ``generated_from`` (or None) is the index in
``input_ids`` of the first token the target generated itself (the prompt length): from there on the
sample is the target's own greedy continuation, ``input_ids[t+1] == target_next_ids[t]`` for every
``t >= generated_from - 1``.

``info.aux_layer_ids`` are transformers ``output_hidden_states`` indices: k is the input of decoder layer k
(0 = the embeddings), the count EAGLE, vLLM and speculators use. A set may store more layers than the draft
reads (`calibrate` captures the union of the candidate tap sets, ``info.extra.tap_candidates``): `select`
gives the set as a draft fed one candidate reads it.

Each shard is written to a temporary name and renamed, then the index is replaced atomically, so a killed
writer leaves an index that lists only whole shards. A writer opened with ``mark_incomplete=True`` (what
``calibrate`` does) writes ``complete: false`` until ``close()``; ``load_calibration`` refuses an incomplete set
unless asked. An index without the key is complete.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

import torch
from safetensors import safe_open
from safetensors.torch import save_file

from eagle3_quant.errors import CheckpointFileError, DraftFormatError
from eagle3_quant.reading.limits import load_json_file
from eagle3_quant.reading.safetensors_header import SafetensorsHeader, read_header
from eagle3_quant.records.calibration_index import check_shards, shard_path
from eagle3_quant.records.sample_limits import check_declared_bytes, check_finite, header_bytes
from eagle3_quant.util.hashing import sha256_file

CALIB_FORMAT = "eagle3-quant-calibration"
CALIB_VERSION = 1
INDEX_NAME = "calib.json"
STATE_DTYPES = {"bfloat16": torch.bfloat16, "float16": torch.float16, "float32": torch.float32}


@dataclass(frozen=True)
class CalibrationInfo:
    target: str                       # target model path or repo id
    aux_layer_ids: tuple[int, ...]    # hidden_states indices: "input of layer k" (0 = embeddings)
    target_hidden_size: int
    dtype: str = "bfloat16"
    source: str = ""                  # dataset or engine that produced the prompts / states
    extra: dict = field(default_factory=dict)

    def differences(self, other: CalibrationInfo) -> list[str]:
        """Names of the fields (``extra.KEY`` for options) whose values differ."""
        mine, theirs = _jsonable(asdict(self)), _jsonable(asdict(other))
        diffs = [k for k in mine if k != "extra" and mine[k] != theirs[k]]
        keys = sorted(set(mine["extra"]) | set(theirs["extra"]))
        return diffs + [f"extra.{k}" for k in keys if mine["extra"].get(k) != theirs["extra"].get(k)]


@dataclass(frozen=True)
class CalibrationSample:
    input_ids: torch.Tensor          # int64 [T]
    aux_hidden_states: torch.Tensor  # [T, n*H_target], n = len(info.aux_layer_ids) (3 for most drafts)
    target_next_ids: torch.Tensor    # int64 [T]
    generated_from: int | None = None

    def check(self, hidden_size: int, where: str, num_states: int = 3) -> None:
        """Shapes and dtypes as the format says; the error names the sample."""
        t = self.input_ids.shape[0] if self.input_ids.dim() == 1 else -1
        problems = []
        if self.input_ids.dim() != 1 or self.input_ids.dtype.is_floating_point:
            problems.append(f"input_ids must be an integer vector, got {self.input_ids.dtype} "
                            f"{tuple(self.input_ids.shape)}")
        if tuple(self.aux_hidden_states.shape) != (t, num_states * hidden_size):
            problems.append(f"aux_hidden_states shape {tuple(self.aux_hidden_states.shape)}, expected ({t}, "
                            f"{num_states * hidden_size})")
        elif not self.aux_hidden_states.dtype.is_floating_point:
            problems.append(f"aux_hidden_states dtype {self.aux_hidden_states.dtype} is not a float type")
        if tuple(self.target_next_ids.shape) != (t,) or self.target_next_ids.dtype.is_floating_point:
            problems.append(f"target_next_ids must be an integer vector of length {t}, got "
                            f"{self.target_next_ids.dtype} {tuple(self.target_next_ids.shape)}")
        if self.generated_from is not None and not 0 < self.generated_from <= t:
            problems.append(f"generated_from {self.generated_from} outside 1..{t}")
        if problems:
            raise DraftFormatError("; ".join(problems), path=where)
        check_finite({"aux_hidden_states": self.aux_hidden_states}, where)


@dataclass(frozen=True)
class CalibrationSet:
    path: Path
    info: CalibrationInfo              # a view (`select`): aux_layer_ids are the layers it yields
    shards: tuple[dict, ...]
    complete: bool = True
    stored: tuple[int, ...] | None = None   # a view: the layers the shards hold (a superset, ascending)

    @property
    def stored_layers(self) -> tuple[int, ...]:
        return self.stored if self.stored is not None else tuple(self.info.aux_layer_ids)

    def select(self, indices) -> CalibrationSet:
        """The set as a draft fed `indices` reads it: those layers' states, in ascending order, out of the ones
        stored (a set captured for several candidate tap sets holds their union)."""
        indices, held = tuple(indices), self.stored_layers
        missing = [i for i in indices if i not in held]
        if missing:
            raise DraftFormatError(f"holds hidden_states{list(held)}, not hidden_states{missing} of "
                                   f"{list(indices)}", path=self.path, field="aux_layer_ids")
        if indices == held:
            return replace(self, info=replace(self.info, aux_layer_ids=held), stored=None)
        return replace(self, info=replace(self.info, aux_layer_ids=indices), stored=held)

    @property
    def num_samples(self) -> int:
        return sum(len(s["samples"]) for s in self.shards)

    @property
    def num_tokens(self) -> int:
        return sum(s["tokens"] for s in self.shards)

    def _open_shards(self) -> Iterator[tuple[Path, object, dict, SafetensorsHeader]]:
        """Each shard open, with its header read and checked against the file (what each sample declares)."""
        for shard in self.shards:
            file = shard_path(self.path, shard["file"], self.path / INDEX_NAME)
            try:
                header = read_header(file)
                fh = safe_open(str(file), framework="pt")
            except CheckpointFileError as exc:
                raise DraftFormatError(f"cannot read this calibration shard: {exc.message}", path=file,
                                       tensor=exc.tensor) from None
            except Exception as exc:   # safetensors' own error types: truncated, malformed header, missing
                raise DraftFormatError(f"cannot read this calibration shard: {_first_line(exc)}", path=file) from exc
            yield file, fh, shard, header

    @staticmethod
    def _read(fh, header: SafetensorsHeader, keys: tuple[str, ...], file: Path, i: int) -> list[torch.Tensor]:
        """Sample i's tensors `keys`, read once their declared size is known to fit (`sample_limits`)."""
        check_declared_bytes(header_bytes(header, keys), f"{file} sample {i}")
        try:
            return [fh.get_tensor(key) for key in keys]
        except Exception as exc:
            raise DraftFormatError(f"cannot read sample {i}: {_first_line(exc)}", path=file) from exc

    def shard_problems(self) -> list[str]:
        """Why a shard does not hold what the index says (missing, or its bytes differ from the sha256 recorded
        when it was written, or without one its header does not read); [] when every shard is as written."""
        return [problem for shard in self.shards if (problem := shard_problem(self.path, shard))]

    def check_token_ids(self, vocab_size: int, reader: str) -> None:
        """Every input and next-token id inside [0, vocab_size): the ids alone are read (the states are not).
        `reader` says whose embedding the ids index, for the error line."""
        for file, fh, shard, header in self._open_shards():
            for i in shard["samples"]:
                keys = (f"input_ids.{i}", f"target_next_ids.{i}")
                for key, ids in zip(keys, self._read(fh, header, keys, file, i), strict=True):
                    if ids.numel() and (int(ids.min()) < 0 or int(ids.max()) >= vocab_size):
                        bad = int(ids.max()) if int(ids.max()) >= vocab_size else int(ids.min())
                        raise DraftFormatError(
                            f"token id {bad} is outside {reader}'s vocabulary (vocab_size {vocab_size}): this set was "
                            "captured with another target's tokenizer", path=file, field=key,
                            hint="calibrate again with the draft's own target")

    def samples(self) -> Iterator[CalibrationSample]:
        """Each sample as stored; a shard that cannot be read or a non-finite state raises DraftFormatError."""
        for file, fh, shard, header in self._open_shards():
            for i, generated_from in zip(shard["samples"], shard["generated_from"], strict=True):
                keys = (f"input_ids.{i}", f"aux_hidden_states.{i}", f"target_next_ids.{i}")
                sample = CalibrationSample(*self._read(fh, header, keys, file, i), generated_from)
                check_finite({"aux_hidden_states": sample.aux_hidden_states}, f"{file} sample {i}")
                yield self._viewed(sample)

    def _viewed(self, sample: CalibrationSample) -> CalibrationSample:
        if self.stored is None:
            return sample
        held, hidden, states = self.stored, self.info.target_hidden_size, sample.aux_hidden_states
        if states.dim() != 2 or states.shape[-1] != len(held) * hidden:
            return sample                          # the sample's own check names the shape
        picked = states.view(states.shape[0], len(held), hidden)[:, [held.index(i) for i in self.info.aux_layer_ids]]
        return replace(sample, aux_hidden_states=picked.reshape(states.shape[0], -1))


def shard_problem(folder: Path, shard: dict) -> str | None:
    file, recorded = shard_path(folder, shard["file"], folder / INDEX_NAME), shard.get("sha256")
    if not file.is_file():
        return f"{shard['file']} is missing"
    if recorded is not None:
        return None if sha256_file(file) == recorded else \
            f"{shard['file']} differs from the sha256 recorded when it was written"
    try:
        safe_open(str(file), framework="pt")
    except Exception as exc:   # safetensors' own error types: truncated, malformed header
        return f"{shard['file']} does not read ({_first_line(exc)})"
    return None


def load_calibration(path: str | Path, *, allow_partial: bool = False) -> CalibrationSet:
    path = Path(path)
    index_path = path / INDEX_NAME
    try:
        index = load_json_file(index_path)
    except OSError as exc:
        raise DraftFormatError(f"not a calibration set ({exc.strerror or exc})", path=index_path) from exc
    except DraftFormatError as exc:       # invalid JSON, NaN/Infinity, too large or too deep
        raise DraftFormatError(f"not a calibration set ({exc.message})", path=index_path, field=exc.field) from None
    if not isinstance(index, dict) or index.get("format") != CALIB_FORMAT or index.get("version") != CALIB_VERSION:
        raise DraftFormatError(f"expected format {CALIB_FORMAT!r} version {CALIB_VERSION}", path=index_path,
                               field="format")
    try:
        info = dict(index["info"])
        info["aux_layer_ids"] = tuple(info["aux_layer_ids"])
        calib = CalibrationSet(path, CalibrationInfo(**info), check_shards(path, index["shards"], index_path),
                               bool(index.get("complete", True)))
    except (KeyError, TypeError) as exc:
        raise DraftFormatError(f"malformed index ({exc!r})", path=index_path) from exc
    if not calib.complete and not allow_partial:
        raise DraftFormatError("this calibration set is incomplete (its writer has not finished or was killed)",
                               path=path, hint="re-run the same calibrate command to finish it")
    return calib


class CalibrationWriter:
    """Append samples; a shard and the index are written every `shard_samples` samples or once the pending
    samples reach `shard_bytes` (resumable). With `mark_incomplete` the index says ``complete: false`` until
    `close()`; without it every flush leaves a loadable set."""

    def __init__(self, path: Path, info: CalibrationInfo, shard_samples: int = 64,
                 shard_bytes: int | None = None, *, mark_incomplete: bool = False) -> None:
        self.path, self.info, self.shard_samples, self.shard_bytes = Path(path), info, shard_samples, shard_bytes
        self.mark_incomplete = mark_incomplete
        self.path.mkdir(parents=True, exist_ok=True)
        existing = load_calibration(self.path, allow_partial=True) if (self.path / INDEX_NAME).exists() else None
        self.discarded: list[str] = []        # shards a resume found damaged: captured again
        self.shards = self._verified(list(existing.shards)) if existing else []
        self.count = sum(len(shard["samples"]) for shard in self.shards)
        self._pending: list[tuple[int, CalibrationSample]] = []
        self._pending_bytes = 0

    def _verified(self, shards: list[dict]) -> list[dict]:
        """The shards a resume keeps: those up to the first whose file is missing or differs from the sha256
        recorded when it was written; that one and every later shard are deleted and captured again."""
        for n, shard in enumerate(shards):
            if shard_problem(self.path, shard) is not None:
                for later in shards[n:]:
                    (self.path / later["file"]).unlink(missing_ok=True)
                self.discarded = [later["file"] for later in shards[n:]]
                return shards[:n]
        return shards

    def add(self, sample: CalibrationSample) -> None:
        check_finite({"aux_hidden_states": sample.aux_hidden_states}, f"{self.path} sample {self.count}")
        self._pending.append((self.count, sample))
        self._pending_bytes += sum(t.numel() * t.element_size() for t in
                                   (sample.input_ids, sample.aux_hidden_states, sample.target_next_ids))
        self.count += 1
        if len(self._pending) >= self.shard_samples or (self.shard_bytes and self._pending_bytes >= self.shard_bytes):
            self.flush()

    def flush(self) -> None:
        if not self._pending:
            return
        name = f"shard-{len(self.shards):05d}.safetensors"
        tensors, storages = {}, set()

        def own(t: torch.Tensor) -> torch.Tensor:  # safetensors refuses two names on one storage
            t = t.contiguous()
            ptr = t.untyped_storage().data_ptr()
            if ptr in storages:
                t = t.clone()
            storages.add(t.untyped_storage().data_ptr())
            return t

        for i, s in self._pending:
            tensors[f"input_ids.{i}"] = own(s.input_ids.to(torch.int64))
            tensors[f"aux_hidden_states.{i}"] = own(s.aux_hidden_states)
            tensors[f"target_next_ids.{i}"] = own(s.target_next_ids.to(torch.int64))
        tmp = self.path / (name + ".tmp")
        save_file(tensors, tmp)
        tmp.replace(self.path / name)
        self.shards.append({"file": name, "samples": [i for i, _ in self._pending],
                            "generated_from": [s.generated_from for _, s in self._pending],
                            "tokens": sum(int(s.input_ids.numel()) for _, s in self._pending),
                            "sha256": sha256_file(self.path / name)})
        self._pending, self._pending_bytes = [], 0
        self._write_index(complete=not self.mark_incomplete)

    def close(self) -> None:
        """Flush what is pending and mark the set complete."""
        self.flush()
        self._write_index(complete=True)

    def _write_index(self, complete: bool) -> None:
        index = {"format": CALIB_FORMAT, "version": CALIB_VERSION, "info": asdict(self.info),
                 "shards": self.shards, "complete": complete}
        tmp = self.path / (INDEX_NAME + ".tmp")
        tmp.write_text(json.dumps(index, indent=2, allow_nan=False) + "\n")
        tmp.replace(self.path / INDEX_NAME)


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def _jsonable(value):
    """What the value reads as after a JSON round trip (tuples become lists)."""
    return json.loads(json.dumps(value, allow_nan=False))
