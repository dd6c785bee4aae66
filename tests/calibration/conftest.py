"""Session fixtures: the tiny target saved once, its draft, tokenizer, model, a chat dataset."""

from __future__ import annotations

from pathlib import Path

import pytest
from calib_fixtures import DRAFT, DRAFT_IDS, TARGET, chat_rows, write_jsonl

from eagle3_quant.synthetic import write_synthetic_draft
from eagle3_quant.synthetic_target import write_tiny_target


@pytest.fixture(scope="session")
def tiny_target(tmp_path_factory) -> Path:
    return write_tiny_target(tmp_path_factory.mktemp("target") / "tiny-llama", TARGET)


@pytest.fixture(scope="session")
def tiny_draft(tmp_path_factory) -> Path:
    return write_synthetic_draft(tmp_path_factory.mktemp("draft") / "draft", DRAFT, aux_layer_ids=DRAFT_IDS)


@pytest.fixture(scope="session")
def tokenizer(tiny_target):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(tiny_target)


@pytest.fixture(scope="session")
def target_model(tiny_target):
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(tiny_target).eval()


@pytest.fixture(scope="session")
def chat_jsonl(tmp_path_factory) -> Path:
    return write_jsonl(tmp_path_factory.mktemp("data") / "chat.jsonl", chat_rows(24))
