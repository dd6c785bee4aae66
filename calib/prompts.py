"""Turn dataset rows into token-id prompts: chat template or plain text, length filter, truncation, seeded order."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

from eagle3_quant.calib.dataset import PromptColumn, load_rows, pick_column, to_messages
from eagle3_quant.calib.token_prompts import PROMPTS_TENSOR, is_token_prompts, read_token_prompts
from eagle3_quant.errors import CalibrationDataError


@dataclass(frozen=True)
class PromptSpec:
    data: str
    num_samples: int
    seq_len: int
    seed: int = 0
    column: str | None = None
    split: str = "train"
    subset: str | None = None
    min_tokens: int = 16
    generate_tokens: int = 0

    @property
    def max_prompt_tokens(self) -> int:
        """Room left for the prompt once the generated continuation fits in seq_len."""
        return self.seq_len - self.generate_tokens


@dataclass(frozen=True)
class PromptSet:
    prompts: tuple[tuple[int, ...], ...]
    rows: tuple[int, ...]          # dataset row of each prompt
    column: PromptColumn
    dataset_rows: int
    rows_skipped: int              # rows read but dropped (too short, no user turn)
    truncated: int                 # prompts cut to max_prompt_tokens

    @property
    def tokens(self) -> int:
        return sum(len(p) for p in self.prompts)

    def fingerprint(self) -> str:
        digest = hashlib.sha256()
        for prompt in self.prompts:
            digest.update(len(prompt).to_bytes(4, "little"))
            digest.update(b"".join(i.to_bytes(4, "little") for i in prompt))
        return digest.hexdigest()


def render(value, column: PromptColumn, tokenizer, for_generation: bool, where: str) -> list[int] | None:
    """Token ids of one row; None when nothing is left to prompt with."""
    if not column.chat:
        if not isinstance(value, str) or not value:
            return None
        return list(tokenizer(value, add_special_tokens=True)["input_ids"])
    messages = to_messages(value, where)
    if for_generation:  # the target writes the answer itself: prompt up to the last user turn
        while messages and messages[-1]["role"] == "assistant":
            messages.pop()
    if not messages:
        return None
    if not tokenizer.chat_template:
        raise CalibrationDataError(f"column {column.name!r} holds chats but the target tokenizer has no chat "
                                   "template", path=where, hint="name a plain-text column with --column")
    text = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=for_generation)
    return list(tokenizer(text, add_special_tokens=False)["input_ids"])


def _token_prompts(spec: PromptSpec) -> PromptSet:
    """Rows of a token-id file in the same seeded order, truncated, those under min_tokens dropped."""
    import torch

    rows = read_token_prompts(spec.data)
    order = torch.randperm(len(rows), generator=torch.Generator().manual_seed(spec.seed)).tolist()
    kept = [row for row in order if len(rows[row]) >= spec.min_tokens][: spec.num_samples]
    if not kept:
        raise CalibrationDataError(f"none of {len(rows)} rows has at least {spec.min_tokens} tokens", path=spec.data,
                                   tensor=PROMPTS_TENSOR)
    prompts = tuple(tuple(rows[row][: spec.max_prompt_tokens]) for row in kept)
    truncated = sum(len(rows[row]) > spec.max_prompt_tokens for row in kept)
    skipped = sum(len(rows[row]) < spec.min_tokens for row in order[: order.index(kept[-1]) + 1])
    return PromptSet(prompts, tuple(kept), PromptColumn(PROMPTS_TENSOR, chat=False), len(rows), skipped, truncated)


def sample_prompts(spec: PromptSpec, tokenizer) -> PromptSet:
    """Rows in a seeded random order, rendered, filtered (< min_tokens dropped), truncated, until num_samples."""
    import torch

    if spec.max_prompt_tokens < max(spec.min_tokens, 1):
        raise CalibrationDataError(f"--seq-len {spec.seq_len} leaves {spec.max_prompt_tokens} tokens for the prompt "
                                   f"after --generate-tokens {spec.generate_tokens}; need at least "
                                   f"{max(spec.min_tokens, 1)}", field="seq_len")
    if is_token_prompts(spec.data):
        return _token_prompts(spec)
    rows = load_rows(spec.data, spec.split, spec.subset)
    column = pick_column(rows, spec.column, spec.data)
    order = torch.randperm(len(rows), generator=torch.Generator().manual_seed(spec.seed)).tolist()
    prompts, picked, skipped, truncated = [], [], 0, 0
    for row in order:
        if len(prompts) == spec.num_samples:
            break
        ids = render(rows[row][column.name], column, tokenizer, spec.generate_tokens > 0, f"{spec.data} row {row}")
        if ids is None or len(ids) < spec.min_tokens:
            skipped += 1
            continue
        if len(ids) > spec.max_prompt_tokens:
            ids, truncated = ids[: spec.max_prompt_tokens], truncated + 1
        prompts.append(tuple(ids))
        picked.append(row)
    if not prompts:
        raise CalibrationDataError(f"none of {len(rows)} rows gives a prompt of at least {spec.min_tokens} tokens",
                                   path=spec.data, field=column.name)
    return PromptSet(tuple(prompts), tuple(picked), column, len(rows), skipped, truncated)
