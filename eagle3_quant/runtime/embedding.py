"""What a draft borrows from its target when its checkpoint holds none: the token embedding, the lm_head."""

from __future__ import annotations

from pathlib import Path

import torch
from safetensors import safe_open

from eagle3_quant.errors import DraftFormatError
from eagle3_quant.reading.checkpoint import read_checkpoint, read_weight_map
from eagle3_quant.reading.hub_errors import hub_failure
from eagle3_quant.reading.hub_reach import reach_hub
from eagle3_quant.reading.limits import load_json_file
from eagle3_quant.reading.repo_ids import is_repo_id

EMBEDDING_SUFFIX = "embed_tokens.weight"
PREFERRED = ("model.embed_tokens.weight", "embed_tokens.weight", "model.language_model.embed_tokens.weight")


LM_HEAD_PREFERRED = ("lm_head.weight", "model.lm_head.weight", "language_model.lm_head.weight")


def _pick(names: list[str], where: Path) -> str:
    for name in PREFERRED:
        if name in names:
            return name
    found = sorted(n for n in names if n.endswith(EMBEDDING_SUFFIX) and "mtp" not in n)
    if not found:
        raise DraftFormatError(f"no '*{EMBEDDING_SUFFIX}' tensor in the target checkpoint", path=where,
                               tensor="model.embed_tokens.weight")
    return found[0]


def read_target_embedding(target: str | Path, revision: str | None = None) -> torch.Tensor:
    """`model.embed_tokens.weight` of a target: a local folder (reads one tensor, not the model) or a Hub id
    (downloads the shard index and the one shard holding the embedding)."""
    folder = Path(target).expanduser()
    if folder.is_dir():
        checkpoint = read_checkpoint(folder)
        name = _pick(list(checkpoint.tensors), folder)
        file = checkpoint.tensors[name].file
    elif is_repo_id(str(target)):
        file, name = _fetch_embedding_shard(str(target), revision)
    else:
        raise DraftFormatError("no such folder, and not a Hub repo id (ORG/NAME)", path=target)
    with safe_open(str(file), framework="pt") as fh:
        return fh.get_tensor(name)


def _fetch_embedding_shard(repo_id: str, revision: str | None) -> tuple[Path, str]:
    from huggingface_hub import hf_hub_download, list_repo_files
    from huggingface_hub.errors import HfHubHTTPError, LocalEntryNotFoundError, RepositoryNotFoundError

    reach_hub()
    try:
        files = list_repo_files(repo_id, revision=revision)
        index = next((f for f in files if f.endswith(".safetensors.index.json")), None)
        if index is None:
            shard = next(f for f in files if f.endswith(".safetensors"))
            path = Path(hf_hub_download(repo_id, shard, revision=revision))
            with safe_open(str(path), framework="pt") as fh:
                return path, _pick(list(fh.keys()), path)
        index_path = Path(hf_hub_download(repo_id, index, revision=revision))
        weight_map = read_weight_map(index_path)
        name = _pick(list(weight_map), index_path)
        return Path(hf_hub_download(repo_id, weight_map[name], revision=revision)), name
    except (RepositoryNotFoundError, LocalEntryNotFoundError, HfHubHTTPError, OSError, StopIteration,
            KeyError) as exc:
        raise hub_failure(exc, repo_id) or DraftFormatError(
            f"cannot fetch the target's embedding from the Hub ({exc})", path=repo_id,
            hint="pass the target's local folder") from exc


def read_target_lm_head(target: str | Path, revision: str | None = None) -> torch.Tensor:
    """The [V, H] ``lm_head.weight`` of a target, or its embedding when the head is tied
    (``tie_word_embeddings``): a local folder (reads one tensor, not the model) or a Hub id (the shard index,
    then HTTP range requests for the one shard's header and the tensor's bytes: no shard downloaded)."""
    folder = Path(target).expanduser()
    if folder.is_dir():
        return _local_lm_head(folder)
    if not is_repo_id(str(target)):
        raise DraftFormatError("no such folder, and not a Hub repo id (ORG/NAME)", path=target)
    return _hub_lm_head(str(target), revision)


def _tied(config: dict | None) -> bool:
    return isinstance(config, dict) and config.get("tie_word_embeddings") is True


def _lm_head_name(names: list[str]) -> str | None:
    return next((n for n in LM_HEAD_PREFERRED if n in names), None)


def _local_lm_head(folder: Path) -> torch.Tensor:
    checkpoint = read_checkpoint(folder)
    name = _lm_head_name(list(checkpoint.tensors))
    if name is None:
        config = folder / "config.json"
        if not _tied(load_json_file(config) if config.is_file() else None):
            raise DraftFormatError(NO_LM_HEAD, path=folder, tensor="lm_head.weight")
        name = _pick(list(checkpoint.tensors), folder)
    with safe_open(str(checkpoint.tensors[name].file), framework="pt") as fh:
        return fh.get_tensor(name)


NO_LM_HEAD = "no lm_head.weight in the target checkpoint, and its config does not tie it to the embedding"


def _hub_lm_head(repo_id: str, revision: str | None) -> torch.Tensor:
    from eagle3_quant.reading.hub_tensor import read_hub_json, read_hub_tensor

    found = read_hub_tensor(repo_id, _lm_head_name, revision)
    if found is None:
        if not _tied(read_hub_json(repo_id, "config.json", revision)):
            raise DraftFormatError(NO_LM_HEAD, path=repo_id, tensor="lm_head.weight")
        found = read_hub_tensor(repo_id, lambda names: _pick(names, Path(repo_id)), revision)
    info = found.info
    if info.dtype not in TORCH_DTYPES:
        raise DraftFormatError(f"dtype {info.dtype} is not a float lm_head", path=f"{repo_id}/{info.file}",
                               tensor=info.name)
    return torch.frombuffer(bytearray(found.data), dtype=TORCH_DTYPES[info.dtype]).reshape(info.shape)


TORCH_DTYPES = {"BF16": torch.bfloat16, "F16": torch.float16, "F32": torch.float32}
