"""The real pair's training loop: a killed run resumes from its checkpoint with its curves and its CPU time."""

from __future__ import annotations

from types import SimpleNamespace

import torch

from eagle3_quant.runtime.model import Eagle3Draft
from eagle3_quant.runtime.saving import new_draft_config
from fixtures.real_pair.train import Checkpoint, Recipe, train

VOCAB, HIDDEN, LENGTH = 64, 32, 80


def tiny_draft() -> Eagle3Draft:
    config = new_draft_config(hidden_size=HIDDEN, num_attention_heads=2, intermediate_size=64, vocab_size=VOCAB,
                              draft_vocab_size=VOCAB, torch_dtype="float32")
    draft = Eagle3Draft.from_config(config, torch.float32, seed=0, with_embedding=False)
    draft.set_embedding(torch.randn(VOCAB, HIDDEN, generator=torch.Generator().manual_seed(1)))
    return draft


def samples(count: int, seed: int) -> list:
    gen = torch.Generator().manual_seed(seed)
    rows = []
    for _ in range(count):
        ids = torch.randint(VOCAB, (LENGTH,), generator=gen)
        rows.append(SimpleNamespace(input_ids=ids, target_next_ids=torch.roll(ids, -1), generated_from=40,
                                    aux_hidden_states=torch.randn(LENGTH, 3 * HIDDEN, generator=gen)))
    return rows


def run(checkpoint: Checkpoint, cpu_before: float = 0.0) -> dict:
    recipe = Recipe(steps=4, lr=1e-3, warmup=1, eval_every=2, patience=99, min_steps=0)
    return train(tiny_draft(), samples(4, 0), samples(1, 9), torch.arange(VOCAB), recipe, minutes=60,
                 checkpoint=checkpoint, cpu_before=cpu_before)


def test_each_dev_point_counts_cpu_time_on_from_the_earlier_training(tmp_path):
    trained = run(Checkpoint(tmp_path / "checkpoint.pt", {"run": 1}), cpu_before=1000.0)
    cpu = [point["cpu_seconds"] for point in trained["dev_curve"]]
    assert [point["step"] for point in trained["dev_curve"]] == [2, 4]
    assert 1000.0 < cpu[0] <= cpu[1] <= 1000.0 + trained["cpu_seconds"] + 0.1
    assert trained["cpu_seconds"] > 0 and trained["seconds"] > 0


def test_a_resumed_run_keeps_the_cpu_time_and_curves_of_the_killed_part(tmp_path):
    checkpoint = Checkpoint(tmp_path / "checkpoint.pt", {"run": 1})
    first = run(checkpoint)
    saved = torch.load(checkpoint.path, weights_only=True)
    assert saved["step"] == 4 and saved["cpu_seconds"] > 0
    resumed = run(checkpoint)
    assert resumed["resumed_at"] == 4
    assert resumed["dev_curve"] == first["dev_curve"]
    assert resumed["cpu_seconds"] >= saved["cpu_seconds"]
    assert resumed["seconds"] >= saved["seconds"]


def test_a_checkpoint_of_other_settings_starts_over(tmp_path, capsys):
    run(Checkpoint(tmp_path / "checkpoint.pt", {"run": 1}))
    again = run(Checkpoint(tmp_path / "checkpoint.pt", {"run": 2}))
    assert again["resumed_at"] is None
    assert "written for other settings: starting over" in capsys.readouterr().out
    assert [point["step"] for point in again["dev_curve"]] == [2, 4]


def test_the_shipped_card_is_rendered_from_its_training_record():
    import json

    from fixtures.real_pair.card import card_text
    from fixtures.real_pair.draft_files import DRAFT_DIR

    record = json.loads((DRAFT_DIR / "training.json").read_text())
    card = card_text(record)
    assert (DRAFT_DIR / "README.md").read_text() == card
    best = next(point for point in record["dev_curve"] if point["step"] == record["best_step"])
    assert f"| {best['step']} | {best['acceptance_length']:.3f} |" in card
    assert f"{best['cpu_seconds'] / 3600:.2f} |" in card
    assert f"{record['train_cpu_seconds'] / 3600:.1f} CPU h in all" in card
    assert set(record["offline_acceptance"]["heldout_by_kind"]) >= {"multi-turn", "arithmetic and reasoning"}
    assert "| multi-turn | 24 |" in card
