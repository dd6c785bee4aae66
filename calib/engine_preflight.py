"""What every verb that starts a serving engine checks before the engine starts (`bench`, `calibrate --backend
vllm`): an engine run costs minutes (a large target on many GPUs), so whatever the inputs alone show is refused
first, in one line.

- OUT (when it exists) and the folder it lives in accept a new file: tried with a real temporary file, not
  assumed from permission bits (a read-only mount, a full quota).
- The target has a config and a tokenizer the engine can load (`load_tokenizer`).
- The layer ids the engine will feed each draft (its own reading rule, ``engine_taps``) lie within the target's
  depth; the error names the draft's config and the ids.
- An artifact made by `quantize` is what its manifest says: every listed file with its recorded size and sha256
  (as `validate`'s manifest check), else refused naming the file that changed.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from eagle3_quant.calib.target import TargetSpec, load_tokenizer
from eagle3_quant.errors import DraftFormatError, ManifestError, ResourceError
from eagle3_quant.reading.config import DraftConfig
from eagle3_quant.records.artifact import QuantizedArtifact
from eagle3_quant.records.manifest import MANIFEST_NAME
from eagle3_quant.taps.conventions import AUX_KEY, TapConvention
from eagle3_quant.taps.engine_rules import Engine, engine_taps, ids_read

WRITE_PROBE = ".e3q-write-check-"


def check_writable(out: Path) -> None:
    """OUT (if it exists) and its nearest existing parent take a new file; else `ResourceError` naming the folder."""
    folders = [out] if out.is_dir() else []
    parent = out.parent
    while not parent.exists() and parent != parent.parent:
        parent = parent.parent
    for folder in dict.fromkeys([*folders, parent]):
        try:
            handle, name = tempfile.mkstemp(prefix=WRITE_PROBE, dir=folder)
        except OSError as exc:
            raise ResourceError(f"cannot write here ({exc.strerror or exc}); nothing was started", path=folder,
                                hint="choose a writable OUT") from exc
        os.close(handle)
        os.unlink(name)


def check_engine_layer_ids(config: DraftConfig, where: str | Path, target: TargetSpec,
                           engine: Engine | str = Engine.vllm) -> tuple[int, ...]:
    """The hidden_states indices `engine` feeds this draft on `target`; ids outside its depth refused naming them."""
    engine = Engine(engine)
    config_file = Path(where) / "config.json"
    ids, origin, convention = ids_read(engine.value, config.raw)
    if ids is not None:
        shift = 1 if convention is TapConvention.output else 0
        outside = [i for i in ids if not isinstance(i, int) or isinstance(i, bool)
                   or not 0 <= i + shift < target.num_layers]
        if outside:
            raise DraftFormatError(f"layer id(s) {outside} of {list(ids)} ({origin}, as {engine.value} reads it) lie "
                                   f"outside the target's {target.num_layers} decoder layers; {engine.value} would "
                                   "fail only after loading", path=config_file, field=AUX_KEY,
                                   hint="is this the draft's target?")
    try:
        return engine_taps(config, target.num_layers, engine).indices
    except DraftFormatError as exc:
        if exc.path:
            raise
        raise DraftFormatError(exc.message, path=config_file, field=exc.field, hint=exc.hint) from None


def check_manifest(artifact: QuantizedArtifact) -> None:
    """An artifact with a manifest must match it (every listed file, size and sha256); one without is let be."""
    if artifact.manifest_error is not None:
        raise artifact.manifest_error
    out = artifact.path
    problems = artifact.manifest_problems()
    if problems:
        first = problems[0].split(" ", 1)[0]
        more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
        raise ManifestError(f"not what its {MANIFEST_NAME} says: {problems[0]}{more}", path=out / first,
                            hint="re-run quantize, or restore the file")


def engine_preflight(out: Path, target: TargetSpec, drafts: dict[str, tuple[DraftConfig, str | Path]],
                     artifact: QuantizedArtifact | None = None, trust_remote_code: bool = False):
    """Everything above, in the order a user would fix it; returns the target's tokenizer."""
    if artifact is not None:
        check_manifest(artifact)
    for config, where in drafts.values():
        check_engine_layer_ids(config, where, target)
    tokenizer = load_tokenizer(target, trust_remote_code)
    check_writable(out)
    return tokenizer
