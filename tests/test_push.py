"""Publishing against a real local Hub server through huggingface_hub (no mock of the client)."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
from pathlib import Path

import pytest
from bench_records import bench_json
from hub_server import Fault
from hub_server.fixtures import PASSED_REPORT, TOKEN, failed_report

from eagle3_quant.cli import main
from eagle3_quant.errors import HubAuthError, HubError, NotMeasuredError, NotValidatedError, PublishError
from eagle3_quant.export import push as push_module
from eagle3_quant.export.push import push_draft

pytestmark = pytest.mark.slow  # the OUT fixtures are real Quark outputs
REPO = "alice/tiny-eagle3-fp8"
BASE = "org/tiny-eagle3"


def run_cli(*args, capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(list(args))
    captured = capsys.readouterr()
    return exit_info.value.code, captured.out, captured.err


def paths(hub, method=None, contains=""):
    return [r.path for r in hub.requests if (method is None or r.method == method) and contains in r.path]


def test_push_then_download_is_byte_identical(make_out, hub, hub_client, tmp_path):
    out = make_out()
    result = push_draft(out, REPO, base_model=BASE)
    assert result.commit_oid and result.head == result.commit_oid
    assert result.repo_url == f"{hub.url}/{REPO}"
    assert {f.path for f in result.uploaded} == {p.name for p in out.iterdir() if p.name[0] != "."}
    assert hub_client.model_info(REPO).sha == result.commit_oid

    from huggingface_hub import snapshot_download

    local = snapshot_download(REPO, cache_dir=tmp_path / "dl", token=TOKEN)
    downloaded = {p.name: p.read_bytes() for p in Path(local).iterdir()}
    assert downloaded.pop(".gitattributes")
    assert downloaded == {p.name: p.read_bytes() for p in out.iterdir() if p.name[0] != "."}
    lfs = [r for r in hub.requests if r.method == "PUT" and "lfs-objects" in r.path]
    assert len(lfs) == 1  # model.safetensors went through LFS, the JSON files as regular files


def test_card_metadata_reads_back(make_out, hub, hub_client):
    from huggingface_hub import ModelCard

    push_draft(make_out(), REPO, base_model=BASE)
    card = ModelCard.load(REPO)
    data = card.data
    assert data.base_model == BASE and data.base_model_relation == "quantized"
    assert data.library_name == "vllm"
    assert data.tags == ["eagle3", "speculative-decoding", "draft-model", "fp8", "amd-quark", "ptpc_fp8"]
    assert "| acceptance ratio FP8 / BF16 | 0.9979 |" in card.text
    assert f'"model": "{REPO}"' in card.text and "vllm serve example-org/target" in card.text
    assert hub_client.model_info(REPO).card_data["base_model_relation"] == "quantized"


@pytest.mark.parametrize("report, reason", [
    (None, "no validation report"),
    (failed_report(), "failed checks: acceptance"),
    ("{not json", "not valid JSON"),
    ({**PASSED_REPORT, "passed": "yes"}, "'passed' is 'yes'"),
    ({**PASSED_REPORT, "report_version": 99}, "unknown report_version 99"),
])
def test_refuses_unvalidated_and_failed_before_any_request(make_out, hub, report, reason, capsys):
    out = make_out(report)
    with pytest.raises(NotValidatedError, match=reason):
        push_draft(out, REPO)
    code, _, err = run_cli("push", str(out), "--repo-id", REPO, capsys=capsys)
    assert code == 2 and err.startswith("error: ") and "refusing to publish" in err and "--allow-unvalidated" in err
    assert hub.requests == [] and hub.store.repos == {}
    assert not (out / "README.md").exists()


def test_allow_unvalidated_publishes_and_card_says_so(make_out, hub, hub_client):
    from huggingface_hub import ModelCard

    push_draft(make_out(failed_report()), REPO, allow_unvalidated=True)
    text = ModelCard.load(REPO).text
    assert "**Validation FAILED** (validation did not pass (failed checks: acceptance))" in text


def test_dry_run_prints_files_sizes_and_card_and_sends_nothing(make_out, hub, capsys):
    out = make_out()
    before = sorted(p.name for p in out.iterdir() if p.name[0] != ".")
    code, stdout, _ = run_cli("push", str(out), "--repo-id", REPO, "--dry-run", "--target", "example/target",
                              capsys=capsys)
    assert code == 0
    assert hub.requests == [] and hub.store.repos == {}
    assert sorted(p.name for p in out.iterdir() if p.name[0] != ".") == before  # no README.md written either
    result = push_draft(out, REPO, dry_run=True, target="example/target")
    for f in result.files:
        assert f.path in stdout and f.sha256[:16] in stdout
    assert {f.path for f in result.files} == {*before, "README.md"}
    assert result.card.text.strip() in stdout
    assert "nothing was sent" in stdout
    assert hub.requests == []


def test_transient_5xx_is_retried_and_counted(make_out, hub, monkeypatch):
    monkeypatch.setattr(push_module, "RETRY_WAIT_S", 0.01)
    hub.faults.append(Fault("POST", r"/preupload/", 503, times=2))   # huggingface_hub retries these itself
    hub.faults.append(Fault("POST", r"/commit/", 502, times=1))      # the commit POST is retried by push_draft
    result = push_draft(make_out(), REPO)
    preuploads = [r.status for r in hub.requests if "/preupload/" in r.path]
    commits = [r.status for r in hub.requests if "/commit/" in r.path]
    assert preuploads == [503, 503, 200, 200]   # 2 failures, then the first attempt's and the retry's
    assert commits == [502, 200] and result.attempts == 2
    assert hub.store.commit_count(REPO) == 2    # initial + exactly one upload commit


def test_persistent_5xx_fails_with_clear_error(make_out, hub, monkeypatch):
    monkeypatch.setattr(push_module, "RETRY_WAIT_S", 0.01)
    hub.faults.append(Fault("POST", r"/commit/", 500, times=10))
    with pytest.raises(HubError, match=r"HTTP 500") as info:
        push_draft(make_out(), REPO)
    assert info.value.status == 500
    assert len(paths(hub, "POST", "/commit/")) == push_module.ATTEMPTS


def test_bad_token_gives_clear_401_and_creates_nothing(make_out, hub, monkeypatch, capsys):
    monkeypatch.setenv("HF_TOKEN", "hf_wrong_token_value_987")
    with pytest.raises(HubAuthError, match="rejected the token \\(401 Unauthorized\\)"):
        push_draft(make_out(), REPO)
    code, _, err = run_cli("push", str(make_out(name="o2")), "--repo-id", REPO, capsys=capsys)
    assert code == 2 and "401" in err and "HF_TOKEN" in err and "hf_wrong_token_value_987" not in err
    assert hub.store.repos == {}
    assert {r.path for r in hub.requests} <= {"/", "/api/whoami-v2", "/api/agent-harnesses"}   # "/": the reach probe


def test_no_token_refused_before_any_request(make_out, hub, monkeypatch, tmp_path):
    monkeypatch.delenv("HF_TOKEN")
    from huggingface_hub import constants

    monkeypatch.setattr(constants, "HF_TOKEN_PATH", str(tmp_path / "no-token-file"))
    with pytest.raises(HubAuthError, match="no Hub token"):
        push_draft(make_out(), REPO)
    assert hub.requests == []


def test_token_never_in_output_logs_or_errors(make_out, hub, capsys, caplog, monkeypatch):
    monkeypatch.setattr(push_module, "RETRY_WAIT_S", 0.01)
    caplog.set_level(logging.DEBUG)
    code, out1, err1 = run_cli("push", str(make_out()), "--repo-id", REPO, "--tag", "v1", capsys=capsys)
    assert code == 0
    # a careless server that echoes the Authorization header into its error message
    hub.faults.append(Fault("POST", r"/commit/", 400, times=1, echo_auth=True))
    code, out2, err2 = run_cli("push", str(make_out(failed_report(), name="o2")), "--repo-id", REPO,
                               "--allow-unvalidated", capsys=capsys)
    assert code == 2 and "injected failure" in err2 and "hf_***" in err2
    everything = out1 + err1 + out2 + err2 + caplog.text + "".join(str(r.__dict__) for r in caplog.records)
    assert TOKEN not in everything
    assert "HTTP Error" in caplog.text or "POST" in caplog.text or caplog.records  # logs were captured at all


def test_repush_unchanged_makes_no_commit(make_out, hub):
    out = make_out()
    first = push_draft(out, REPO, base_model=BASE)
    commits_before = hub.store.commit_count(REPO)
    second = push_draft(out, REPO, base_model=BASE)
    assert second.commit_oid is None and second.head == first.commit_oid
    assert {f.action for f in second.files} == {"unchanged"}
    assert hub.store.commit_count(REPO) == commits_before
    assert len(paths(hub, "POST", "/commit/")) == 1
    from huggingface_hub import constants

    # HF_ENDPOINT was set after huggingface_hub was imported: push used it, then left the library as it was
    assert second.endpoint == hub.url and constants.ENDPOINT != hub.url


def test_changed_card_uploads_only_the_card(make_out, hub):
    out = make_out()
    push_draft(out, REPO, target="example/target-a")
    result = push_draft(out, REPO, target="example/target-b")
    assert [f.path for f in result.uploaded] == ["README.md"] and result.commit_oid


def test_revision_branch_tag_and_private(make_out, hub, hub_client):
    out = make_out()
    result = push_draft(out, REPO, revision="fp8-v1", tag="v1", private=True)
    repo = hub.store.repos[REPO]
    assert repo.private
    assert repo.branches["fp8-v1"] == result.commit_oid and repo.tags["v1"] == result.commit_oid
    assert set(repo.commits[repo.branches["main"]].files) == {".gitattributes"}  # main untouched
    again = push_draft(out, REPO, revision="fp8-v1", tag="v1")  # same tag on the same commit: fine
    assert again.commit_oid is None
    push_draft(out, REPO, target="other/target", revision="fp8-v1")  # branch moves on
    with pytest.raises(PublishError, match="tag 'v1' already exists"):
        push_draft(out, REPO, target="other/target-2", revision="fp8-v1", tag="v1")


def test_create_pr_leaves_main_untouched(make_out, hub, capsys):
    out = make_out()
    code, stdout, _ = run_cli("push", str(out), "--repo-id", REPO, "--create-pr", capsys=capsys)
    assert code == 0 and f"{hub.url}/{REPO}/discussions/1" in stdout
    repo = hub.store.repos[REPO]
    assert set(repo.commits[repo.branches["main"]].files) == {".gitattributes"}
    assert "model.safetensors" in repo.commits[repo.prs[1]].files
    with pytest.raises(PublishError, match="pull request is always opened against main"):
        push_draft(out, REPO, create_pr=True, revision="dev")


def test_changed_artifact_or_stray_file_refused(make_out, hub):
    out = make_out()
    config = json.loads((out / "config.json").read_text())
    config["hidden_size"] += 1
    (out / "config.json").write_text(json.dumps(config))
    with pytest.raises(PublishError, match="config.json changed after export"):
        push_draft(out, REPO)
    out2 = make_out(name="o2")
    (out2 / "notes.txt").write_text("scratch")
    with pytest.raises(PublishError, match="files not in the manifest: 'notes.txt'"):
        push_draft(out2, REPO)
    assert hub.requests == []


def test_cli_subprocess_uses_env_endpoint_and_login_file(make_out, hub, tmp_path):
    """A real process: HF_ENDPOINT from the environment, the token from the login file under HF_HOME."""
    home = tmp_path / "hf-home"
    home.mkdir(exist_ok=True)
    (home / "token").write_text(TOKEN)
    env = {k: v for k, v in os.environ.items() if k != "HF_TOKEN"} | {"HF_HOME": str(home)}
    cmd = [sys.executable, "-c", "from eagle3_quant.cli import main; main()", "push", str(make_out()),
           "--repo-id", REPO, "--tag", "v1"]
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert "pushed 7 changed file(s)" in done.stdout and "tag v1" in done.stdout
    assert TOKEN not in done.stdout + done.stderr
    # every API call carried the token from the file (LFS PUTs go to a pre-signed URL, as on the Hub)
    assert all(r.authorized for r in hub.requests if r.path.startswith("/api/") and "agent-harnesses" not in r.path)
    assert REPO in hub.store.repos


def unmeasured_report() -> dict:
    """A passing report whose acceptance was never measured: validate without --calib."""
    report = json.loads(json.dumps(PASSED_REPORT))
    report["checks"][1] = {"name": "acceptance", "status": "skipped", "detail": "no --calib: not measured"}
    for key in ("acceptance_length_bf16", "acceptance_length_fp8", "acceptance_ratio", "top1_agreement", "kl"):
        report["metrics"].pop(key)
    return report


def test_unmeasured_acceptance_is_refused_naming_the_commands(make_out, hub, capsys):
    out = make_out(unmeasured_report())
    with pytest.raises(NotMeasuredError, match="never measured") as error:
        push_draft(out, REPO)
    assert "eagle3-quant validate OUT --calib CAL" in str(error.value) and "eagle3-quant bench OUT" in str(error.value)
    code, _, err = run_cli("push", str(out), "--repo-id", REPO, "--dry-run", capsys=capsys)
    assert code == 2 and err.count("\n") == 1 and err.startswith("error: ") and "--allow-unmeasured" in err
    assert hub.requests == [] and hub.store.repos == {} and not (out / "README.md").exists()


def test_allow_unmeasured_publishes_and_the_card_says_so_at_the_top(make_out, hub, hub_client, capsys):
    from huggingface_hub import ModelCard

    code, _, err = run_cli("push", str(make_out(unmeasured_report())), "--repo-id", REPO, "--allow-unmeasured",
                           capsys=capsys)
    assert code == 0, err
    text = ModelCard.load(REPO).text
    title, notice = text.strip().split("\n\n")[:2]
    assert title.startswith("# ") and notice.startswith("> **Acceptance not measured.** Neither `eagle3-quant "
                                                        "validate --calib`")


def test_an_engine_measurement_alone_is_proof_and_a_measured_card_has_no_notice(make_out, hub, hub_client):
    from huggingface_hub import ModelCard

    from eagle3_quant.records.evidence import artifact_digests

    out = make_out(unmeasured_report())
    bench = bench_json(artifact_digests(out))
    (out / "bench.json").write_text(json.dumps(bench))
    push_draft(out, REPO)
    assert "Acceptance not measured" not in ModelCard.load(REPO).text
    other = make_out(unmeasured_report(), name="o2")
    (other / "bench.json").write_text(json.dumps({**bench, "artifact_files": {"model.safetensors": "0" * 64}}))
    with pytest.raises(NotMeasuredError):             # a bench.json about other files proves nothing here
        push_draft(other, "alice/other")
    push_draft(make_out(name="o3"), "alice/measured")   # validate --calib measured it
    assert "Acceptance not measured" not in ModelCard.load("alice/measured").text
