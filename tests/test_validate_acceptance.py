"""Acceptance simulation arithmetic on hand-made chains (no model)."""

from __future__ import annotations

import math

import torch

from eagle3_quant.runtime.acceptance import (
    acceptance_stats,
    accepted_counts,
    engine_walk,
    paired_ratio,
    valid_starts,
)


def greedy_sample(length: int, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """A sample that is the target's own greedy text: input_ids[t+1] == target_next[t]."""
    gen = torch.Generator().manual_seed(seed)
    ids = torch.randint(0, 50, (length + 1,), generator=gen)
    return ids[:-1], ids[1:]


def test_valid_starts_need_greedy_tokens_for_every_step():
    ids, nxt = greedy_sample(10)
    assert valid_starts(ids, nxt, 3).tolist() == [True] * 7 + [False] * 2     # step 3 of start 7 needs nxt[10]
    ids = ids.clone()
    ids[5] = (nxt[4] + 1) % 50                     # token 5 is not what the target would have said
    starts = valid_starts(ids, nxt, 3)
    # start t feeds back tokens t+2 and t+3: starts 2 and 3 use token 5
    assert starts.tolist() == [True, True, False, False, True, True, True, False, False]
    assert valid_starts(ids, nxt, 1).sum() == 9    # one step feeds nothing back


def test_accepted_counts_stop_at_the_first_miss():
    ids, nxt = greedy_sample(8)
    k = 3
    perfect = torch.stack([nxt[t + 1:t + 1 + k] for t in range(5)] + [torch.zeros(k, dtype=torch.long)] * 2)
    starts = valid_starts(ids, nxt, k)
    assert accepted_counts(perfect, nxt, starts).tolist() == [3] * 5
    wrong = perfect.clone()
    wrong[0, 0] += 1       # first step wrong: nothing accepted even though steps 2, 3 match
    wrong[1, 1] += 1
    wrong[2, 2] += 1
    assert accepted_counts(wrong, nxt, starts).tolist() == [0, 1, 2, 3, 3]


def test_stats_follow_vllm_definitions():
    stats = acceptance_stats([torch.tensor([0, 1, 2, 3]), torch.tensor([3, 3])], k=3)
    assert stats.drafts == 6
    assert math.isclose(stats.acceptance_length, 1 + 12 / 6)
    assert stats.per_position == (5 / 6, 4 / 6, 3 / 6)


def test_paired_ratio_and_interval():
    gen = torch.Generator().manual_seed(0)
    reference = [torch.randint(0, 4, (60,), generator=gen) for _ in range(80)]
    same = paired_ratio(reference, [c.clone() for c in reference])
    assert same.ratio == 1.0 and same.low == 1.0 and same.high == 1.0
    worse = [c.clone() for c in reference]
    for c in worse[::4]:                           # every 4th sample loses one accepted token per chain
        c.sub_(1).clamp_(min=0)
    result = paired_ratio(reference, worse)
    n = sum(len(c) for c in reference)
    expected = (n + sum(float(c.sum()) for c in worse)) / (n + sum(float(c.sum()) for c in reference))
    assert math.isclose(result.ratio, expected)
    assert result.low < result.ratio < result.high < 1.0


def test_engine_walk_drafts_where_vllm_would():
    """First chain at the last prompt position; after a chain with n accepted steps the engine has n + 1 new
    tokens (the bonus one is the target's), so the next chain starts n + 1 positions on; the walk ends where no
    whole chain can be judged."""
    ids, nxt = greedy_sample(20)
    k = 3
    starts = valid_starts(ids, nxt, k)                              # 0..16 valid
    proposals = torch.stack([nxt[t + 1:t + 1 + k] if t + 1 + k <= 20 else torch.zeros(k, dtype=torch.long)
                             for t in range(19)])                   # every chain fully accepted ...
    proposals[7, 1] += 1                                            # ... but the one at 7 keeps only its first step
    proposals[9, 0] += 1                                            # and the one at 9 none
    walked = engine_walk(proposals, nxt, starts, first=3)
    assert walked.tolist() == [3, 1, 0, 3, 3]                      # starts 3, 7, 9, 10, 14; 18 is past the end
    late = valid_starts(ids, nxt, k)
    late[10] = False                                                # the text stops being greedy there
    assert engine_walk(proposals, nxt, late, first=3).tolist() == [3, 1, 0]


def test_paired_ratio_counts_each_drafts_own_chains():
    """An engine walk drafts a different number of chains per draft: each acceptance length is its own mean."""
    reference = [torch.tensor([3, 3]), torch.tensor([1])]            # 3 chains, 7 accepted: AL 1 + 7/3
    candidate = [torch.tensor([0, 0, 3]), torch.tensor([1, 0])]      # 5 chains, 4 accepted: AL 1 + 4/5
    result = paired_ratio(reference, candidate)
    assert math.isclose(result.ratio, (1 + 4 / 5) / (1 + 7 / 3))
