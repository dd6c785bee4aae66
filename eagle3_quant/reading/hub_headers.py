"""A Hub draft read from its safetensors headers alone: config.json plus HTTP range requests
(huggingface_hub's ``get_safetensors_metadata``), no weights downloaded. What `inspect` needs."""

from __future__ import annotations

from pathlib import Path

from eagle3_quant.errors import CheckpointFileError, DraftFormatError, SourceNotFoundError
from eagle3_quant.reading.checkpoint import Checkpoint
from eagle3_quant.reading.config import load_config_file, parse_config
from eagle3_quant.reading.draft import DraftCheckpoint, read_draft
from eagle3_quant.reading.formats import detect_format
from eagle3_quant.reading.hub_errors import hub_reads
from eagle3_quant.reading.layout import build_layout
from eagle3_quant.reading.repo_ids import repo_id_problem
from eagle3_quant.reading.safetensors_header import TensorInfo
from eagle3_quant.reading.source import REPO_ID, DraftSource


def read_draft_headers(src: str | Path, revision: str | None = None) -> DraftCheckpoint:
    """A local folder as `read_draft` reads it; a Hub repo id from config.json and its weights' headers."""
    if Path(src).expanduser().exists() or not REPO_ID.match(str(src)) or repo_id_problem(str(src)):
        return read_draft(src, revision)      # a local folder, or an id read_draft refuses before any request
    from huggingface_hub import HfApi, hf_hub_download
    from huggingface_hub.errors import (
        EntryNotFoundError,
        HfHubHTTPError,
        NotASafetensorsRepoError,
        SafetensorsParsingError,
    )

    repo_id = str(src)
    try:
        with hub_reads(repo_id):      # unreachable, no such repository, offline with nothing cached
            config_path = Path(hf_hub_download(repo_id, "config.json", revision=revision))
            metadata = HfApi().get_safetensors_metadata(repo_id, revision=revision)
    except EntryNotFoundError as exc:
        raise DraftFormatError("config.json is missing", path=repo_id) from exc
    except NotASafetensorsRepoError as exc:
        raise DraftFormatError("no model.safetensors or model.safetensors.index.json on the Hub", path=repo_id) \
            from exc
    except SafetensorsParsingError as exc:
        raise CheckpointFileError(f"a safetensors header could not be parsed ({exc})", path=repo_id) from exc
    except HfHubHTTPError as exc:
        raise SourceNotFoundError(f"Hub request failed: {exc}", path=repo_id) from exc
    tensors: dict[str, TensorInfo] = {}
    for file, file_metadata in sorted(metadata.files_metadata.items()):
        for name, info in file_metadata.tensors.items():
            if name in tensors:
                raise CheckpointFileError(f"tensor in both {tensors[name].file} and {file}", path=repo_id,
                                          tensor=name)
            tensors[name] = TensorInfo(name, info.dtype, tuple(info.shape), Path(file), tuple(info.data_offsets))
    source = DraftSource(path=config_path.parent, repo_id=repo_id, revision=revision, commit=config_path.parent.name)
    checkpoint = Checkpoint(config_path.parent, tuple(Path(f) for f in sorted(metadata.files_metadata)), None, tensors)
    raw = load_config_file(config_path)
    fmt = detect_format(tensors, raw, repo_id)
    config = parse_config(raw, fmt, config_path)
    return DraftCheckpoint(source, fmt, config, checkpoint, build_layout(fmt, config, tensors, repo_id))
