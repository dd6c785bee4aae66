"""Options of a calibration capture or import, validated; the ones that shape the data are recorded in the set."""

from __future__ import annotations

from dataclasses import dataclass

from eagle3_quant.calib.backends import DEFAULT_BACKEND, check_backend_options
from eagle3_quant.calib.dump_formats import DumpFormat
from eagle3_quant.calib.target import DTYPE_NAMES
from eagle3_quant.engine_layout import EngineLayout
from eagle3_quant.errors import CalibrationDataError
from eagle3_quant.options import AT_LEAST_0, COUNT, LAYER_ID, SEED, check_device, check_positive, option
from eagle3_quant.reading.target_precision import ONLINE_METHODS
from eagle3_quant.taps.conventions import TapConvention
from eagle3_quant.taps.engine_rules import DEFAULT_ENGINE, Engine

DEFAULT_GENERATE_TOKENS = 64
TAPS_HELP = ("How the draft config counts its aux layer ids: input (EAGLE/vLLM/speculators) or output "
             "(SpecForge/ModelOpt); auto decides from the config.")
IDS_HELP = "Override the draft's aux layer ids, e.g. 2,16,29 (input convention unless tap_convention is output)."


def default_generate_tokens(seq_len: int) -> int:
    return min(DEFAULT_GENERATE_TOKENS, seq_len // 4)


def _check_taps(tap_convention: str, aux_layer_ids, engine: str | None) -> tuple[int, ...] | None:
    if tap_convention not in TapConvention.__members__:
        raise CalibrationDataError(f"{tap_convention!r} is not one of {', '.join(TapConvention.__members__)}",
                                   field="tap_convention")
    if engine is not None and engine not in Engine.__members__:
        raise CalibrationDataError(f"{engine!r} is not one of {', '.join(Engine.__members__)}", field="engine")
    return None if aux_layer_ids is None else tuple(int(i) for i in aux_layer_ids)


@dataclass(frozen=True)
class CalibrationOptions(EngineLayout):
    """The layout fields (`EngineLayout`) apply with the vllm backend only."""

    num_samples: int = option(128, "Prompts to capture (fewer when the dataset runs out).")
    seq_len: int = option(2048, "Tokens per sample at most (prompt + generated).")
    seed: int = option(0, "Seed of the prompt order.")
    column: str | None = option(None, "Dataset column (default: messages, conversations or text, whichever exists).")
    split: str = option("train", "Dataset split.")
    subset: str | None = option(None, "Dataset configuration name.")
    min_tokens: int = option(16, "Skip prompts shorter than this.")
    generate_tokens: int | None = option(
        None, f"Append the target's own greedy continuation of at most this many tokens to each prompt (default "
              f"{DEFAULT_GENERATE_TOKENS}, at most a quarter of seq_len; 0 keeps the prompts as they are).")
    engine: str = option(DEFAULT_ENGINE.value, "The serving engine whose layer taps are captured (vllm or sglang; "
                                               "they differ for drafts that count their ids as layer outputs).")
    tap_convention: str = option(TapConvention.auto.value, TAPS_HELP)
    aux_layer_ids: tuple[int, ...] | None = option(None, IDS_HELP)
    dtype: str = option("auto", "Run the target and store the states in this dtype (auto: the target's dtype).")
    trust_remote_code: bool = option(False, "Allow the target's own modelling code from its repository.")
    max_memory: dict | None = option(None, "accelerate max_memory per device (GPU machines).")
    # --backend vllm: the target runs in vLLM's engine (calib/vllm_capture.py)
    backend: str = option(DEFAULT_BACKEND, "Where the target runs: transformers (in this process) or vllm (vLLM's "
                                           "engine in its own Python, batched; its hidden-state export).")
    engine_python: str | None = option(None, "vllm backend: the Python of the vLLM environment (default: "
                                             "EAGLE3_QUANT_ENGINE_PYTHON, else .venv-engine).", pipeline=False)
    max_num_seqs: int | None = option(None, "vllm backend: sequences vLLM runs at once (default: vLLM's).")
    target_quantization: str | None = option(None, "vllm backend: serve a BF16 target quantized by vLLM at load "
                                                   "(vLLM's --quantization, e.g. fp8), the target as it is served.",
                                             pipeline=False)
    engine_timeout: float = option(6 * 3600.0, "vllm backend: seconds the engine run may take (load included).")
    device: str | None = option(None, "Where the target runs: cpu; cuda (its layers fill every GPU, then CPU RAM: "
                                      "accelerate's device_map auto; the default when there is a GPU, else the CPU); "
                                      "or cuda:N (that GPU alone).")
    batch_size: int | None = option(None, "Prompts the transformers backend runs together (left-padded, attention "
                                          "mask, one KV cache); default: 32, fewer when the longest batch's logits "
                                          "and hidden states would take over a quarter of the free memory.")
    threads: int | None = option(None, "torch CPU threads; default: the cores no other process is running on, "
                                       "checked again between batches (OMP_NUM_THREADS, when set, is kept).")
    force: bool = option(False, "Replace OUT, or an interrupted run made with other options.", pipeline=False)
    revision: str | None = option(None, "Hub revision of the draft.", pipeline=False)
    shard_samples: int = option(64, "Samples per shard file at most.", pipeline=False)
    shard_bytes: int = option(1 << 30, "Bytes per shard file at most.", pipeline=False)

    def __post_init__(self) -> None:
        super().__post_init__()
        for name in ("num_samples", "seq_len", "shard_samples", "shard_bytes"):
            COUNT.check(getattr(self, name), name, CalibrationDataError, required=True)
        if self.generate_tokens is None:
            object.__setattr__(self, "generate_tokens", default_generate_tokens(self.seq_len))
        for name in ("min_tokens", "generate_tokens"):
            AT_LEAST_0.check(getattr(self, name), name, CalibrationDataError, required=True)
        SEED.check(self.seed, "seed", CalibrationDataError, required=True)
        object.__setattr__(self, "aux_layer_ids", _check_taps(self.tap_convention, self.aux_layer_ids, self.engine))
        check_device(self.device)
        check_positive(self.batch_size, "batch_size")
        check_positive(self.threads, "threads")
        if self.dtype not in ("auto", *DTYPE_NAMES):
            raise CalibrationDataError(f"{self.dtype!r} is not one of auto, {', '.join(DTYPE_NAMES)}", field="dtype")
        check_backend_options(self)
        if self.target_quantization is not None and self.target_quantization not in ONLINE_METHODS:
            raise CalibrationDataError(f"{self.target_quantization!r} is not one of {', '.join(ONLINE_METHODS)}",
                                       field="target_quantization")


@dataclass(frozen=True)
class ImportOptions:
    target: str | None = option(None, "Target model folder or Hub id: needed for SpecForge files (its lm_head "
                                      "gives the next tokens) and for default taps; checked against the draft.")
    engine: str | None = option(None, "The serving engine whose taps the dump must hold (default: the engine the "
                                      "dump records, else any engine whose taps it holds; SpecForge files: vllm).")
    tap_convention: str = option(TapConvention.auto.value, TAPS_HELP)
    aux_layer_ids: tuple[int, ...] | None = option(None, IDS_HELP)
    format: str = option(DumpFormat.auto.value, "What the dump is: calibration (this project's), specforge "
                                                "(data_*.ckpt), vllm (extract_hidden_states files), speculators "
                                                "(hs_{i}.safetensors); auto tells them apart.")
    dump_layer_ids: tuple[int, ...] | None = option(
        None, "vllm/speculators dumps: the eagle_aux_hidden_state_layer_ids the engine ran with (inputs of layer k, "
              "the layer count = the final layer); default: every candidate's layers plus the final layer (what "
              "calibrate --backend vllm asks vLLM for), else the draft's taps as the engine reads them plus the "
              "final layer.")
    force: bool = option(False, "Replace OUT if it exists.", pipeline=False)
    revision: str | None = option(None, "Hub revision of the draft.", pipeline=False)
    shard_samples: int = option(64, "Samples per shard file at most.", pipeline=False)
    shard_bytes: int = option(1 << 30, "Bytes per shard file at most.", pipeline=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "aux_layer_ids", _check_taps(self.tap_convention, self.aux_layer_ids, self.engine))
        if self.format not in DumpFormat.__members__:
            raise CalibrationDataError(f"{self.format!r} is not one of {', '.join(DumpFormat.__members__)}",
                                       field="format")
        if self.dump_layer_ids is not None:
            for i in self.dump_layer_ids:
                LAYER_ID.check(i, "dump_layer_ids", CalibrationDataError, required=True)
            object.__setattr__(self, "dump_layer_ids", tuple(self.dump_layer_ids))
        for name in ("shard_samples", "shard_bytes"):
            COUNT.check(getattr(self, name), name, CalibrationDataError, required=True)
