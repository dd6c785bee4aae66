"""The docs cannot drift: every `eagle3-quant ...` command in README.md, docs/*.md and pipelines/README.md parses
with the CLI's own parser (the verb and every flag exist, choices are valid, required options are given; nothing
is executed), every relative link and #anchor resolves, and no published page names a build machine's path or an
issue number.

A command line is taken from fenced ```bash (or unlabelled) blocks, backslash continuations joined, comments
dropped. A line that cannot parse on purpose (a placeholder) ends with the comment `# placeholder`: it is skipped.
"""

from __future__ import annotations

import re
import shlex
import warnings
from pathlib import Path

import pytest
import typer
from typer.main import get_command

import eagle3_quant.cli  # noqa: F401  (registers every verb on the app)
from eagle3_quant.cli.app import app

ROOT = Path(__file__).resolve().parents[1]
PAGES = sorted([ROOT / "README.md", *(ROOT / "docs").glob("*.md"), ROOT / "pipelines" / "README.md"])
SKIP_MARK = "# placeholder"

FORBIDDEN = [
    (re.compile(r"/work/|\.\./shared|/tmp/"), "a build machine's path"),
    (re.compile(r"\bissues?\s+#?\d+", re.IGNORECASE), "an issue number"),
    (re.compile(r"(?<![\w&/])#\d+\b"), "an issue or pull-request number"),
    (re.compile(r"facts section|section \d+ of the facts", re.IGNORECASE), "a build machine's notes"),
]


def code_blocks(text: str) -> list[str]:
    """The bodies of ```bash / ```sh / ``` blocks."""
    blocks, body, lang = [], None, None
    for line in text.splitlines():
        fence = re.match(r"^\s*```(\S*)\s*$", line)
        if fence and body is None:
            body, lang = [], fence.group(1)
        elif fence:
            if lang in ("", "bash", "sh", "shell", "console"):
                blocks.append("\n".join(body))
            body = None
        elif body is not None:
            body.append(line)
    return blocks


def command_lines(text: str) -> list[str]:
    """Every `eagle3-quant ...` command of the page's shell blocks, continuations joined."""
    commands = []
    for block in code_blocks(text):
        joined = re.sub(r"\\\n\s*", " ", block)
        for line in joined.splitlines():
            words = line.strip()
            words = re.sub(r"^(\w+=\S+\s+)+", "", words)          # HF_ENDPOINT=... eagle3-quant ...
            if words.startswith("eagle3-quant ") or words == "eagle3-quant":
                commands.append(words)
    return commands


def all_commands() -> list[tuple[str, str]]:
    return [(page.relative_to(ROOT).as_posix(), line) for page in PAGES for line in command_lines(page.read_text())]


def parse(argv: list[str]):
    """Parse `eagle3-quant ARGV` as the CLI would, without running the verb. None: a group-level flag only."""
    group = get_command(app)
    if not argv:
        return None
    ctx = group.make_context("eagle3-quant", list(argv))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        protected = getattr(ctx, "_protected_args", None) or ctx.protected_args
    name, command, rest = group.resolve_command(ctx, [*protected, *ctx.args])
    return command.make_context(name, rest, parent=ctx)


COMMANDS = all_commands()


def test_the_pages_hold_commands_of_every_verb():
    verbs = {shlex.split(line, comments=True)[1] for _, line in COMMANDS if len(shlex.split(line, comments=True)) > 1}
    assert verbs >= {"inspect", "calibrate", "quantize", "validate", "bench", "push", "run", "card", "cost",
                     "estimate", "sensitivity"}, verbs


@pytest.mark.parametrize("page, line", COMMANDS, ids=[f"{p}:{i}" for i, (p, _) in enumerate(COMMANDS)])
def test_every_command_parses(page, line):
    if line.rstrip().endswith(SKIP_MARK):
        pytest.skip("marked as a placeholder")
    argv = shlex.split(line, comments=True)[1:]
    try:
        parse(argv)
    except typer.TyperException as exc:      # usage errors: unknown verb or flag, bad choice, missing option
        pytest.fail(f"{page}: `{line}` does not parse: {exc.format_message()}")
    except typer.Exit as exc:               # eager flags (--version, --help, -h) print and exit 0 while parsing
        if not ({"--version", "--help", "-h"} & set(argv)) or exc.exit_code != 0:
            pytest.fail(f"{page}: `{line}` only prints help or exits")


def test_the_parser_refuses_what_the_cli_refuses():
    """The check can fail: an unknown verb, an unknown flag, a bad choice and a missing required option."""
    for argv in (["quantise", "a", "b"], ["quantize", "a", "b", "--no-such-flag"], ["quantize", "a", "b",
                 "--scheme", "int3"], ["push", "./out"], ["calibrate", "./cal"]):
        with pytest.raises(typer.TyperException):
            parse(argv)
    assert parse(["quantize", "a", "b", "--scheme", "fp8", "--calib", "c"]).params["scheme"] == "fp8"


def github_anchor(heading: str) -> str:
    """GitHub's anchor of a heading: lower case, markup and punctuation dropped, spaces to hyphens."""
    text = re.sub(r"`|\*\*|\[([^\]]*)\]\([^)]*\)", lambda m: m.group(1) or "", heading.strip()).lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def anchors(page: Path) -> set[str]:
    found, seen, in_code = set(), {}, False
    for line in page.read_text().splitlines():
        if line.lstrip().startswith("```"):
            in_code = not in_code
            continue
        heading = re.match(r"^#{1,6}\s+(.*)$", line)
        if heading and not in_code:
            anchor = github_anchor(heading.group(1))
            count = seen.get(anchor, 0)
            found.add(anchor if count == 0 else f"{anchor}-{count}")
            seen[anchor] = count + 1
    return found


def links(page: Path) -> list[str]:
    text = re.sub(r"```.*?```", "", page.read_text(), flags=re.DOTALL)
    return re.findall(r"\]\(([^)\s]+)\)", text)


LINKS = [(page, target) for page in PAGES for target in links(page) if not re.match(r"[a-z]+:", target)]


def test_anchor_rule_matches_github():
    assert github_anchor("The `vllm_load` check") == "the-vllm_load-check"
    assert github_anchor("MX schemes (`python -m benchmarks.studies.mx_tiny_pair`)") == \
        "mx-schemes-python--m-benchmarksstudiesmx_tiny_pair"
    assert github_anchor("Serving the trained layers (`--serve-taps`)") == "serving-the-trained-layers---serve-taps"


@pytest.mark.parametrize("page, target", LINKS, ids=[f"{p.relative_to(ROOT)}->{t}" for p, t in LINKS])
def test_every_relative_link_and_anchor_resolves(page, target):
    path, _, anchor = target.partition("#")
    dest = (page.parent / path).resolve() if path else page
    assert dest.exists(), f"{page.relative_to(ROOT)}: link {target!r}: no such file"
    if anchor:
        assert dest.suffix == ".md", f"{page.relative_to(ROOT)}: anchor on a non-markdown file {target!r}"
        assert anchor in anchors(dest), f"{page.relative_to(ROOT)}: link {target!r}: no such heading in {dest.name}"


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_no_machine_path_or_issue_number(page):
    for number, line in enumerate(page.read_text().splitlines(), 1):
        for pattern, what in FORBIDDEN:
            assert not pattern.search(line), f"{page.relative_to(ROOT)}:{number} names {what}: {line.strip()}"
