"""Builders of the corpus cases that take more than one line: each returns the broken source folder."""

from __future__ import annotations

import json
import struct
from collections.abc import Callable
from pathlib import Path

import torch

from corpus.builders import (
    Q_PROJ,
    SHARD,
    SINGLE,
    RunsCode,
    bf16,
    edit_config,
    edit_header,
    edit_index,
    edit_tensors,
    file_tensors,
    pickle_draft,
    poke,
    set_config,
    set_tensors,
    shard_of,
    split,
    tiny,
    write_raw,
)
from eagle3_quant.reading.formats import DraftFormat


def truncated(root: Path) -> Path:
    src = tiny(root)
    data = (src / SINGLE).read_bytes()
    (src / SINGLE).write_bytes(data[: len(data) * 2 // 3])
    return src


def header_length_beyond_file(root: Path) -> Path:
    src = tiny(root)
    data = (src / SINGLE).read_bytes()
    (src / SINGLE).write_bytes(struct.pack("<Q", 10**6) + data[8:])
    return src


def header_text(text: bytes) -> Callable[[Path], Path]:
    def build(root: Path) -> Path:
        src = tiny(root)
        _, data = split(src / SINGLE)
        write_raw(src / SINGLE, text, data)
        return src
    return build


def duplicate_tensor_name(root: Path) -> Path:
    src = tiny(root)
    header, data = split(src / SINGLE)
    entries = [f'"{k}":{json.dumps(v)}' for k, v in header.items()]
    write_raw(src / SINGLE, "{" + ",".join(entries + [entries[-1]]) + "}", data)
    return src


def overlapping(root: Path) -> Path:
    src = tiny(root)
    k, v = "midlayer.self_attn.k_proj.weight", "midlayer.self_attn.v_proj.weight"

    def change(header: dict) -> None:
        first, later = sorted((k, v), key=lambda n: header[n]["data_offsets"][0])
        header[later]["data_offsets"] = header[first]["data_offsets"]
    edit_header(src / SINGLE, change)
    return src


def offsets_out_of_range(root: Path) -> Path:
    src = tiny(root)

    def change(header: dict) -> None:
        begin, end = header["norm.weight"]["data_offsets"]
        header["norm.weight"]["data_offsets"] = [begin + 10**9, end + 10**9]
    edit_header(src / SINGLE, change)
    return src


def header_edit(change: Callable[[dict], None]) -> Callable[[Path], Path]:
    def build(root: Path) -> Path:
        src = tiny(root)
        edit_header(src / SINGLE, change)
        return src
    return build


def trailing_bytes(root: Path) -> Path:
    src = tiny(root)
    with (src / SINGLE).open("ab") as fh:
        fh.write(b"\0" * 16)
    return src


def index_points_to(name: Callable[[Path], str]) -> Callable[[Path], Path]:
    def build(root: Path) -> Path:
        src = tiny(root, shards=3)
        target = name(root)
        edit_index(src, lambda wm: wm.update({"norm.weight": target}))
        return src
    return build


def absolute_outside(root: Path) -> str:
    (root / "elsewhere").mkdir()
    (root / "elsewhere" / SINGLE).write_bytes((root / "src" / SHARD.format(1)).read_bytes())
    return str(root / "elsewhere" / SINGLE)


def shard_link_outside(root: Path) -> Path:
    src = tiny(root, shards=3)
    (root / "elsewhere").mkdir()
    moved = root / "elsewhere" / SHARD.format(2)
    (src / SHARD.format(2)).rename(moved)
    (src / SHARD.format(2)).symlink_to(moved)
    return src


def side_file_link_outside(root: Path) -> Path:
    src = tiny(root)
    (root / "secret.txt").write_text("api-token-123\n")
    (src / "tokenizer.json").symlink_to(root / "secret.txt")
    return src


def missing_shard(root: Path) -> Path:
    src = tiny(root, shards=3)
    (src / SHARD.format(3)).unlink()
    return src


def tensor_in_two_shards(root: Path) -> Path:
    src = tiny(root, shards=3)
    owner = shard_of(src, "norm.weight")
    other = next(src / SHARD.format(i) for i in (1, 2, 3) if src / SHARD.format(i) != owner)
    norm = file_tensors(owner)["norm.weight"]
    edit_tensors(other, lambda t: t.update({"norm.weight": norm}))
    return src


def index_names_wrong_shard(root: Path) -> Path:
    src = tiny(root, shards=3)
    owner = shard_of(src, "norm.weight").name
    wrong = next(SHARD.format(i) for i in (1, 2, 3) if SHARD.format(i) != owner)
    return edit_index(src, lambda wm: wm.update({"norm.weight": wrong}))


def stray_shard(root: Path) -> Path:
    src = tiny(root, shards=3)
    (src / "consolidated.safetensors").write_bytes((src / SHARD.format(1)).read_bytes())
    return src


def sharded(change: Callable[[Path], object]) -> Callable[[Path], Path]:
    def build(root: Path) -> Path:
        src = tiny(root, shards=3)
        change(src)
        return src
    return build


def config(change: Callable[[dict], None], fmt: DraftFormat = DraftFormat.SPECFORGE) -> Callable[[Path], Path]:
    return lambda root: edit_config(tiny(root, fmt), change)


def config_values(**values) -> Callable[[Path], Path]:
    return lambda root: set_config(tiny(root), **values)


def weights(**tensors) -> Callable[[Path], Path]:
    def build(root: Path) -> Path:
        src = tiny(root)
        set_tensors(src / SINGLE, **tensors)
        return src
    return build


def poked(name: str, index: tuple[int, ...], value: float) -> Callable[[Path], Path]:
    def build(root: Path) -> Path:
        src = tiny(root)
        poke(src / SINGLE, name, index, value)
        return src
    return build


def speculators_two_layers(root: Path) -> Path:
    src = tiny(root, DraftFormat.SPECULATORS)
    set_tensors(src / SINGLE, layers__1__mlp__down_proj__weight=bf16(64, 160))
    return src


def already_quantized(root: Path) -> Path:
    src = tiny(root)
    weight = file_tensors(src / SINGLE)[Q_PROJ]
    set_tensors(src / SINGLE, midlayer__self_attn__q_proj__weight=weight.float().to(torch.float8_e4m3fn),
                midlayer__self_attn__q_proj__weight_scale=torch.ones(64))
    return src


def d2t_entry(index: int, target: Callable[[int], int]) -> Callable[[Path], Path]:
    """Make draft id `index` map to target id target(vocab)."""
    def build(root: Path) -> Path:
        src = tiny(root)
        d2t = file_tensors(src / SINGLE)["d2t"]
        d2t[index] = target(512) - index
        set_tensors(src / SINGLE, d2t=d2t)
        return src
    return build


def pickled_code(root: Path) -> Path:
    return pickle_draft(root, lambda tensors: {**tensors, "norm.weight": RunsCode(root / "pwned")})


def out_is_file(root: Path, src: Path) -> Path:
    (root / "out").write_text("not a folder\n")
    return root / "out"


def out_exists(root: Path, src: Path) -> Path:
    (root / "out").mkdir()
    (root / "out" / "keep.txt").write_text("mine\n")
    return root / "out"


def config_only(root: Path) -> Path:
    src = tiny(root)
    (src / SINGLE).unlink()
    return src


def little_disk(folder: Path) -> tuple[int, Path]:
    return 1000, folder




def drop_file(src: Path, name: str) -> Path:
    (src / name).unlink()
    return src


def write_file(folder: Path, name: str, text: str) -> Path:
    (folder / name).write_text(text)
    return folder




def family_draft(shape: str, change: Callable[[dict], None] | None = None, fmt: DraftFormat = DraftFormat.SPECFORGE,
                 **tensors) -> Callable[[Path], Path]:
    """A synthetic draft of another family or aux layout (fixtures/synthetic.py SHAPES), config and tensors edited."""
    def build(root: Path) -> Path:
        from fixtures.synthetic import write_synthetic_draft

        src = write_synthetic_draft(root / "src", shape, fmt)
        if change is not None:
            edit_config(src, change)
        if tensors:
            set_tensors(src / SINGLE, **tensors)
        return src
    return build


def no_aux_layer_ids(config: dict) -> None:
    config.pop("eagle_config", None)
    config.pop("eagle_aux_hidden_state_layer_ids", None)
    config["num_aux_hidden_states"] = 2
