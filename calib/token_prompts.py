"""Prompts already tokenized: a ``.safetensors`` file with an integer ``prompts`` tensor [N, P] (the tiny pair's
held-out prompts; what `bench --prompts` and `calibrate --data` both take). Its rows are token ids of the target's
tokenizer, used as they are: no chat template is applied."""

from __future__ import annotations

from pathlib import Path

from eagle3_quant.errors import CalibrationDataError

PROMPTS_TENSOR = "prompts"
SUFFIX = ".safetensors"


def is_token_prompts(data: str | Path) -> bool:
    path = Path(data).expanduser()
    return path.suffix == SUFFIX and path.is_file()


def read_token_prompts(path: str | Path, count: int | None = None) -> list[list[int]]:
    """The first `count` rows (all when None) of the file's ``prompts`` tensor; one error naming the file and the
    tensor otherwise."""
    from safetensors import SafetensorError, safe_open

    path = Path(path).expanduser()
    try:
        with safe_open(str(path), framework="pt") as fh:
            if PROMPTS_TENSOR not in fh.keys():
                raise CalibrationDataError(f"no tensor {PROMPTS_TENSOR!r} (holds {', '.join(list(fh.keys())[:5])})",
                                           path=path, tensor=PROMPTS_TENSOR)
            tensor = fh.get_tensor(PROMPTS_TENSOR)
    except SafetensorError as exc:
        raise CalibrationDataError(f"not a readable safetensors file ({exc})", path=path) from exc
    if tensor.dim() != 2 or tensor.dtype.is_floating_point:
        raise CalibrationDataError(f"must be an integer matrix [prompts, tokens], got {tensor.dtype} "
                                   f"{tuple(tensor.shape)}", path=path, tensor=PROMPTS_TENSOR)
    return (tensor if count is None else tensor[:count]).long().tolist()
