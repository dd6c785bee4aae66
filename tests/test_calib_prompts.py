from __future__ import annotations

import pytest
from calib_capture_fixtures import chat_rows, text_rows, write_jsonl

from eagle3_quant.calib.dataset import load_rows, pick_column
from eagle3_quant.calib.prompts import PromptSpec, sample_prompts
from eagle3_quant.errors import CalibrationDataError


def spec(data, **kw) -> PromptSpec:
    kw.setdefault("num_samples", 6)
    kw.setdefault("seq_len", 256)
    kw.setdefault("min_tokens", 4)
    return PromptSpec(str(data), **kw)


def template_ids(tokenizer, messages, generation=False) -> tuple[int, ...]:
    text = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=generation)
    return tuple(tokenizer(text, add_special_tokens=False)["input_ids"])


def test_messages_jsonl_rendered_with_the_chat_template(chat_jsonl, tokenizer):
    prompts = sample_prompts(spec(chat_jsonl), tokenizer)
    rows = chat_rows(24)
    assert prompts.column.name == "messages" and prompts.column.chat
    assert len(prompts.prompts) == 6 and prompts.dataset_rows == 24
    for row, ids in zip(prompts.rows, prompts.prompts, strict=True):
        assert ids == template_ids(tokenizer, rows[row]["messages"])
        assert ids[0] == tokenizer.bos_token_id
        assert tokenizer.decode(ids).endswith("<|end|>")     # the assistant's answer is part of the prompt


def test_generation_prompt_drops_the_answer_and_asks_for_one(chat_jsonl, tokenizer):
    prompts = sample_prompts(spec(chat_jsonl, generate_tokens=8), tokenizer)
    rows = chat_rows(24)
    for row, ids in zip(prompts.rows, prompts.prompts, strict=True):
        assert ids == template_ids(tokenizer, rows[row]["messages"][:2], generation=True)
        assert tokenizer.decode(ids).endswith("<|assistant|>")


def test_sharegpt_conversations_equal_the_same_messages(tmp_path, tokenizer):
    role = {"system": "system", "user": "human", "assistant": "gpt"}
    rows = [{"id": i, "conversations": [{"from": role[m["role"]], "value": m["content"]} for m in r["messages"]]}
            for i, r in enumerate(chat_rows(10))]
    share = sample_prompts(spec(write_jsonl(tmp_path / "sg.jsonl", rows)), tokenizer)
    plain = sample_prompts(spec(write_jsonl(tmp_path / "m.jsonl", chat_rows(10))), tokenizer)
    assert share.column.name == "conversations"
    assert share.prompts == plain.prompts and share.rows == plain.rows


def test_text_parquet_is_plain_text_with_special_tokens(tmp_path, tokenizer):
    import datasets

    path = tmp_path / "t.parquet"
    datasets.Dataset.from_list(text_rows(12)).to_parquet(str(path))
    prompts = sample_prompts(spec(path), tokenizer)
    assert prompts.column.name == "text" and not prompts.column.chat
    for row, ids in zip(prompts.rows, prompts.prompts, strict=True):
        assert ids == tuple(tokenizer(text_rows(12)[row]["text"])["input_ids"])


def test_arrow_folder_and_arrow_file(tmp_path, tokenizer):
    import datasets

    datasets.Dataset.from_list(text_rows(9)).save_to_disk(str(tmp_path / "saved"))
    from_folder = sample_prompts(spec(tmp_path / "saved"), tokenizer)
    arrow_file = next((tmp_path / "saved").glob("*.arrow"))
    from_file = sample_prompts(spec(arrow_file), tokenizer)
    assert from_folder.prompts == from_file.prompts and len(from_file.prompts) == 6


def test_named_column_wins_and_unknown_column_is_listed(tmp_path, tokenizer):
    rows = [{"messages": r["messages"], "text": t["text"]} for r, t in zip(chat_rows(8), text_rows(8), strict=True)]
    data = write_jsonl(tmp_path / "both.jsonl", rows)
    assert sample_prompts(spec(data), tokenizer).column.name == "messages"
    assert sample_prompts(spec(data, column="text"), tokenizer).column.name == "text"
    with pytest.raises(CalibrationDataError, match=r"no column 'prompt'; columns: messages, text"):
        sample_prompts(spec(data, column="prompt"), tokenizer)


def test_no_usable_column_and_unknown_role_are_clear_errors(tmp_path, tokenizer):
    with pytest.raises(CalibrationDataError, match="no messages / conversations / text column.*--column"):
        pick_column(load_rows(str(write_jsonl(tmp_path / "q.jsonl", [{"question": "x"}]))), None, "q.jsonl")
    bad = write_jsonl(tmp_path / "r.jsonl", [{"messages": [{"role": "narrator", "content": "once"}]}])
    with pytest.raises(CalibrationDataError, match="unknown message role 'narrator'"):
        sample_prompts(spec(bad, min_tokens=1), tokenizer)


def test_missing_dataset_is_a_clear_error(tmp_path, tokenizer):
    with pytest.raises(CalibrationDataError, match="unknown file type '.txt'"):
        sample_prompts(spec(write_jsonl(tmp_path / "a.txt", text_rows(2))), tokenizer)
    with pytest.raises(FileNotFoundError, match="not a Hub dataset id"):
        sample_prompts(spec(tmp_path / "nope" / "x.jsonl"), tokenizer)


def test_truncation_and_length_filter(chat_jsonl, tokenizer):
    full = sample_prompts(spec(chat_jsonl, num_samples=24), tokenizer)
    lengths = sorted(len(p) for p in full.prompts)
    cut = lengths[len(lengths) // 2]
    short = sample_prompts(spec(chat_jsonl, num_samples=24, seq_len=cut), tokenizer)
    assert max(len(p) for p in short.prompts) == cut
    assert short.truncated == sum(n > cut for n in lengths)
    assert all(s == f[:cut] for s, f in zip(short.prompts, full.prompts, strict=True))
    long_only = sample_prompts(spec(chat_jsonl, num_samples=24, min_tokens=cut), tokenizer)
    assert long_only.rows_skipped == sum(n < cut for n in lengths)
    assert all(len(p) >= cut for p in long_only.prompts)


def test_seq_len_must_leave_room_for_the_prompt(chat_jsonl, tokenizer):
    with pytest.raises(CalibrationDataError, match="--seq-len 16 leaves 0 tokens"):
        sample_prompts(spec(chat_jsonl, seq_len=16, generate_tokens=16), tokenizer)


def test_sampling_is_seeded(chat_jsonl, tokenizer):
    a = sample_prompts(spec(chat_jsonl, seed=1), tokenizer)
    b = sample_prompts(spec(chat_jsonl, seed=1), tokenizer)
    c = sample_prompts(spec(chat_jsonl, seed=2), tokenizer)
    assert a.rows == b.rows and a.prompts == b.prompts and a.fingerprint() == b.fingerprint()
    assert a.rows != c.rows and a.fingerprint() != c.fingerprint()
    assert len(set(a.rows)) == len(a.rows) == 6


def test_token_id_prompts_file_is_taken_as_is_in_the_seeded_order(tmp_path):
    import torch
    from safetensors.torch import save_file

    ids = torch.arange(60).reshape(6, 10)
    save_file({"prompts": ids}, tmp_path / "p.safetensors")
    got = sample_prompts(spec(tmp_path / "p.safetensors", num_samples=4, seq_len=8), tokenizer=None)
    order = torch.randperm(6, generator=torch.Generator().manual_seed(0)).tolist()[:4]
    assert got.prompts == tuple(tuple(ids[row, :8].tolist()) for row in order) and got.rows == tuple(order)
    assert (got.truncated, got.rows_skipped, got.dataset_rows, got.column.chat) == (4, 0, 6, False)
    save_file({"prompts": ids.float()}, tmp_path / "f.safetensors")
    with pytest.raises(CalibrationDataError, match="integer matrix") as refused:
        sample_prompts(spec(tmp_path / "f.safetensors"), tokenizer=None)
    assert refused.value.tensor == "prompts"
