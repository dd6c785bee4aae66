"""The prediction-vs-engine study's arithmetic (benchmarks/studies/predictions.py), the kinds of the real pair's
prompts (multi-turn ones included), and the training recipe of a continued draft (fast)."""

from __future__ import annotations

import json

import pytest
import torch

from benchmarks.studies.predictions import acceptance, per_prompt_gap, walked
from fixtures.real_pair.multi_turn import CHAT_FOLLOW_UPS, CODE_FOLLOW_UPS, MULTI_TURN_FILE, trimmed
from fixtures.real_pair.prompts import FINE_KINDS, HELDOUT_FILE, fine_kind
from fixtures.real_pair.train import Recipe, lr_at


def test_walked_chains_count_drafts_and_acceptance_at_each_position():
    assert walked(torch.tensor([0, 3, 1, 2])) == (4, 3, 2, 1)
    assert walked(torch.tensor([], dtype=torch.long)) == (0, 0, 0, 0)


def test_acceptance_pools_prompts_and_its_interval_holds_the_estimate():
    rows = [(10, 6, 3, 1), (5, 1, 0, 0), (8, 8, 8, 8)]
    cell = acceptance(rows)
    assert cell["acceptance_length"] == pytest.approx(1 + (10 + 1 + 24) / 23, abs=1e-4)
    assert cell["per_position"] == pytest.approx([15 / 23, 11 / 23, 9 / 23], abs=1e-4)
    low, high = cell["interval"]
    assert low < cell["acceptance_length"] < high and (cell["prompts"], cell["drafts"]) == (3, 23)
    same = acceptance([(4, 2, 1, 0)] * 6)
    assert same["interval"] == [same["acceptance_length"]] * 2      # no spread between prompts, none in the interval


def test_per_prompt_gap_is_engine_minus_prediction():
    gap = per_prompt_gap([(4, 4, 2, 0), (4, 0, 0, 0)], [(4, 2, 2, 0), (4, 0, 0, 0)])
    assert (gap["mean"], gap["largest"], gap["over_0_25"]) == (0.25, 0.5, 1)
    assert gap["difference"] == pytest.approx((6 - 4) / 8)          # pooled: 6 vs 4 accepted over 8 steps
    low, high = gap["interval"]
    assert 0.0 <= low <= gap["difference"] <= high <= 0.5
    same = per_prompt_gap([(4, 2, 1, 0)] * 3, [(4, 2, 1, 0)] * 3)
    assert (same["difference"], same["interval"], same["over_0_25"]) == (0.0, [0.0, 0.0], 0)


def test_every_heldout_prompt_has_a_kind_and_a_second_user_turn_is_multi_turn():
    rows = [json.loads(line) for line in HELDOUT_FILE.open()]
    kinds = {fine_kind(row) for row in rows}
    assert kinds == set(FINE_KINDS) - {"multi-turn"}
    turns = {"messages": [{"role": "user", "content": "What is 2 + 2?"}, {"role": "assistant", "content": "4."},
                          {"role": "user", "content": "And times 3?"}], "kind": "reasoning", "source": "x"}
    assert fine_kind(turns) == "multi-turn"
    system = {"messages": [{"role": "system", "content": "Be brief."}, turns["messages"][0]], "kind": "reasoning"}
    assert fine_kind(system) == "arithmetic and reasoning"
    assert fine_kind({"messages": [{"role": "user", "content": "Write a haiku about owls."}], "kind": "chat"}) \
        == "writing"
    assert fine_kind({"messages": [{"role": "user", "content": "What does the `ls` command do?"}],
                      "kind": "code"}) == "code to explain"


def test_a_continued_run_warms_up_again_and_decays_over_its_own_steps():
    recipe = Recipe(steps=1000, lr=1e-3, warmup=50, first_step=1200)
    assert lr_at(0, recipe) == pytest.approx(1e-3 / 50)
    assert lr_at(50, recipe) == pytest.approx(1e-3)
    assert lr_at(1000, recipe) == pytest.approx(1e-3 * 0.05)


def test_multi_turn_prompts_continue_a_heldout_question_with_the_targets_answer_and_a_follow_up():
    heldout = {row["messages"][0]["content"]: row for row in map(json.loads, HELDOUT_FILE.open())}
    rows = [json.loads(line) for line in MULTI_TURN_FILE.open()]
    assert len(rows) >= 20
    for row in rows:
        first, answer, follow = row["messages"]
        assert (first["role"], answer["role"], follow["role"]) == ("user", "assistant", "user")
        assert heldout[first["content"]]["source"] == row["source"]
        assert answer["content"] and follow["content"] in CODE_FOLLOW_UPS + CHAT_FOLLOW_UPS
        assert fine_kind(row) == "multi-turn"
    assert {row["first_kind"] for row in rows} == set(FINE_KINDS) - {"multi-turn"}


def test_an_answer_is_cut_at_its_last_sentence_or_line_end():
    assert trimmed("First sentence. Second one is cu") == "First sentence."
    assert trimmed("def f():\n    return 1\n    # trail") == "def f():\n    return 1"
    assert trimmed("no end at all") == "no end at all"
