"""Small tools that build broken or hostile draft folders from a valid tiny synthetic draft."""

from __future__ import annotations

import hashlib
import json
import os
import struct
from collections.abc import Callable
from pathlib import Path

import torch
from safetensors import safe_open
from safetensors.torch import save_file

from eagle3_quant.reading.formats import DraftFormat
from fixtures.synthetic import write_synthetic_draft

SINGLE = "model.safetensors"
SHARD = "model-{:05d}-of-00003.safetensors"
INDEX = "model.safetensors.index.json"
Q_PROJ = "midlayer.self_attn.q_proj.weight"


def tiny(root: Path, fmt: DraftFormat = DraftFormat.SPECFORGE, shards: int = 1) -> Path:
    return write_synthetic_draft(root / "src", "tiny", fmt, shards=shards)


def tree_state(root: Path) -> dict[str, str]:
    """Every path under root (links not followed) -> sha256, 'dir' or the link target."""
    state = {}
    for folder, dirs, files in os.walk(root):
        for name in (*dirs, *files):
            path = Path(folder) / name
            key = str(path.relative_to(root))
            if path.is_symlink():
                state[key] = "link:" + os.readlink(path)
            elif path.is_dir():
                state[key] = "dir"
            else:
                state[key] = hashlib.sha256(path.read_bytes()).hexdigest()
    return state


# --- config.json -----------------------------------------------------------------------------------

def edit_config(src: Path, change: Callable[[dict], None]) -> Path:
    path = src / "config.json"
    config = json.loads(path.read_text())
    change(config)
    path.write_text(json.dumps(config))
    return src


def set_config(src: Path, **values) -> Path:
    return edit_config(src, lambda c: c.update(values))


# --- safetensors files -----------------------------------------------------------------------------

def split(file: Path) -> tuple[dict, bytes]:
    raw = file.read_bytes()
    (n,) = struct.unpack("<Q", raw[:8])
    return json.loads(raw[8:8 + n]), raw[8 + n:]


def write_raw(file: Path, header: bytes | str | dict, data: bytes) -> None:
    if isinstance(header, dict):
        header = json.dumps(header)
    if isinstance(header, str):
        header = header.encode()
    header += b" " * (-len(header) % 8)
    file.write_bytes(struct.pack("<Q", len(header)) + header + data)


def edit_header(file: Path, change: Callable[[dict], None]) -> Path:
    header, data = split(file)
    change(header)
    write_raw(file, header, data)
    return file


def file_tensors(file: Path) -> dict[str, torch.Tensor]:
    with safe_open(str(file), framework="pt") as fh:
        return {name: fh.get_tensor(name) for name in fh.keys()}


def edit_tensors(file: Path, change: Callable[[dict[str, torch.Tensor]], None]) -> Path:
    tensors = file_tensors(file)
    change(tensors)
    save_file(tensors, file, metadata={"format": "pt"})
    return file


def set_tensors(file: Path, **tensors: torch.Tensor | None) -> Path:
    """Replace, add (name=tensor) or drop (name=None) tensors; names use '__' for '.'."""
    def change(current: dict) -> None:
        for key, value in tensors.items():
            name = key.replace("__", ".")
            if value is None:
                current.pop(name)
            else:
                current[name] = value
    return edit_tensors(file, change)


def poke(file: Path, name: str, index: tuple[int, ...], value: float) -> Path:
    def change(tensors: dict) -> None:
        tensors[name][index] = value
    return edit_tensors(file, change)


def shard_of(src: Path, tensor: str) -> Path:
    return src / json.loads((src / INDEX).read_text())["weight_map"][tensor]


def edit_index(src: Path, change: Callable[[dict], None]) -> Path:
    path = src / INDEX
    index = json.loads(path.read_text())
    change(index["weight_map"])
    path.write_text(json.dumps(index))
    return src


def bf16(*shape: int) -> torch.Tensor:
    return torch.randn(*shape, generator=torch.Generator().manual_seed(1)).to(torch.bfloat16)


# --- other models ----------------------------------------------------------------------------------

def plain_model(root: Path, tensors: dict[str, tuple[int, ...]], config: dict) -> Path:
    src = root / "src"
    src.mkdir()
    (src / "config.json").write_text(json.dumps(config))
    save_file({name: torch.zeros(shape, dtype=torch.bfloat16) for name, shape in tensors.items()}, src / SINGLE)
    return src


def llama_target(root: Path) -> Path:
    layers = {f"model.layers.{i}.{m}.weight": (64, 64) for i in range(2)
              for m in ("self_attn.q_proj", "self_attn.k_proj", "mlp.down_proj")}
    return plain_model(root, {"model.embed_tokens.weight": (512, 64), **layers, "lm_head.weight": (512, 64)},
                       {"architectures": ["LlamaForCausalLM"], "hidden_size": 64, "num_hidden_layers": 2})


def moe_model(root: Path) -> Path:
    experts = {f"model.layers.0.mlp.experts.{e}.{m}.weight": (32, 64) for e in range(4)
               for m in ("gate_proj", "up_proj")}
    return plain_model(root, {"model.embed_tokens.weight": (512, 64), "model.layers.0.mlp.gate.weight": (4, 64),
                              **experts}, {"architectures": ["MixtralForCausalLM"], "hidden_size": 64,
                                           "num_local_experts": 4})


# --- pickle ----------------------------------------------------------------------------------------

class RunsCode:
    """Pickles to a call of os.system: an unrestricted unpickler would run it."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


def pickle_draft(root: Path, payload: Callable[[dict], object] | None = None) -> Path:
    """A tiny draft whose weights are only pytorch_model.bin (torch.save of a state dict, or of `payload`)."""
    src = tiny(root)
    tensors = file_tensors(src / SINGLE)
    (src / SINGLE).unlink()
    torch.save(payload(tensors) if payload else tensors, src / "pytorch_model.bin")
    return src
