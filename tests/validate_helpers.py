"""Ways to break an FP8 draft folder on purpose (tests of `eagle3-quant validate`)."""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path

import torch
from safetensors import safe_open
from safetensors.torch import save_file

from eagle3_quant.reading.checkpoint import read_checkpoint


def copy_artifact(out: Path, dest: Path) -> Path:
    shutil.copytree(out, dest, ignore=shutil.ignore_patterns("validation.json"))
    return dest


def rewrite_tensor(folder: Path, name: str, change: Callable[[torch.Tensor], torch.Tensor]) -> None:
    """Replace one tensor in place in whichever shard holds it (other tensors and metadata kept)."""
    file = read_checkpoint(folder).tensors[name].file
    with safe_open(str(file), framework="pt") as fh:
        tensors = {k: fh.get_tensor(k) for k in fh.keys()}
        metadata = fh.metadata()
    tensors[name] = change(tensors[name]).contiguous()
    save_file(tensors, file, metadata=metadata)


def scale_times_8(folder: Path, module: str) -> None:
    rewrite_tensor(folder, f"{module}.weight_scale", lambda s: s * 8)


def noise_in_weight(folder: Path, module: str, relative: float = 0.3, seed: int = 0) -> None:
    def noisy(w: torch.Tensor) -> torch.Tensor:
        gen = torch.Generator().manual_seed(seed)
        values = w.float()
        noise = torch.randn(values.shape, generator=gen) * values.abs().mean() * relative / 0.8
        return (values + noise).clamp(-448, 448).to(w.dtype)

    rewrite_tensor(folder, f"{module}.weight", noisy)


def plain_quark_exclude(folder: Path) -> None:
    config = json.loads((folder / "config.json").read_text())
    config["quantization_config"]["exclude"] = ["fc", "lm_head"]
    (folder / "config.json").write_text(json.dumps(config, indent=2) + "\n")


def write_manifest_naming(folder: Path, scheme: str) -> Path:
    """A well-formed manifest that names `scheme` and lists no outputs: what `Manifest.read` accepts."""
    from eagle3_quant.records.manifest import ExcludeRecord, Manifest, SchemeRecord, SourceRecord

    folder.mkdir(parents=True, exist_ok=True)
    return Manifest(SourceRecord("src", "specforge"), SchemeRecord(scheme, "", ""), ExcludeRecord([], [], {}), [],
                    [], [], versions={"eagle3-quant": "test"}).write(folder)
