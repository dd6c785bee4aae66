"""Every verb that reads the Hub ends a failed read in one `error:` line naming the repository and the cause, exit 2:
a Hub that cannot be reached, a repository that does not exist, HF_HUB_OFFLINE with nothing cached."""

from __future__ import annotations

import io
import logging
import shutil
import time

import pytest
import yaml

from eagle3_quant.cli import main
from eagle3_quant.reading.hub_errors import hub_failure

UNREACHABLE = "http://127.0.0.1:9"          # the discard port: nothing listens, the connection is refused
REPO = "nobody-org/missing-draft"


def _point_at(monkeypatch, tmp_path, url: str, offline: bool = False) -> None:
    """huggingface_hub reads HF_ENDPOINT, HF_HOME and HF_HUB_OFFLINE at import: set them in this process too."""
    from huggingface_hub import constants

    monkeypatch.setenv("HF_ENDPOINT", url)
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf-home"))
    monkeypatch.delenv("HF_TOKEN", raising=False)
    if offline:
        monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    else:
        monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.setattr(constants, "ENDPOINT", url)
    monkeypatch.setattr(constants, "HUGGINGFACE_CO_URL_TEMPLATE", url + "/{repo_id}/resolve/{revision}/{filename}")
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path / "hf-home" / "hub"))
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", offline)
    monkeypatch.setattr(constants, "HF_HUB_DISABLE_XET", True)
    monkeypatch.setattr(time, "sleep", lambda seconds: None)      # huggingface_hub's retries, without the waits
    for handler in logging.getLogger("huggingface_hub").handlers:  # bound to an earlier test's (closed) stderr
        if isinstance(handler, logging.StreamHandler):
            monkeypatch.setattr(handler, "stream", io.StringIO())


@pytest.fixture
def unreachable(monkeypatch, tmp_path):
    _point_at(monkeypatch, tmp_path, UNREACHABLE)


@pytest.fixture
def offline(monkeypatch, tmp_path):
    _point_at(monkeypatch, tmp_path, UNREACHABLE, offline=True)


def run_cli(args, capsys):
    with pytest.raises(SystemExit) as exit_info:
        main([str(a) for a in args])
    captured = capsys.readouterr()
    return exit_info.value.code, captured.out, captured.err


def _one_error_line(code: int, err: str, repo: str, cause: str) -> str:
    lines = [line for line in err.splitlines() if line.startswith("error:")]
    assert code == 2 and len(lines) == 1 and "Traceback" not in err, err
    assert lines[0].startswith(f"error: {repo}: ") and cause in lines[0], lines[0]
    return lines[0]


def _verb_args(verb: str, repo: str, tmp_path, make_draft) -> list:
    data = tmp_path / "prompts.jsonl"
    data.write_text('{"text": "hello there"}\n')
    return {
        "inspect": ["inspect", repo],
        "inspect --target": ["inspect", make_draft(), "--target", repo],
        "cost": ["cost", repo],
        "quantize": ["quantize", repo, tmp_path / "out"],
        "sensitivity": ["sensitivity", repo, "--calib", tmp_path / "cal"],
        "calibrate": ["calibrate", tmp_path / "cal", "--draft", repo, "--target", "nobody-org/target", "--data", data],
        "calibrate --target": ["calibrate", tmp_path / "cal", "--draft", make_draft(), "--target", repo,
                               "--data", data],
        "run": ["run", _pipeline(tmp_path, repo)],
    }[verb]


def _pipeline(tmp_path, repo: str):
    path = tmp_path / "pipeline.yaml"
    path.write_text(yaml.safe_dump({"pipeline_version": 1, "source": repo, "workdir": str(tmp_path / "work"),
                                    "push": {"enabled": False}}))
    return path


VERBS = ["inspect", "inspect --target", "cost", "quantize", "sensitivity", "calibrate", "calibrate --target", "run"]


@pytest.mark.parametrize("verb", VERBS)
def test_unreachable_hub_is_one_line_naming_the_repo(verb, unreachable, tmp_path, make_draft, capsys):
    code, out, err = run_cli(_verb_args(verb, REPO, tmp_path, make_draft), capsys)
    if verb == "run":       # the stage table names the failed stage with the same line; exit 2
        assert code == 2 and "Traceback" not in err and f"{REPO}: the Hub at {UNREACHABLE} cannot be reached" in out
        return
    _one_error_line(code, err, REPO, f"the Hub at {UNREACHABLE} cannot be reached")
    assert not (tmp_path / "out").exists() and not (tmp_path / "cal").exists()


@pytest.mark.parametrize("verb", ["inspect", "inspect --target", "cost", "quantize", "calibrate --target"])
def test_offline_with_nothing_cached_says_so(verb, offline, tmp_path, make_draft, capsys):
    code, _, err = run_cli(_verb_args(verb, REPO, tmp_path, make_draft), capsys)
    _one_error_line(code, err, REPO, "HF_HUB_OFFLINE is set and nothing of it is in the local Hub cache")


@pytest.mark.parametrize("verb", ["inspect", "inspect --target", "cost", "quantize", "calibrate --target"])
def test_a_repository_that_does_not_exist(verb, hub, monkeypatch, tmp_path, make_draft, capsys):
    _point_at(monkeypatch, tmp_path, hub.url)
    code, _, err = run_cli(_verb_args(verb, REPO, tmp_path, make_draft), capsys)
    _one_error_line(code, err, REPO, f"no such repository on the Hub at {hub.url}")


def test_a_missing_file_in_a_repository_is_not_a_hub_failure():
    from huggingface_hub.errors import EntryNotFoundError

    assert hub_failure(EntryNotFoundError("404 config.json"), REPO) is None
    assert hub_failure(ValueError("not a network error"), REPO) is None


@pytest.mark.slow
def test_verbs_on_a_quantized_draft_name_the_unreachable_repo(quantized_tiny, make_out, unreachable, monkeypatch,
                                                              tmp_path, capsys):
    """bench and validate read the target from the Hub; push writes to it."""
    _, out = quantized_tiny()
    code, _, err = run_cli(["bench", out, "--target", REPO], capsys)
    _one_error_line(code, err, REPO, f"the Hub at {UNREACHABLE} cannot be reached")
    code, _, err = run_cli(["validate", out, "--target", REPO, "--no-vllm", "--no-sglang"], capsys)
    _one_error_line(code, err, REPO, f"the Hub at {UNREACHABLE} cannot be reached")

    monkeypatch.setenv("HF_TOKEN", "hf_TestSecretToken0123456789abcdef")
    code, _, err = run_cli(["push", make_out(), "--repo-id", REPO], capsys)
    line = _one_error_line(code, err, REPO, f"the Hub at {UNREACHABLE} cannot be reached")
    assert "hf_Test" not in line


def test_an_unreachable_hub_ends_inspect_at_once_without_huggingface_hubs_retries(unreachable, monkeypatch,
                                                                                capsys):
    slept: list[float] = []
    monkeypatch.setattr(time, "sleep", slept.append)      # huggingface_hub's backoff would sleep 1, 2, 4, 8, 8 s
    started = time.monotonic()
    code, _, err = run_cli(["inspect", REPO, "--target", "nobody-org/missing-target"], capsys)
    _one_error_line(code, err, REPO, "cannot be reached")
    assert slept == [] and "Retrying" not in err
    assert time.monotonic() - started < 10


def test_the_users_offline_mode_is_named_as_such(offline, capsys):
    code, _, err = run_cli(["inspect", REPO, "--target", "nobody-org/missing-target"], capsys)
    _one_error_line(code, err, REPO, "HF_HUB_OFFLINE is set")


def test_push_under_the_users_offline_mode_is_refused_in_one_line(offline, tiny_pair, tmp_path, monkeypatch,
                                                                  capsys):
    monkeypatch.setenv("HF_TOKEN", "hf_not_used")
    artifact = shutil.copytree(tiny_pair.fp8, tmp_path / "art")
    before = sorted(p.name for p in artifact.iterdir())
    code, _, err = run_cli(["push", artifact, "--repo-id", REPO, "--allow-unmeasured", "--allow-unvalidated",
                            "--target", "org/target", "--base-model", "org/draft"], capsys)
    line = _one_error_line(code, err, REPO, "HF_HUB_OFFLINE is set: publishing needs the Hub")
    assert "unset HF_HUB_OFFLINE" in line
    assert sorted(p.name for p in artifact.iterdir()) == before          # no card written


def test_offline_mode_follows_the_endpoint_in_use(hub, monkeypatch):
    """One endpoint found unreachable must not refuse requests to another that answers (a push to a second Hub)."""
    from huggingface_hub import constants

    from eagle3_quant.reading.hub_reach import reach_hub

    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    assert reach_hub(UNREACHABLE) is not None and constants.HF_HUB_OFFLINE
    assert reach_hub(hub.url) is None and not constants.HF_HUB_OFFLINE
    asked = len(hub.requests)
    assert reach_hub(UNREACHABLE) is not None and constants.HF_HUB_OFFLINE       # remembered, not asked again
    assert reach_hub(hub.url) is None and len(hub.requests) == asked
