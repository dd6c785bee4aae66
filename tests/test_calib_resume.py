from __future__ import annotations

import json

import pytest
import torch

from eagle3_quant.calib.api import calibrate_target
from eagle3_quant.calib.capture import TargetRunner
from eagle3_quant.calib.staging import staging_dir
from eagle3_quant.cli import main
from eagle3_quant.errors import DraftFormatError, OutputExistsError
from eagle3_quant.records.calibration import load_calibration
from eagle3_quant.util.progress import Silent

# batches of 2 prompts, shards of 2 samples: a resume starts where an uninterrupted run starts a batch; one torch
# thread, else the idle cores (checked between batches) decide it and a busy machine changes the float sums
RUN = {"num_samples": 7, "seq_len": 40, "min_tokens": 4, "shard_samples": 2, "batch_size": 2, "threads": 1}


def killed_after(monkeypatch, n: int) -> None:
    """Simulate a kill: the batch that would take the capture past n prompts raises KeyboardInterrupt."""
    real, calls = TargetRunner.capture_batch, {"n": 0}

    def capture_batch(self, prompts, *args, **kwargs):
        calls["n"] += len(prompts)
        if calls["n"] > n:
            raise KeyboardInterrupt
        return real(self, prompts, *args, **kwargs)

    monkeypatch.setattr(TargetRunner, "capture_batch", capture_batch)


def interrupted_at_5(target, draft, data, tmp_path, monkeypatch):
    """(an uninterrupted run's result, OUT of a run killed while capturing its 6th prompt)."""
    whole = calibrate_target(target, draft, data, tmp_path / "whole", **RUN)
    out = tmp_path / "cal"
    with monkeypatch.context() as patch:
        killed_after(patch, 5)
        with pytest.raises(KeyboardInterrupt):
            calibrate_target(target, draft, data, out, **RUN)
    return whole, out


def assert_same_sets(a, b) -> None:
    sa, sb = list(load_calibration(a).samples()), list(load_calibration(b).samples())
    assert len(sa) == len(sb)
    for x, y in zip(sa, sb, strict=True):
        assert torch.equal(x.input_ids, y.input_ids) and torch.equal(x.target_next_ids, y.target_next_ids)
        assert torch.equal(x.aux_hidden_states, y.aux_hidden_states) and x.generated_from == y.generated_from


def test_killed_run_resumes_to_the_uninterrupted_result(tiny_target, tiny_draft, chat_jsonl, tmp_path, monkeypatch):
    whole, out = interrupted_at_5(tiny_target, tiny_draft, chat_jsonl, tmp_path, monkeypatch)
    assert not out.exists()                                   # OUT appears only when complete
    partial = staging_dir(out)
    with pytest.raises(DraftFormatError, match="incomplete"):
        load_calibration(partial)
    assert load_calibration(partial, allow_partial=True).num_samples == 4   # two whole shards; the 5th was pending
    resumed = calibrate_target(tiny_target, tiny_draft, chat_jsonl, out, **RUN)
    assert resumed.resumed_samples == 4 and resumed.captured_samples == 3 and resumed.samples == whole.samples == 7
    assert not partial.exists()
    assert_same_sets(whole.path, out)
    index = json.loads((out / "calib.json").read_text())
    assert index["complete"] is True and [s["samples"] for s in index["shards"]] == [[0, 1], [2, 3], [4, 5], [6]]


class Recorder(Silent):
    """Keeps what the run says."""

    def __init__(self, said: list[str]) -> None:
        self.said = said

    def say(self, text: str) -> None:
        self.said.append(text)


def test_a_resume_captures_a_damaged_shard_again(tiny_target, tiny_draft, chat_jsonl, tmp_path, monkeypatch):
    """Shards are reused only when their sha256 still matches the index: from the first damaged one on, the run
    captures again, and the result equals an uninterrupted run's."""
    whole, out = interrupted_at_5(tiny_target, tiny_draft, chat_jsonl, tmp_path, monkeypatch)
    partial = staging_dir(out)
    shard = partial / "shard-00001.safetensors"
    data = bytearray(shard.read_bytes())
    data[-8:] = bytes(8)                                    # the last state values zeroed: header still readable
    shard.write_bytes(bytes(data))
    said = []
    resumed = calibrate_target(tiny_target, tiny_draft, chat_jsonl, out, **RUN, progress=Recorder(said))
    assert resumed.resumed_samples == 2 and resumed.captured_samples == 5
    assert any("1 shard(s) of the interrupted run differ" in line and "shard-00001" in line for line in said)
    assert_same_sets(whole.path, out)


def test_rerun_of_a_finished_set_does_nothing(tiny_target, tiny_draft, chat_jsonl, tmp_path):
    first = calibrate_target(tiny_target, tiny_draft, chat_jsonl, tmp_path / "cal", **RUN)
    before = {p.name: p.stat().st_mtime_ns for p in first.path.iterdir()}
    again = calibrate_target(tiny_target, tiny_draft, chat_jsonl, tmp_path / "cal", **RUN)
    assert again.captured_samples == 0 and again.samples == 7
    assert {p.name: p.stat().st_mtime_ns for p in first.path.iterdir()} == before


def test_other_options_refused_unless_forced(tiny_target, tiny_draft, chat_jsonl, tmp_path, monkeypatch):
    out = tmp_path / "cal"
    with monkeypatch.context() as patch:
        killed_after(patch, 3)
        with pytest.raises(KeyboardInterrupt):
            calibrate_target(tiny_target, tiny_draft, chat_jsonl, out, **RUN)
    with pytest.raises(OutputExistsError, match=r"interrupted run with other options \(.*extra.seed"):
        calibrate_target(tiny_target, tiny_draft, chat_jsonl, out, **{**RUN, "seed": 9})
    forced = calibrate_target(tiny_target, tiny_draft, chat_jsonl, out, force=True, **{**RUN, "seed": 9})
    assert forced.resumed_samples == 0 and forced.info.extra["seed"] == 9
    with pytest.raises(OutputExistsError, match=r"other options \(extra.num_samples.*--force"):
        calibrate_target(tiny_target, tiny_draft, chat_jsonl, out, **{**RUN, "seed": 9, "num_samples": 3})
    replaced = calibrate_target(tiny_target, tiny_draft, chat_jsonl, out, force=True, **{**RUN, "num_samples": 3})
    assert replaced.samples == 3 and load_calibration(out).info.extra["num_samples"] == 3


def test_a_second_writer_is_locked_out(tiny_target, tiny_draft, chat_jsonl, tmp_path):
    import fcntl

    staging = staging_dir(tmp_path / "cal")
    staging.mkdir()
    with (staging / ".lock").open("w") as held:
        fcntl.flock(held, fcntl.LOCK_EX | fcntl.LOCK_NB)
        with pytest.raises(OutputExistsError, match="another calibrate run is writing this set"):
            calibrate_target(tiny_target, tiny_draft, chat_jsonl, tmp_path / "cal", **RUN)
    assert not (tmp_path / "cal").exists()


def test_out_that_is_not_a_calibration_set_is_kept(tiny_target, tiny_draft, chat_jsonl, tmp_path):
    (tmp_path / "cal").mkdir()
    (tmp_path / "cal" / "notes.txt").write_text("mine")
    with pytest.raises(OutputExistsError, match="already exists.*--force"):
        calibrate_target(tiny_target, tiny_draft, chat_jsonl, tmp_path / "cal", **RUN)
    assert (tmp_path / "cal" / "notes.txt").read_text() == "mine"


def test_out_inside_the_draft_is_refused(tiny_target, tiny_draft, chat_jsonl):
    with pytest.raises(OutputExistsError, match="inside the source folder"):
        calibrate_target(tiny_target, tiny_draft, chat_jsonl, tiny_draft / "cal", **RUN)


def test_cli_calibrate_and_errors(tiny_target, tiny_draft, chat_jsonl, tmp_path, capsys):
    args = ["calibrate", str(tmp_path / "cal"), "--target", str(tiny_target), "--draft", str(tiny_draft),
            "--data", str(chat_jsonl), "--num-samples", "3", "--seq-len", "32", "--min-tokens", "4"]
    with pytest.raises(SystemExit) as code:
        main(args)
    captured = capsys.readouterr()
    out, err = " ".join(captured.out.split()), " ".join(captured.err.split())
    assert code.value.code == 0
    assert "wrote" in out and "3 samples" in out and "taps hidden_states[0, 1, 2, 3]" in out   # both candidates
    assert "note: vllm feeds this draft hidden_states[0, 1, 2] as its config stands, but the config says it was " \
           "trained on hidden_states[1, 2, 3]" in out
    assert "candidate vllm: hidden_states[0, 1, 2]" in err and "capturing hidden_states[0, 1, 2, 3] in one pass" in err
    assert err.index("on disk") < err.index("capture")           # the size estimate came before the progress bar
    assert load_calibration(tmp_path / "cal").num_samples == 3
    with pytest.raises(SystemExit) as code:
        main([*args[:2], "--target", str(tiny_target), "--draft", str(tiny_draft), "--data", str(chat_jsonl),
              "--column", "prompt"])
    err = capsys.readouterr().err
    assert code.value.code == 2 and err.startswith("error: ") and err.strip().count("\n") == 0
    assert "no column 'prompt'" in err


def test_a_disk_too_small_for_the_set_is_refused_before_anything_is_written(tiny_target, tiny_draft, chat_jsonl,
                                                                            tmp_path, monkeypatch, capsys):
    from eagle3_quant.util import resources

    monkeypatch.setattr(resources, "free_disk_bytes", lambda folder: (20_000, folder))
    out = tmp_path / "cal"
    with pytest.raises(SystemExit) as exit_info:
        main(["calibrate", str(out), "--target", str(tiny_target), "--draft", str(tiny_draft), "--data",
              str(chat_jsonl), "--num-samples", "7", "--seq-len", "40", "--min-tokens", "4"])
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.startswith("error:")]
    assert exit_info.value.code == 2 and len(lines) == 1, err
    assert "the calibration set (280 positions x 4 taps x hidden 64 x 4 bytes) needs" in lines[0], lines[0]
    assert "0.02 MB available" in lines[0] and "--num-samples" in lines[0]
    assert list(tmp_path.iterdir()) == []                       # no OUT, no staging folder


def test_a_resume_needs_room_for_the_shards_not_yet_written(tiny_target, tiny_draft, chat_jsonl, tmp_path,
                                                            monkeypatch):
    from eagle3_quant.calib.disk_room import staged_bytes
    from eagle3_quant.util import resources

    whole, out = interrupted_at_5(tiny_target, tiny_draft, chat_jsonl, tmp_path, monkeypatch)
    written, total = staged_bytes(staging_dir(out)), whole.bytes
    assert 0 < written < total
    seen = []

    def free(folder):
        seen.append(folder)
        return int((total - written) * 1.2 * resources.DISK_MARGIN), folder   # room for the rest, not for all

    monkeypatch.setattr(resources, "free_disk_bytes", free)
    resumed = calibrate_target(tiny_target, tiny_draft, chat_jsonl, out, **RUN)
    assert seen and resumed.resumed_samples == 4 and resumed.samples == 7
