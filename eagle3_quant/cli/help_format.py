"""How `--help` reads: verbs grouped by what a user is doing, each with its whole one-line summary; metavars that
read as words (`--calib PATH`, `--num-samples N`, `SRC`) and choices as `a|b|c`, never Python types."""

from __future__ import annotations

from enum import Enum
from pathlib import Path

from typer.core import TyperArgument, TyperCommand, TyperGroup

# Panel -> verbs in the order a user meets them, each with the summary `eagle3-quant --help` prints in full.
PANELS: dict[str, dict[str, str]] = {
    "prepare": {
        "inspect": "Describe a draft from its headers: sizes, plan, taps. Instant.",
        "calibrate": "Capture or import what the draft receives from its target.",
    },
    "quantize": {
        "quantize": "Quantize a draft with AMD Quark into a folder vLLM loads.",
        "gguf": "Write a draft as a GGUF llama.cpp serves, by its own tools.",
    },
    "prove": {
        "validate": "Prove a quantized draft offline: fidelity, acceptance, loads.",
        "bench": "Serve target: no draft, BF16 draft, OUT (vLLM or llama.cpp).",
    },
    "publish": {
        "card": "Write the model card (OUT/README.md) from the proofs.",
        "push": "Publish a measured draft on the Hub with its model card.",
        "run": "Run calibrate, quantize, validate, bench, push from a file.",
    },
    "explore": {
        "sensitivity": "Rank layer groups by what quantizing each alone changes.",
        "cost": "Bytes, FLOPs and KV cache of one draft step. Instant.",
        "estimate": "Estimate the serving speedup from measured acceptance.",
    },
}
PANEL_OF = {name: panel for panel, verbs in PANELS.items() for name in verbs}
SUMMARY_OF = {name: summary for verbs in PANELS.values() for name, summary in verbs.items()}
HELP_OPTIONS = ["-h", "--help"]
# Words where the parameter's own name would read as a variable name.
NAME_WORDS = {"engine_python": "PYTHON", "aux_layer_ids": "IDS", "dump_layer_ids": "IDS", "engine_args": "JSON",
              "concurrency": "LEVELS", "exclude": "LINEAR", "repo_id": "ORG/NAME", "timeout": "SECONDS",
              "engine_timeout": "SECONDS", "overrides": "FIELD=VALUE", "verify_ms": "MS", "draft_ms": "MS",
              "device_profile": "PROFILE", "commit_message": "TEXT",
              "llamacpp": "PATH", "pre_tokenizer": "NAME", "slots": "LEVELS"}


def metavar_word(param) -> str:
    """The word after an option (or an argument's name): choices as a|b|c, counts N, numbers X, paths PATH, else
    the parameter's own name in capitals."""
    descriptor = getattr(param, "type_descriptor", None)
    element = _element(getattr(descriptor, "annotation", None))
    choices = getattr(descriptor, "choices", None) if getattr(descriptor, "is_choice", False) else None
    if choices is None and isinstance(element, type) and issubclass(element, Enum):
        choices = list(element)
    if choices is None:
        choices = getattr(getattr(param, "type", None), "choices", None)
    if choices:
        return "|".join(str(getattr(c, "value", c)) for c in choices)
    if isinstance(param, TyperArgument):
        return (param.name or "").upper()
    if param.name in NAME_WORDS:
        return NAME_WORDS[param.name]
    if element is int:
        return "N"
    if element is float:
        return "X"
    if element is Path:
        return "PATH"
    return (param.name or "VALUE").upper()


def _element(annotation):
    """The type inside list[...] / X | None."""
    args = getattr(annotation, "__args__", None)
    while args:
        real = [a for a in args if a is not type(None)]
        if len(real) != 1:
            break
        annotation = real[0]
        args = getattr(annotation, "__args__", None)
    return annotation


def _with_words(param, ctx) -> tuple[str, str] | None:
    record = param.get_help_record(ctx)
    if record is None or param.metavar is not None:
        return record
    name, text = record
    if isinstance(param, TyperArgument):
        return metavar_word(param), text
    typed = param.display_type_rich(ctx) if hasattr(param, "display_type_rich") else None
    if typed and not getattr(param, "is_flag", False):
        name = name.replace(f" {typed}", f" {metavar_word(param)}")
    return name, text


class Verb(TyperCommand):
    """A verb whose help shows words where typer shows `<str>`, `<list[str]>` and `{src}`."""

    def collect_usage_pieces(self, ctx) -> list[str]:
        pieces = [self.options_metavar] if self.options_metavar else []
        for param in self.get_params(ctx):
            if isinstance(param, TyperArgument):
                word = param.metavar or metavar_word(param)
                word = word if param.required else f"[{word}]"
                pieces.append(word + ("..." if param.nargs != 1 else ""))
        return pieces

    def format_help(self, ctx, formatter) -> None:
        """Arguments, options, then each option group (an option's ``rich_help_panel``) under its own title."""
        self.format_usage(ctx, formatter)
        self.format_help_text(ctx, formatter)
        sections: dict[str, list] = {"Arguments": [], "Options": []}
        for param in self.get_params(ctx):
            title = "Arguments" if isinstance(param, TyperArgument) else (
                getattr(param, "rich_help_panel", None) or "Options")
            if (row := _with_words(param, ctx)) is not None:
                sections.setdefault(title, []).append(row)
        for title, rows in sections.items():
            if rows:
                with formatter.section(title):
                    formatter.write_dl(rows)
        self.format_epilog(ctx, formatter)


class VerbGroup(TyperGroup):
    """The app: verbs listed by panel, in the panels' order, with whole summaries."""

    def list_commands(self, ctx) -> list[str]:
        order = list(PANEL_OF)
        return sorted(self.commands, key=lambda name: (order.index(name) if name in order else len(order), name))

    def format_commands(self, ctx, formatter) -> None:
        listed = {name: self.get_command(ctx, name) for name in self.list_commands(ctx)}
        for panel, verbs in PANELS.items():
            rows = [(name, listed[name].get_short_help_str()) for name in verbs
                    if listed.get(name) is not None and not listed[name].hidden]
            if rows:
                with formatter.section(panel.capitalize()):
                    formatter.write_dl(rows)
        others = [(n, c.get_short_help_str()) for n, c in listed.items() if n not in PANEL_OF and c and not c.hidden]
        if others:
            with formatter.section("Other"):
                formatter.write_dl(others)
