"""`QuantizeOptions`: everything `quantize_draft` takes besides SRC and OUT, with defaults and help."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from eagle3_quant.devices import PROFILE_CHOICES
from eagle3_quant.engines.choice import check_named_engines
from eagle3_quant.errors import OptionsError, SchemeError
from eagle3_quant.options import DEVICE_HELP, check_device, check_fraction, check_positive, option
from eagle3_quant.records.serve_taps import SERVE_TAPS
from eagle3_quant.schemes import AUTO_ENGINE, DEFAULT_SCHEME, DEVICE_PROFILE_NAMES, SERVING_CHOICES, get_scheme

AUTO_SCHEME = "auto"             # --scheme auto: the cheapest candidate that keeps the acceptance gate
ENGINES = SERVING_CHOICES


@dataclass(frozen=True)
class QuantizeOptions:
    scheme: str = option(DEFAULT_SCHEME, "Quantization scheme; auto: measure a ladder of candidates (schemes, pruned "
                                         "vocabularies, fc quantized where the engine loads it) on --calib, cheapest "
                                         "first, and write the first that keeps --min-acceptance-ratio.",
                         pipeline=False)
    exclude: tuple[str, ...] = option((), "Keep this linear BF16 too: a role (o_proj), a fused name (qkv_proj, "
                                          "gate_up_proj), attention, mlp, or a module name. Repeatable.")
    quantize_fc: bool = option(False, "Quantize fc too (vLLM loads it; SGLang cannot).")
    device: str | None = option(None, DEVICE_HELP)
    calib: Path | None = option(None, "Calibration set (static schemes, --auto-exclude).", pipeline=False)
    auto_exclude: float | None = option(
        None, "Keep BF16 every layer group whose quantization alone changes the draft's top-1 token on more than "
              "this fraction of calibration positions (needs --calib; see `sensitivity`).")
    force: bool = option(False, "Replace OUT if it exists.", pipeline=False)
    revision: str | None = option(None, "Hub revision of SRC.", pipeline=False)
    allow_pickle: bool = option(False, "Accept a draft with only pickle (.bin/.pt) weights: loaded with "
                                       "torch.load(weights_only=True), converted to safetensors; the source is "
                                       "only read.")
    draft_vocab: int | None = option(None, "Prune the draft vocabulary to the N target tokens the target emits "
                                           "most often in the calibration set (needs --calib): lm_head sliced, "
                                           "d2t/t2d written.")
    smooth_alpha: float | None = option(
        None, "SmoothQuant scale migration before quantizing (needs --calib): per input channel s = amax(x)^alpha "
              "/ amax(w)^(1-alpha), a power of two, folded exactly into the preceding norms / linears (0.5 is "
              "SmoothQuant's usual value). The artifact loads as any other.")
    gptq: bool = option(False, "Round the weights with Quark's GPTQ on the inputs the draft sees in --calib "
                               "(its own rollout, every draft step): each weight's code compensates the error "
                               "of the ones before it. Same scales, bytes and config; needs --calib, FP8, INT8 and "
                               "INT4 schemes.")
    rtn: bool = option(False, "w4a16_int4: round to nearest instead of AWQ (no --calib needed).")
    quantize_lm_head: bool = option(False, "Refused: no engine loads a quantized Eagle3 lm_head (the error says "
                                           "why).", pipeline=False)
    verbose: bool = option(False, "Show the libraries' own log (Quark).", pipeline=False)
    min_acceptance_ratio: float = option(
        0.99, "--scheme auto: the gate, acceptance length candidate / BF16 draft on --calib, in (0, 1]: its 95% "
              "interval's lower bound must reach it, and the scheme's validate gates hold.")
    device_profile: str | None = option(
        None, f"--scheme auto: measure only the schemes this device runs natively ({', '.join(DEVICE_PROFILE_NAMES)}, "
              "or current: this machine's GPU); the table says why each other one is left out.", pipeline=False)
    measure_all: bool = option(False, "--scheme auto: measure every candidate (default: cheapest first, up to the "
                                      "first that keeps the gate).", pipeline=False)
    engine: str = option(AUTO_ENGINE, "The serving engines the artifact is for: auto (default) takes every engine "
                                      "whose code serves this draft's format, the scheme and fc's precision, and "
                                      "refuses only when none does; both, vllm or sglang name them, and one that "
                                      "cannot serve the artifact is refused before any work. The manifest and the "
                                      "card say which engines it is for and why another is left out; with --scheme "
                                      "auto, fc in FP8 is tried when vLLM is among them.")
    serve_taps: str = option(
        "trained", "Which target layers the artifact is served with. trained: the ones the draft was trained on "
                   "(the config's convention, or measured on --calib, which holds every candidate): the ids are "
                   "written so that vLLM (top-level eagle_aux_hidden_state_layer_ids, its count) and SGLang "
                   "(eagle_config ids, its count) both feed them; a draft naming no ids needs --calib. as-is: the "
                   "ids as the source wrote them.")

    def __post_init__(self) -> None:
        if self.serve_taps not in SERVE_TAPS:
            raise OptionsError(f"unknown value {self.serve_taps!r}; valid: {', '.join(SERVE_TAPS)}",
                               field="serve_taps")
        if isinstance(self.exclude, str) or self.exclude is None:
            object.__setattr__(self, "exclude", (self.exclude,) if self.exclude else ())
        object.__setattr__(self, "exclude", tuple(self.exclude))
        if self.calib is not None:
            object.__setattr__(self, "calib", Path(self.calib))
        check_device(self.device)
        if not isinstance(self.min_acceptance_ratio, int | float) or isinstance(self.min_acceptance_ratio, bool) \
                or not 0 < self.min_acceptance_ratio <= 1:
            raise OptionsError(f"must be in (0, 1], got {self.min_acceptance_ratio!r}", field="min_acceptance_ratio")
        if self.engine not in ENGINES:
            raise OptionsError(f"unknown engine {self.engine!r}; valid: {', '.join(ENGINES)}", field="engine")
        if self.scheme == AUTO_SCHEME:
            self._check_auto()
            return
        if self.device_profile is not None or self.measure_all:
            raise SchemeError(f"--{'device-profile' if self.device_profile is not None else 'measure-all'} chooses "
                              "among --scheme auto's candidates: add --scheme auto, or drop it",
                              field="device_profile" if self.device_profile is not None else "measure_all")
        chosen = get_scheme(self.scheme)
        check_named_engines(self.engine, chosen, self.quantize_fc)   # auto: decided once the draft is read
        check_fraction(self.auto_exclude, "auto_exclude")
        if chosen.needs_calibration and self.calib is None:
            raise SchemeError(f"scheme {chosen.name!r} has static input scales and needs calibration data "
                              "(--calib CAL, made by `eagle3-quant calibrate`)", field="calib")
        self._check_rounding(chosen)
        check_positive(self.draft_vocab, "draft_vocab")
        if self.draft_vocab is not None and self.calib is None:
            raise SchemeError("--draft-vocab ranks tokens by the target's own next tokens: give --calib CAL",
                              field="calib")
        if self.smooth_alpha is not None:
            self._check_smooth(chosen)
        if self.gptq:
            self._check_gptq(chosen)
        if self.auto_exclude is not None and self.calib is None:
            raise SchemeError("--auto-exclude measures layer sensitivity on calibration data: give --calib CAL",
                              field="calib")

    def _check_smooth(self, chosen) -> None:
        alpha = self.smooth_alpha
        if not isinstance(alpha, int | float) or isinstance(alpha, bool) or not 0 <= alpha <= 1:
            raise OptionsError(f"must be in [0, 1], got {alpha!r}", field="smooth_alpha")
        if self.calib is None:
            raise SchemeError("--smooth-alpha measures each input channel on calibration data: give --calib CAL",
                              field="calib")
        per_token = chosen.input.quantized and chosen.weight.granularity in ("per_channel", "per_tensor")
        if not per_token or self.draft_vocab is not None or self.allow_pickle:
            what = f"scheme {chosen.name}" if not per_token else "--draft-vocab" if self.draft_vocab is not None else \
                "--allow-pickle"
            raise SchemeError(f"--smooth-alpha is for FP8 and INT8 schemes of a safetensors draft: drop {what}",
                              field="smooth_alpha")

    def _check_gptq(self, chosen) -> None:
        if self.calib is None:
            raise SchemeError("--gptq takes each linear's input Hessian from calibration data: give --calib CAL "
                              "(made by `eagle3-quant calibrate`)", field="calib")
        if chosen.mx or chosen.weight.nvfp4:
            raise SchemeError(f"--gptq rounds FP8, INT8 and INT4 weights; {chosen.name} has block-scaled weights "
                              "(Quark's GPTQ would change their shared scales): use ptpc_fp8, fp8, w8a8_int8 or "
                              "w4a16_int4", field="gptq")

    def _check_rounding(self, chosen) -> None:
        """AWQ is w4a16_int4's default rounding: it needs --calib, unless --rtn or --gptq replaces it."""
        if self.rtn and chosen.rounding != "awq":
            raise SchemeError(f"--rtn replaces AWQ, which only w4a16_int4 runs; {chosen.name} already rounds to "
                              "nearest", field="rtn")
        if self.rtn and self.gptq:
            raise SchemeError("--rtn and --gptq are two roundings: choose one", field="rtn")
        awq = chosen.rounding == "awq" and not (self.rtn or self.gptq)
        if awq and self.calib is None:
            raise SchemeError(f"scheme {chosen.name} runs AWQ on calibration data by default: give --calib CAL "
                              "(made by `eagle3-quant calibrate`), or --rtn to round to nearest", field="calib")
        if awq and (self.draft_vocab is not None or self.allow_pickle):
            flag = "--draft-vocab" if self.draft_vocab is not None else "--allow-pickle"
            raise SchemeError(f"AWQ scales a safetensors draft of the full vocabulary: with {flag} give --rtn or "
                              "--gptq", field="rtn")

    def _check_auto(self) -> None:
        if self.device_profile is not None and self.device_profile not in PROFILE_CHOICES:
            raise OptionsError(f"unknown device profile {self.device_profile!r}; valid: {', '.join(PROFILE_CHOICES)}",
                               field="device_profile")
        if self.calib is None:
            raise SchemeError("--scheme auto measures each candidate's acceptance on calibration data: give "
                              "--calib CAL (made by `eagle3-quant calibrate`)", field="calib")
        decided = [name for name, value in (("quantize_fc", self.quantize_fc), ("draft_vocab", self.draft_vocab),
                                            ("auto_exclude", self.auto_exclude),
                                            ("allow_pickle", self.allow_pickle),
                                            ("smooth_alpha", self.smooth_alpha), ("gptq", self.gptq),
                                            ("rtn", self.rtn))
                   if value not in (None, False)]
        if decided:
            flag = decided[0].replace("_", "-")
            raise SchemeError(f"--scheme auto chooses fc's precision and the vocabulary itself, measures "
                              f"round-to-nearest weights and reads safetensors drafts only: drop --{flag} "
                              "(--engine vllm lets it try fc in FP8)", field=decided[0])


@dataclass(frozen=True)
class SensitivityOptions:
    scheme: str = option(DEFAULT_SCHEME, "Scheme whose quantized math is simulated.")
    groups: tuple[str, ...] | None = option(
        None, "Measure only this layer group (fc, qkv_proj, o_proj, gate_up_proj, down_proj, lm_head). Repeatable.")
    max_samples: int | None = option(None, "Use at most this many calibration samples.")
    device: str | None = option(None, DEVICE_HELP)
    revision: str | None = option(None, "Hub revision of SRC.")

    def __post_init__(self) -> None:
        get_scheme(self.scheme)
        check_device(self.device)
        check_positive(self.max_samples, "max_samples")
        if self.groups is not None:
            object.__setattr__(self, "groups", tuple(self.groups))
