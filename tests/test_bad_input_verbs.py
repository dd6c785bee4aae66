"""Every case of tests/corpus/verb_cases.py through the real CLI: exit 2, one `error:` line naming the file or
field, no traceback, nothing written or changed under the case's root, and no Hub request."""

from __future__ import annotations

import pytest
from corpus import verb_cases
from corpus.builders import tree_state
from corpus.verb_cases import VERB_CASES, VerbCase

from eagle3_quant.cli import main


@pytest.fixture
def no_hub(monkeypatch):
    """Any Hub request fails the test (the cases must be refused before one)."""
    import huggingface_hub

    def refuse(*args, **kwargs):
        raise AssertionError(f"a Hub request was made: {args} {kwargs}")

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    for name in ("snapshot_download", "hf_hub_download"):
        monkeypatch.setattr(huggingface_hub, name, refuse)
    monkeypatch.setattr(huggingface_hub.HfApi, "_build_hf_headers", refuse, raising=False)


def test_every_verb_is_covered():
    verbs = {c.id.split("-")[0] for c in VERB_CASES}
    assert verbs >= {"validate", "push", "card", "inspect", "run", "sensitivity", "calibrate"}


@pytest.mark.parametrize("case", VERB_CASES, ids=lambda c: c.id)
def test_verb_refuses_in_one_line_and_leaves_nothing(case: VerbCase, tmp_path, monkeypatch, capsys, no_hub,
                                                     quantized_tiny):
    verb_cases.QUANTIZED[:] = [quantized_tiny()[1]]
    root = tmp_path / "case"
    root.mkdir()
    args = case.build(root)
    before = tree_state(root)
    monkeypatch.chdir(root)
    monkeypatch.delenv("EAGLE3_QUANT_DEBUG", raising=False)
    with pytest.raises(SystemExit) as exit_info:
        main(args)
    err = capsys.readouterr().err
    assert exit_info.value.code == 2, err
    lines = err.splitlines()       # a progress bar may come first (calibrate --from-dump reads samples)
    assert lines[-1].startswith("error: ") and sum(x.startswith("error: ") for x in lines) == 1, err
    assert "Traceback" not in err and err.endswith("\n"), err
    err = lines[-1]
    for part in case.says:
        assert part in err, (part, err)
    assert tree_state(root) == before
