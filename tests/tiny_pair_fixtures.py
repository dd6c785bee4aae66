"""The committed tiny real target/draft pair (tests/fixtures/tiny_pair, made by fixtures/make_tiny_pair.py),
its FP8 draft and a calibration set of the target's greedy continuations of held-out prompts (a pytest plugin)."""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

PAIR = Path(__file__).resolve().parent / "fixtures" / "tiny_pair"
FIXTURE_CODE = Path(__file__).resolve().parent.parent / "fixtures"
CALIB_PROMPTS = 128          # x ~52 chain starts each: ~6.7K chains, enough to resolve 1% of acceptance length
NEW_TOKENS = 48
K = 3


def fixture_module(name: str):
    if str(FIXTURE_CODE) not in sys.path:
        sys.path.insert(0, str(FIXTURE_CODE))
    return __import__(name)


@dataclass(frozen=True)
class TinyPair:
    target: Path
    draft: Path              # BF16 draft (SpecForge format, no embedding: it is the target's)
    fp8: Path                # `eagle3-quant quantize` output of `draft`
    calib: Path              # calibration set: greedy continuations of held-out prompts
    prompts: torch.Tensor    # held-out prompts [N, 64]

    def load_target(self):
        from transformers import LlamaForCausalLM

        return LlamaForCausalLM.from_pretrained(self.target, dtype=torch.float32).eval()


@pytest.fixture(scope="session")
def tiny_pair(tmp_path_factory) -> TinyPair:
    from eagle3_quant.quantize.api import quantize_draft

    capture = fixture_module("tiny_capture")
    root = tmp_path_factory.mktemp("tiny-pair")
    prompts = load_file(PAIR / "heldout_prompts.safetensors")["prompts"].long()
    fp8 = quantize_draft(PAIR / "draft", root / "fp8", device="cpu").output
    pair = TinyPair(PAIR / "target", PAIR / "draft", fp8, root / "calib", prompts)
    samples = capture.greedy_samples(pair.load_target(), prompts[:CALIB_PROMPTS], NEW_TOKENS)
    capture.write_calibration(samples, pair.calib, str(pair.target))
    return pair


@pytest.fixture(scope="session")
def union_calib(tiny_pair, tmp_path_factory) -> Path:
    """The calibration set `calibrate` stores for the tiny pair: the same prompts as `tiny_pair.calib`, every
    candidate's layers in one pass (vLLM's reading of the nested ids, hidden_states[0, 1, 2], and the trained
    [1, 2, 3]: their union [0, 1, 2, 3]) and what `calibrate` records about them."""
    from eagle3_quant.reading.draft import read_draft
    from eagle3_quant.taps.capture import capture_taps

    capture = fixture_module("tiny_capture")
    plan = capture_taps(read_draft(tiny_pair.draft).config, 4, "vllm")
    samples = capture.greedy_samples(tiny_pair.load_target(), tiny_pair.prompts[:CALIB_PROMPTS], NEW_TOKENS,
                                     taps=plan.indices)
    return capture.write_calibration(samples, tmp_path_factory.mktemp("union") / "calib", str(tiny_pair.target),
                                     plan.indices, plan.record.extra())


@pytest.fixture(scope="session")
def holdout_calib(tiny_pair, tmp_path_factory) -> Path:
    """A second calibration set, of the other 128 held-out prompts: what `--gptq` (or any data-driven choice)
    learns from, so that `tiny_pair.calib` judges it on prompts it never saw."""
    capture = fixture_module("tiny_capture")
    samples = capture.greedy_samples(tiny_pair.load_target(), tiny_pair.prompts[CALIB_PROMPTS:], NEW_TOKENS)
    return capture.write_calibration(samples, tmp_path_factory.mktemp("holdout") / "calib", str(tiny_pair.target))
