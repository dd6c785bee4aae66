"""The target's decoder layer count from its config.json alone (a folder, or a Hub id: that one file), for
`inspect --target`: the engines' default taps depend on it."""

from __future__ import annotations

from pathlib import Path

from eagle3_quant.errors import DraftFormatError, SourceNotFoundError
from eagle3_quant.reading.config import load_config_file
from eagle3_quant.reading.hub_errors import hub_reads
from eagle3_quant.reading.repo_ids import repo_id_problem

TEXT_SECTIONS = ("text_config", "language_config", "llm_config")     # multimodal configs keep the LM's here


def target_layers(target: str | Path, revision: str | None = None) -> int:
    path = Path(target).expanduser()
    if path.is_dir():
        config_path = path / "config.json"
    else:
        problem = repo_id_problem(str(target))
        if problem:
            raise SourceNotFoundError(f"no such folder, and {problem}", path=str(target))
        from huggingface_hub import hf_hub_download
        from huggingface_hub.errors import HfHubHTTPError

        try:
            with hub_reads(str(target)):
                config_path = Path(hf_hub_download(str(target), "config.json", revision=revision))
        except HfHubHTTPError as exc:
            raise SourceNotFoundError(f"cannot read the target's config.json from the Hub: {exc}",
                                      path=str(target)) from exc
    raw = load_config_file(config_path)
    for section in (raw, *(raw[k] for k in TEXT_SECTIONS if isinstance(raw.get(k), dict))):
        layers = section.get("num_hidden_layers")
        if isinstance(layers, int) and not isinstance(layers, bool) and layers > 0:
            return layers
    raise DraftFormatError("names no num_hidden_layers", path=config_path, field="num_hidden_layers")
