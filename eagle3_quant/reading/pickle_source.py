"""Opt-in (`allow_pickle`) reading of pickle weights (`.bin`, `.pt`, `.pth`).

Only drafts with no safetensors weights at all go through here. Each file is opened with
``torch.load(weights_only=True)`` (an unpickler that builds tensors and plain containers only and
refuses anything else) and written as safetensors into a hidden folder beside OUT, with copies of the
other files; the source folder is only read. The rest of the pipeline then reads that folder like any
safetensors draft, with every check.
"""

from __future__ import annotations

import json
import pickle
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from eagle3_quant.errors import CheckpointFileError, UnsupportedSourceError
from eagle3_quant.reading.checkpoint import PICKLE_SUFFIXES, check_links, read_weight_map
from eagle3_quant.util.outdir import check_output_target, scratch_for
from eagle3_quant.util.resources import check_disk, check_memory, gb

PICKLE_INDEX = "pytorch_model.bin.index.json"
BASE_BYTES = 500 * 10**6   # torch itself


def pickle_only(root: Path) -> bool:
    """True when the folder holds pickle weights and no safetensors weights."""
    return not any(root.glob("*.safetensors")) and bool(_pickle_files(root))


def _pickle_files(root: Path) -> list[Path]:
    return sorted(p for p in root.iterdir() if p.suffix in PICKLE_SUFFIXES and p.is_file())


def _safetensors_name(name: str) -> str:
    return Path(name).stem.replace("pytorch_model", "model") + ".safetensors"


def _load_state_dict(path: Path) -> dict:
    import torch

    try:
        try:
            state = torch.load(path, map_location="cpu", weights_only=True, mmap=True)
        except RuntimeError as exc:
            if "mmap" not in str(exc):
                raise
            state = torch.load(path, map_location="cpu", weights_only=True)  # legacy (non-zip) format
    except pickle.UnpicklingError as exc:
        lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
        why = next((line for line in lines if "GLOBAL" in line), lines[0] if lines else type(exc).__name__)
        raise UnsupportedSourceError(f"holds objects other than tensors ({why.rstrip('.')}); refused by "
                                     "torch.load(weights_only=True), nothing was executed", path=path) from None
    except Exception as exc:  # torch raises many types for a corrupt file
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise CheckpointFileError(f"cannot be read as a torch checkpoint: {first}", path=path) from None
    if not isinstance(state, dict) or not all(isinstance(k, str) and isinstance(v, torch.Tensor)
                                              for k, v in state.items()):
        raise UnsupportedSourceError(f"holds a {type(state).__name__}, expected a dict of tensor name -> tensor",
                                     path=path)
    return state


def convert_pickle_draft(src: Path, dest: Path) -> list[str]:
    """Write a safetensors copy of a pickle-only draft folder into `dest`; returns the pickle files read."""
    from safetensors.torch import save_file

    files = _pickle_files(src)
    targets = {p.name: _safetensors_name(p.name) for p in files}
    if len(set(targets.values())) != len(targets):
        raise UnsupportedSourceError(f"pickle files {', '.join(targets)} would convert to the same name", path=src)
    index = _read_pickle_index(src, set(targets))
    for path in files:
        state = _load_state_dict(path)
        tensors = {name: t.detach().clone().contiguous() for name, t in state.items()}  # unshare storage
        del state
        save_file(tensors, dest / targets[path.name], metadata={"format": "pt"})
        del tensors
    if index is not None:
        weight_map = {name: targets[file] for name, file in sorted(index.items())}
        (dest / "model.safetensors.index.json").write_text(json.dumps({"metadata": {}, "weight_map": weight_map},
                                                                      indent=2, allow_nan=False) + "\n")
    for path in sorted(src.iterdir()):
        if (path.is_file() and not path.name.startswith(".") and path.suffix not in PICKLE_SUFFIXES
                and path.name != PICKLE_INDEX):
            shutil.copyfile(path, dest / path.name)
    return [p.name for p in files]


def _read_pickle_index(src: Path, files: set[str]) -> dict[str, str] | None:
    path = src / PICKLE_INDEX
    if not path.exists():
        return None
    weight_map = read_weight_map(path)
    for tensor, file in weight_map.items():
        if file not in files:
            raise CheckpointFileError(f"index places it in '{file}', which is not a pickle file of this folder",
                                      path=path, tensor=tensor)
    return weight_map


@contextmanager
def pickle_converted(src: Path, out: Path, force: bool) -> Iterator[Path]:
    """Convert a pickle-only draft into a hidden folder beside OUT; yield that folder; always remove it."""
    check_output_target(out, src, force)
    check_links(src)
    sizes = [p.stat().st_size for p in _pickle_files(src)]
    check_disk(out.parent, sum(sizes), f"converting the pickle weights to safetensors ({gb(sum(sizes))})")
    check_memory(BASE_BYTES + 2 * max(sizes), f"converting the largest pickle file ({gb(max(sizes))})", src)
    with scratch_for(out, "pickle") as folder:
        convert_pickle_draft(src, folder)
        yield folder
