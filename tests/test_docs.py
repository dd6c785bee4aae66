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
from eagle3_quant.cli.help_format import metavar_word

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


# --- the option reference against the parsers ---------------------------------------------------------------------
# A page section documents the verbs its heading names (`eagle3-quant VERB`, or commands.md's "## push and card"),
# else its enclosing section's. Every option of a verb's parser is written (`--option`) in that verb's sections or
# in commands.md's shared options; every `| option |` table row is an option of its section's verbs, with a value
# word only when the option takes one and the choices the parser has; the shared options are the listed verbs' own.

PARSERS = get_command(app).commands
VERBS = set(PARSERS)
SHARED_LEAD = "Options shared by several verbs"
CODE_OPTION = re.compile(r"`(--[a-z0-9][a-z0-9-]*)((?: [^`]+)?)`")


def heading_verbs(heading: str) -> set[str]:
    named = {v for v in re.findall(r"eagle3-quant (\w+)", heading) if v in VERBS}
    words = re.sub(r"[`,]", " ", heading).split()
    if words and all(w in VERBS or w == "and" for w in words):
        named |= {w for w in words if w in VERBS}
    return named


def verb_sections() -> list[tuple[str, set[str], list[str]]]:
    """(page, verbs, lines) of every section of the pages that document a verb (a code block's lines kept: its
    commands are examples; a `#` in one is no heading)."""
    found = []
    for page in PAGES:
        stack: list[tuple[int, set[str]]] = []
        lines: list[str] = []
        verbs: set[str] = set()
        in_code = False
        for line in [*page.read_text().splitlines(), "# end"]:
            if line.lstrip().startswith("```"):
                in_code = not in_code
            heading = None if in_code else re.match(r"^(#{1,6})\s+(.*)$", line)
            if heading is None:
                lines.append(line)
                continue
            if verbs:
                found.append((page.name, verbs, lines))
            level = len(heading.group(1))
            stack = [(lv, vs) for lv, vs in stack if lv < level]
            verbs = heading_verbs(heading.group(2)) or (stack[-1][1] if stack else set())
            stack.append((level, verbs))
            lines = []
    return found


def table_rows(lines: list[str]) -> list[tuple[str, str]]:
    """(option, value word) of every first cell of the `| option | ... |` tables in `lines`."""
    rows, in_table = [], False
    for line in lines:
        cells = [c.strip() for c in line.strip().strip("|").split(" | ")] if line.startswith("|") else None
        if cells is None:
            in_table = False
        elif cells[0] == "option":
            in_table = True
        elif in_table and not set(cells[0]) <= {"-", "|"}:
            rows += [(m.group(1), m.group(2).strip().replace("\\|", "|")) for m in CODE_OPTION.finditer(cells[0])]
    return rows


def shared_options() -> dict[str, set[str]]:
    """commands.md's shared options: option -> the verbs it lists for it."""
    text = " ".join((ROOT / "docs" / "commands.md").read_text().split())
    start = text.index(SHARED_LEAD)
    paragraph = text[start:text.index(". A source", start)]
    return {m.group(1): {v.strip() for v in m.group(2).split(",")}
            for m in re.finditer(r"`(--[a-z-]+)` \(([a-z, ]+):", paragraph)}


def option_names(param) -> list[str]:
    return [*param.opts, *getattr(param, "secondary_opts", [])]


def parser_option(verb: str, name: str):
    return next((p for p in PARSERS[verb].params if p.param_type_name == "option" and name in option_names(p)), None)


SECTIONS = verb_sections()
SHARED = shared_options()


def documented(verb: str, *, shared: bool = True) -> set[str]:
    text = "\n".join(line for _, verbs, lines in SECTIONS if verb in verbs for line in lines)
    spans = re.findall(r"`([^`\n]+)`", text) + command_lines(text)      # `--option`, and the examples' commands
    names = {name for span in spans if span.startswith(("--", "eagle3-quant ", f"{verb} "))
             for name in re.findall(r"(?<![\w-])(--[a-z0-9][a-z0-9-]*)", span)}
    return names | ({o for o, verbs in SHARED.items() if verb in verbs} if shared else set())


@pytest.mark.parametrize("verb", sorted(VERBS))
def test_every_option_of_the_verb_is_documented_on_its_pages(verb):
    names = documented(verb)
    missing = [p.opts[0] for p in PARSERS[verb].params if p.param_type_name == "option"
               and not set(option_names(p)) & names and p.opts[0] not in ("--help", "-h")]
    assert not missing, f"{verb}: {', '.join(missing)} not documented in its sections or the shared options"


def test_every_table_row_is_an_option_of_its_verb_with_that_kind():
    checked = 0
    for page, verbs, lines in SECTIONS:
        for name, word in table_rows(lines):
            for verb in verbs:
                param = parser_option(verb, name)
                assert param is not None, f"{page}: `{name}` in a table of {verb}, which has no such option"
                assert not (word and param.is_flag), f"{page}: {verb} {name} is a flag, the table gives it `{word}`"
                choices = metavar_word(param)
                if word and "|" in choices and "|" in word:
                    assert set(word.split("|")) == set(choices.split("|")), (page, verb, name, word, choices)
                checked += 1
    assert checked >= 40       # the tables of quantize, validate, bench, push and calibrate


def test_the_shared_options_are_the_listed_verbs_own():
    assert set(SHARED) >= {"--device", "--json", "--revision", "--force"}, SHARED
    for name, verbs in SHARED.items():
        params = {verb: parser_option(verb, name) for verb in verbs}
        assert all(params.values()), f"{name}: listed for {verbs}, missing on {[v for v, p in params.items() if not p]}"
        assert len(verbs) > 1 and len({p.is_flag for p in params.values()}) == 1, name
        others = {verb for verb in VERBS - verbs if parser_option(verb, name)}
        for verb in others:        # the same name with another meaning: documented on that verb's own pages
            assert name in documented(verb, shared=False), f"{verb} {name}: neither shared nor documented"
