"""The target model: its config checked against the draft, its tokenizer, its weights placed on devices."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from eagle3_quant.errors import CalibrationDataError, SourceNotFoundError, TargetMismatchError
from eagle3_quant.reading.config import DraftConfig
from eagle3_quant.reading.hub_errors import hub_failure
from eagle3_quant.reading.hub_reach import reach_hub_for
from eagle3_quant.reading.repo_ids import repo_id_problem
from eagle3_quant.reading.target_precision import TargetPrecision, read_precision, serve_refusal

if TYPE_CHECKING:
    from eagle3_quant.engines.environment import EngineInfo

DTYPE_NAMES = ("bfloat16", "float16", "float32")


@dataclass(frozen=True)
class TargetSpec:
    name: str              # absolute path, or the Hub repo id
    num_layers: int
    hidden_size: int
    vocab_size: int
    dtype: str             # the dtype its config declares (bfloat16 when it declares none we know)
    architecture: str
    precision: TargetPrecision = TargetPrecision(None, "bfloat16", "bfloat16")   # as served (quantized or not)


def target_name(target: str | Path) -> str:
    path = Path(target).expanduser()
    if path.exists():
        return str(path.resolve())
    problem = repo_id_problem(str(target))
    if problem:     # refused before any request
        raise SourceNotFoundError(f"no such folder, and {problem}", path=str(target))
    return str(target)


def read_target(target: str | Path, trust_remote_code: bool = False, quantization: str | None = None) -> TargetSpec:
    """Read the target's config (no weights); the text part of a multimodal config; its precision as served
    (`quantization`: vLLM's online quantization of a BF16 target, e.g. "fp8")."""
    from transformers import AutoConfig

    name = target_name(target)
    reach_hub_for(name)
    try:
        config = AutoConfig.from_pretrained(name, trust_remote_code=trust_remote_code)
    except (OSError, ValueError) as exc:
        raise hub_failure(exc, name) or SourceNotFoundError(f"cannot read the target's config ({exc})",
                                                            path=name) from exc
    text = config.get_text_config()
    dtype = getattr(text, "dtype", None) or getattr(config, "dtype", None) or getattr(config, "torch_dtype", None)
    dtype = str(dtype).removeprefix("torch.") if dtype is not None else "bfloat16"
    dtype = dtype if dtype in DTYPE_NAMES else "bfloat16"
    try:
        precision = read_precision(config.to_dict(), quantization, dtype)
    except ValueError as exc:
        raise TargetMismatchError(str(exc), path=name, field="target_quantization") from None
    return TargetSpec(name, int(text.num_hidden_layers), int(text.hidden_size), int(text.vocab_size), dtype,
                      (config.architectures or ["?"])[0], precision)


def check_target(spec: TargetSpec, draft: DraftConfig, draft_where: str) -> None:
    """The draft's fc reads 3 x target hidden; its d2t maps into the target vocab."""
    if draft.target_hidden_size != spec.hidden_size:
        raise TargetMismatchError(
            f"the draft expects target hidden size {draft.target_hidden_size} but the target {spec.name} has "
            f"hidden_size {spec.hidden_size}", path=draft_where, field="target_hidden_size",
            hint="is this the draft's target?")
    if draft.vocab_size != spec.vocab_size:
        raise TargetMismatchError(
            f"the draft expects a target vocab of {draft.vocab_size} but the target {spec.name} has vocab_size "
            f"{spec.vocab_size}", path=draft_where, field="vocab_size", hint="is this the draft's target?")


def check_servable(spec: TargetSpec, engine: EngineInfo | None) -> None:
    """A quantized target the backend cannot run here is refused before any work: in vLLM's engine
    (`engine`), what its platform cannot serve (`serve_refusal`); in transformers, an MX target on a CPU (Quark's
    MXFP4 kernels are GPU-only and its torch path fails on bfloat16)."""
    precision = spec.precision
    if engine is not None:
        why = serve_refusal(precision, engine.cpu, bool(engine.quark))
    elif precision.mx and not torch_has_gpu():
        why = ("transformers runs a Quark MX target through Quark's kernels, which are GPU-only (its torch path "
               "fails on bfloat16 here); vLLM's engine runs it through its MX emulation kernels: add --backend vllm")
    else:
        why = None
    if why:
        raise TargetMismatchError(f"cannot run this {precision.describe()} target: {why}", path=spec.name,
                                  field="target")


def torch_has_gpu() -> bool:
    import torch

    return torch.cuda.is_available()


def load_tokenizer(spec: TargetSpec, trust_remote_code: bool = False):
    from transformers import AutoTokenizer

    reach_hub_for(spec.name)
    try:
        return AutoTokenizer.from_pretrained(spec.name, trust_remote_code=trust_remote_code)
    except (OSError, ValueError) as exc:
        raise hub_failure(exc, spec.name) or SourceNotFoundError(f"cannot load the target's tokenizer ({exc})",
                                                                 path=spec.name) from exc


def load_model(spec: TargetSpec, dtype: str, max_memory: dict | None = None, trust_remote_code: bool = False,
               device: str | None = None):
    """`device` None or "cuda": on a GPU machine accelerate's device_map="auto" spreads the layers over every GPU,
    then CPU RAM; "cuda:N": that GPU alone; "cpu" (or no GPU): the model loads normally on the CPU."""
    import torch
    from transformers import AutoModelForCausalLM

    if device is not None and device != "cpu" and not torch.cuda.is_available():
        raise CalibrationDataError(f"--device {device}: this machine has no GPU torch can use", field="device",
                                   hint="use --device cpu, or leave it out")
    kwargs = {"dtype": getattr(torch, dtype), "trust_remote_code": trust_remote_code}
    if device is not None and device.startswith("cuda:"):
        kwargs["device_map"] = {"": int(device.split(":")[1])}
    elif device != "cpu" and torch.cuda.is_available():
        kwargs["device_map"] = "auto"
        if max_memory:
            kwargs["max_memory"] = max_memory
    reach_hub_for(spec.name)
    model = AutoModelForCausalLM.from_pretrained(spec.name, **kwargs)
    return model.eval()


def input_device(model):
    """Where input ids go: the embedding's device (accelerate moves them on between layers)."""
    import torch

    placed = [d for d in getattr(model, "hf_device_map", {}).values() if d not in ("cpu", "disk")]
    if placed:
        first = placed[0]
        return torch.device(f"cuda:{first}" if isinstance(first, int) else first)
    return model.get_input_embeddings().weight.device
