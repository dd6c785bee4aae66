"""`calibrate --backend vllm`: the target runs in vLLM's engine, and its own hidden-state export gives the states.

The prompts are the project's (`prompts.py`: dataset, chat template, truncation, seeded order); only the target run
moves. The engine runs in its own Python (`eagle3_quant.engines.environment`: ``--engine-python``, else
``EAGLE3_QUANT_ENGINE_PYTHON``, else ``.venv-engine``), in a child process (`eagle3_quant.engines.runner`), on every
prompt not captured yet at once, so vLLM batches them and spreads the target over its GPUs (tensor, pipeline and
expert parallel passed through). The child (``eagle3_quant/engines/vllm/export_child.py``) asks vLLM's
``extract_hidden_states`` for exactly the hidden_states indices the transformers backend captures (the same list,
`taps`), and writes per sample the connector's file (states [T, n, H], token ids) and a small JSON file (vLLM's
argmax after each prompt position, the generated tokens) into the hidden sibling ``.OUT.calib-engine/``.

Each sample then becomes what `capture.TargetRunner.capture` writes for the same prompt: the prompt and the greedy
continuation (``generate_tokens``, through an EOS), the states of every position, and the target's argmax after
each (the engine generates one token more than kept, so the last kept position has its next token too). The
samples go through the same resumable writer; the engine folder keeps what the engine finished across a kill
(a re-run sends only the prompts it lacks to the engine) and is removed once the set is whole. Its
``export.json`` holds the set's info: a folder made with other options is cleared.
"""

from __future__ import annotations

import dataclasses
import json
import shutil
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import torch

from eagle3_quant.calib.engine_dump import read_engine_record
from eagle3_quant.engine_layout import EngineLayout
from eagle3_quant.engines.changes import change_lines, changes_for
from eagle3_quant.engines.environment import (
    VLLM_CHILDREN,
    EngineInfo,
    EnginePython,
    engine_env,
    find_engine_python,
    probe_engine,
)
from eagle3_quant.engines.layout_check import LayoutRun, check_layout
from eagle3_quant.engines.runner import ChildCommand, run_child
from eagle3_quant.errors import CalibrationDataError, EngineError
from eagle3_quant.records.calibration import STATE_DTYPES, CalibrationInfo, CalibrationSample
from eagle3_quant.util.progress import Progress

MANIFEST = "export.json"
ENGINE_LOG = "engine.log"         # the engine's last log lines, kept when it fails
POLL_S = 1.0


@dataclass(frozen=True)
class VllmEngine:
    python: EnginePython
    info: EngineInfo

    def extra(self, layout: EngineLayout) -> dict:
        """What the set records about the run (a resume on another engine version or layout is refused as other
        options)."""
        return {"capture_backend": "vllm", "capture_engine": f"{self.info.distribution} {self.info.version}",
                "engine_layout": layout.to_dict()}


def find_vllm(engine_python: str | None) -> VllmEngine:
    """The engine's Python and what it holds, before any work: `EngineNotFoundError` / `EngineError` in one line
    naming ``make setup-engine`` and ``--engine-python``."""
    python = find_engine_python(engine_python)
    return VllmEngine(python, probe_engine(python))


def with_engine(info: CalibrationInfo, engine: VllmEngine, layout: EngineLayout) -> CalibrationInfo:
    return dataclasses.replace(info, extra={**info.extra, **engine.extra(layout)})


def export_dir(out: Path) -> Path:
    return out.parent / f".{out.name}.calib-engine"


def capture_with_vllm(engine: VllmEngine, out: Path, spec, taps: tuple[int, ...], dtype: str, opts, tokenizer,
                      todo, writer, progress: Progress, total: int, done: int):
    """`api._capture`'s contract with the target in vLLM: samples done..total-1 (`todo`) added to `writer`; returns
    (samples, tokens, seconds, generated tokens, cut generations). Seconds: the engine's generation and the
    conversion, not its load (as the transformers backend leaves out the model load)."""
    if not todo:                      # killed after the last shard: only the engine folder is left to remove
        shutil.rmtree(export_dir(out), ignore_errors=True)
        return 0, 0, 0.0, 0, 0
    folder = _open_export(export_dir(out), writer.info)
    samples = {done + j: tuple(prompt) for j, prompt in enumerate(todo)}
    exported = {i for i in samples if _marker(folder, i).exists()}
    needed = {i: p for i, p in samples.items() if i not in exported}
    eos = tokenizer.eos_token_id
    eos_ids = {eos} if eos is not None else set()
    seconds = 0.0
    with progress.task("capture (vLLM)", total, done + len(exported)) as advance:
        if needed:
            seconds += _run_engine(engine, spec, taps, dtype, opts, needed, folder, progress, advance)
        started = time.perf_counter()
        tokens = generated = 0
        flushed = len(writer.shards)
        for i, prompt in samples.items():
            sample, kept = _sample(folder, i, prompt, opts.generate_tokens, eos_ids, len(taps), spec.hidden_size,
                                   STATE_DTYPES[dtype])
            writer.add(sample)
            tokens, generated = tokens + int(sample.input_ids.numel()), generated + kept
            if len(writer.shards) > flushed:          # samples up to i are in whole shards: their files can go
                flushed = len(writer.shards)
                _remove(folder, [j for j in samples if j <= i])
        writer.flush()
        seconds += time.perf_counter() - started
    shutil.rmtree(folder)
    return len(samples), tokens, seconds, generated, 0


CALIBRATE_WAY_OUT = ("tensor or expert parallelism instead (--tensor-parallel-size, --enable-expert-parallel), or "
                     "capture the states elsewhere and import them with calibrate --from-dump")


def engine_request(engine: VllmEngine, spec, taps: tuple[int, ...], dtype: str, opts, prompts: dict[int, tuple],
                   max_model_len: int, folder: Path) -> dict:
    """The export child's request: vLLM's arguments (the layout among them) and the CPU build's changes."""
    kwargs = {"max_model_len": max_model_len, "seed": 0, "trust_remote_code": opts.trust_remote_code,
              **({"max_num_seqs": opts.max_num_seqs} if opts.max_num_seqs else {}),
              **({"enforce_eager": True} if engine.info.cpu else {}),      # what was measured on the CPU build
              **({"quantization": opts.target_quantization} if opts.target_quantization else {}),
              **opts.layout().llm_kwargs()}
    changes = changes_for(engine.info, spec.precision.mx, hidden_states=True)
    return {"target": spec.name, "dtype": dtype, "layer_ids": list(taps), "samples": list(prompts),
            "prompts": [list(p) for p in prompts.values()], "max_tokens": opts.generate_tokens + 1,
            "dump": str(folder), "engine": kwargs, "changes": changes}


def check_engine_layout(engine: VllmEngine, spec, taps: tuple[int, ...], dtype: str, opts, out: Path) -> None:
    """The layout refused before the dataset is read and before the target loads, when vLLM would refuse it (the
    hidden-state export builds no draft: only vLLM's config checks apply)."""
    request = engine_request(engine, spec, taps, dtype, opts, {}, opts.max_model_len or opts.seq_len + 1,
                             export_dir(out))
    check_layout(engine.python, engine.info, opts.layout(), [LayoutRun("the target", "export_child", request)],
                 way_out=CALIBRATE_WAY_OUT if opts.pipeline_parallel_size > 1 else None)


def _run_engine(engine: VllmEngine, spec, taps: tuple[int, ...], dtype: str, opts, needed: dict[int, tuple],
                folder: Path, progress: Progress, advance) -> float:
    longest = max(len(p) for p in needed.values()) + opts.generate_tokens + 1
    if opts.max_model_len is not None and opts.max_model_len < longest:
        raise CalibrationDataError(f"{opts.max_model_len} is shorter than the longest sample: its prompt, "
                                   f"{opts.generate_tokens} generated tokens and one more", field="max_model_len",
                                   hint=f"pass at least {longest}, or a smaller --seq-len")
    request = engine_request(engine, spec, taps, dtype, opts, needed, opts.max_model_len or longest, folder)
    command = ChildCommand(engine.python.path, VLLM_CHILDREN / "export_child.py",
                           name=f"vLLM ({engine.info.distribution} {engine.info.version})",
                           env=engine_env(engine.info), unset=("PYTHONPATH",))
    progress.say(f"{engine.info.describe()}: {len(needed)} prompts in one batch, hidden_states{list(taps)}, "
                 f"{opts.layout().describe()}")
    counter = _Counter(folder, {i: len(p) + opts.generate_tokens for i, p in needed.items()}, advance)
    counter.start()
    try:
        run = run_child(command, request, opts.engine_timeout)
    finally:
        counter.stop()
    if not run.ok:
        log = folder / ENGINE_LOG
        log.write_text(run.stderr_tail + "\n")
        raise EngineError(run.error, hint=f"the engine's last log lines: {log}")
    result = run.checked()
    for line in change_lines(result):
        progress.say(line)
    return float(result["generate_s"])


class _Counter(threading.Thread):
    """Advances the progress bar as the child marks samples done (their JSON files appear)."""

    def __init__(self, folder: Path, tokens: dict[int, int], advance):
        super().__init__(daemon=True)
        self.folder, self.waiting, self.advance = folder, dict(tokens), advance
        self._stop_event = threading.Event()

    def run(self) -> None:
        while not self._stop_event.wait(POLL_S):
            self.poll()

    def poll(self) -> None:
        for i, tokens in list(self.waiting.items()):
            if _marker(self.folder, i).exists():
                self.advance(1, tokens)
                del self.waiting[i]

    def stop(self) -> None:
        self._stop_event.set()
        self.join()
        self.poll()


def _marker(folder: Path, i: int) -> Path:
    return folder / f"{i:06d}.json"


def _states(folder: Path, i: int) -> Path:
    return folder / f"{i:06d}.safetensors"


def _open_export(folder: Path, info: CalibrationInfo) -> Path:
    """The engine folder of this set: kept when made with the same options, else cleared."""
    manifest = folder / MANIFEST
    wanted = json.loads(json.dumps(dataclasses.asdict(info), allow_nan=False))
    try:
        same = json.loads(manifest.read_text()) == wanted
    except (OSError, ValueError):
        same = False
    if not same:
        shutil.rmtree(folder, ignore_errors=True)
        folder.mkdir(parents=True)
        manifest.write_text(json.dumps(wanted, indent=2, allow_nan=False) + "\n")
    return folder


def _remove(folder: Path, samples: list[int]) -> None:
    for i in samples:
        for path in (_states(folder, i), _marker(folder, i)):
            path.unlink(missing_ok=True)


def _sample(folder: Path, i: int, prompt: tuple[int, ...], generate_tokens: int, eos_ids: set[int], n_states: int,
            hidden: int, dtype: torch.dtype) -> tuple[CalibrationSample, int]:
    """Sample i as the transformers backend writes it: the prompt, the continuation kept (through an EOS, at most
    `generate_tokens`), the states of each position and the argmax after each."""
    where = _marker(folder, i)
    try:
        export = json.loads(where.read_text())
        prompt_next, output = [int(t) for t in export["prompt_next"]], [int(t) for t in export["output"]]
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise CalibrationDataError(f"cannot read the engine's record of sample {i} ({exc})", path=where) from exc
    if len(prompt_next) != len(prompt) - 1 or len(output) != generate_tokens + 1:
        raise CalibrationDataError(f"sample {i}: the engine returned {len(prompt_next)} prompt argmaxes and "
                                   f"{len(output)} generated tokens, expected {len(prompt) - 1} and "
                                   f"{generate_tokens + 1}", path=where)
    kept = next((k + 1 for k, token in enumerate(output[:generate_tokens]) if token in eos_ids), generate_tokens)
    ids = torch.tensor([*prompt, *output[:kept]], dtype=torch.int64)
    record = read_engine_record(_states(folder, i))
    length = ids.numel()
    if record.token_ids.numel() < length or not torch.equal(record.token_ids[:length], ids):
        raise CalibrationDataError(f"sample {i}: the exported token_ids are not the prompt and the tokens vLLM "
                                   "generated", path=_states(folder, i), field="token_ids")
    states = record.hidden_states[:length]
    if tuple(states.shape[1:]) != (n_states, hidden):
        raise CalibrationDataError(f"hidden_states are [seq, {states.shape[1]}, {states.shape[2]}], expected [seq, "
                                   f"{n_states}, {hidden}]", path=_states(folder, i), field="hidden_states")
    aux = states.reshape(length, n_states * hidden).to(dtype)
    next_ids = torch.tensor([*prompt_next, *output[:kept + 1]], dtype=torch.int64)
    return CalibrationSample(ids, aux, next_ids, len(prompt) if kept else None), kept
