"""The pipeline file means what it says: what the reader refuses (a key written twice, a key that is not a name, an
empty or invisible string, the files' placeholder repository, a workdir inside an input), how `run`'s flags and
`--set` values are read, and what `run --dry-run` says without running, writing or sending anything.
Every hostile file is built here; each refusal is one `error:` line naming the file and the field, exit 2."""

from __future__ import annotations

from pathlib import Path

import pytest
from corpus.builders import tree_state

from eagle3_quant.cli import main
from eagle3_quant.cli.run_cmd import flag_overrides
from eagle3_quant.errors import PipelineSpecError
from eagle3_quant.pipeline import plan_pipeline
from eagle3_quant.pipeline_spec import load_pipeline, push_options
from fixtures.synthetic import write_synthetic_draft


@pytest.fixture
def draft(tmp_path) -> Path:
    return write_synthetic_draft(tmp_path / "src", "tiny")


def pipeline(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "pipe.yaml"
    path.write_text(text)
    return path


def refused(capsys, path: Path, *args: str) -> str:
    """`run PATH ARGS` through the CLI: exit 2 and exactly one line, an `error:` one, on stderr; that line."""
    with pytest.raises(SystemExit) as exit_info:
        main(["run", str(path), *args])
    captured = capsys.readouterr()
    lines = captured.err.splitlines()
    assert exit_info.value.code == 2 and len(lines) == 1 and lines[0].startswith("error: "), captured.err
    assert "Traceback" not in captured.err and captured.out == ""
    return lines[0]


def base(draft: Path, tmp_path: Path) -> str:
    return f"source: {draft}\nworkdir: {tmp_path / 'work'}\n"


@pytest.mark.parametrize("text, says", [
    # the second push section would replace the first: its dry_run would be dropped and the run would publish
    ("push:\n  dry_run: true\n  repo_id: alice/x\nvalidate:\n  k: 3\npush:\n  repo_id: alice/x\n",
     "key 'push' appears twice (lines 3 and 8)"),
    ("push: {enabled: false, enabled: true}\n", "key 'enabled' appears twice"),
    ("push:\n  enabled: false\n  <<: {dry_run: true}\n", "merge keys (<<) are not accepted"),
    ("push: {enabled: false}\n1: one\n", "key 1 is not a name; valid keys: source, workdir"),
    ("push: {enabled: false, true: 1}\n", "field 'push': key True is not a name; valid keys: repo_id"),
    ("push: {enabled: false}\nnull: x\n", "key None is not a name"),
])
def test_a_file_that_says_two_things_or_names_no_key_is_refused(draft, tmp_path, capsys, text, says):
    path = pipeline(tmp_path, base(draft, tmp_path) + text)
    line = refused(capsys, path)
    assert str(path) in line and says in line, line
    with pytest.raises(PipelineSpecError):
        load_pipeline(path)


@pytest.mark.parametrize("text, field, says", [
    ('source: ""\nworkdir: w\n', "source", "'' is empty: write a value, or leave the key out"),
    ("source: SRC\nworkdir: '   '\n", "workdir", "'   ' is empty"),
    ("source: SRC\nworkdir: w\nquantize: {exclude: ['']}\n", "quantize.exclude", "'' is empty"),
    ('source: SRC\nworkdir: "w\\r"\n', "workdir", "'w\\r' holds a control character"),
    ('source: SRC\nworkdir: "w\\u202e"\n', "workdir", "holds a control character"),
    ("source: SRC\nworkdir: SRC/inner\n", "workdir", "is inside source"),
    ("source: SRC\nworkdir: SRC\n", "workdir", "the run would write into what it reads"),
])
def test_strings_that_cannot_mean_what_they_say_are_refused(draft, tmp_path, capsys, text, field, says):
    path = pipeline(tmp_path, text.replace("SRC", str(draft)) + "push: {enabled: false}\n")
    before = tree_state(tmp_path)
    line = refused(capsys, path)
    assert f"field '{field}'" in line and says in line, line
    assert tree_state(tmp_path) == before       # nothing written, the source untouched


def test_flags_are_values_never_yaml(draft, tmp_path):
    path = pipeline(tmp_path, base(draft, tmp_path) + "push: {repo_id: alice/x}\n")
    assert load_pipeline(path, flag_overrides(workdir="wd #1")).workdir == "wd #1"     # not a comment
    assert load_pipeline(path, flag_overrides(workdir="007")).workdir == "007"         # not the integer 7
    assert load_pipeline(path, flag_overrides(workdir="null")).workdir == "null"       # a folder named null
    assert load_pipeline(path, flag_overrides(repo_id="alice/007")).push.repo_id == "alice/007"
    assert load_pipeline(path, flag_overrides(no_push=True)).push.enabled is False
    with pytest.raises(PipelineSpecError, match="field 'workdir': '' is empty"):
        load_pipeline(path, flag_overrides(workdir=""))


def test_set_reads_a_string_field_as_written_and_anything_else_as_yaml(draft, tmp_path):
    path = pipeline(tmp_path, base(draft, tmp_path) + "push: {repo_id: alice/x, revision: fp8}\n")
    spec = load_pipeline(path, ["workdir=wd #1", "push.tag=007", "push.commit_message=a: b # c",
                                "quantize.exclude=[o_proj, down_proj]", "push.dry_run=true", "bench.k=4"])
    assert (spec.workdir, spec.push.tag, spec.push.commit_message) == ("wd #1", "007", "a: b # c")
    assert spec.quantize.exclude == ("o_proj", "down_proj") and spec.push.dry_run is True and spec.bench.k == 4
    assert load_pipeline(path, ["push.revision=null"]).push.revision is None       # a nullable string: unset
    assert load_pipeline(path, ["push.revision="]).push.revision is None
    with pytest.raises(PipelineSpecError, match="field 'bench.k': '4x' is not an integer"):
        load_pipeline(path, ["bench.k=4x"])


def test_the_files_placeholder_repository_is_never_a_target(draft, tmp_path, capsys):
    path = pipeline(tmp_path, base(draft, tmp_path) + "push:\n  repo_id: ORG/tiny-fp8\n")
    for args in ([], ["--dry-run"], ["--set", "push.dry_run=true"]):
        line = refused(capsys, path, *args)
        assert "field 'push.repo_id': 'ORG/tiny-fp8' is a placeholder: pass --repo-id" in line
    assert load_pipeline(path, flag_overrides(repo_id="alice/tiny-fp8")).push.repo_id == "alice/tiny-fp8"
    assert load_pipeline(path, flag_overrides(no_push=True)).push.enabled is False


def test_the_push_section_takes_the_cards_names_as_push_does(draft, tmp_path):
    path = pipeline(tmp_path, base(draft, tmp_path) + "push: {repo_id: alice/x}\n")
    spec = load_pipeline(path, ["push.base_model=org/draft", "push.target=org/target"])
    options = push_options(spec)
    assert (options.base_model, options.target) == ("org/draft", "org/target")
    hub = pipeline(tmp_path, f"source: org/draft\ntarget: {draft}\nworkdir: {tmp_path / 'w'}\npush: {{repo_id: a/b}}\n")
    options = push_options(load_pipeline(hub))      # a Hub source names the base model; a local target nothing
    assert (options.base_model, options.target) == ("org/draft", None)


def test_dry_run_says_what_each_stage_would_do_and_touches_nothing(draft, tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("EAGLE3_QUANT_ENGINE_PYTHON", str(tmp_path / "no-engine" / "python"))
    path = pipeline(tmp_path, base(draft, tmp_path) + "target: org/target\npush: {repo_id: alice/x}\n")
    before = tree_state(tmp_path)
    result = plan_pipeline(path)
    status = {s.name: (s.status, s.detail) for s in result.stages}
    assert result.planned and result.ok and result.push is None
    assert status["calibrate"][0] == "skipped" and "no calibrate.data" in status["calibrate"][1]
    assert status["quantize"] == ("would run", f"no artifact in {tmp_path / 'work' / 'draft-fp8'}")
    assert status["validate"] == ("would run", "the artifact is made in this run")
    assert status["bench"][0] == "skipped" and status["bench"][1].startswith("no engine: ")
    assert status["push"] == ("would run", "publish to alice/x")
    with pytest.raises(SystemExit) as exit_info:
        main(["run", str(path), "--dry-run"])
    out = capsys.readouterr().out
    assert exit_info.value.code == 0 and "nothing was run, written or sent" in out and "would run" in out
    assert f"relative paths start from the current folder {Path.cwd()}" in out
    assert tree_state(tmp_path) == before
