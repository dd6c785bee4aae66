"""`eagle3-quant` command line. Each verb calls exactly one public function; errors become one line."""

from __future__ import annotations

import os
import sys

import typer

from eagle3_quant.cli.app import app
from eagle3_quant.errors import Eagle3QuantError
from eagle3_quant.reading.hub_errors import hub_failure
from eagle3_quant.util.interrupts import InterruptRecord, handling_interrupts

# Command modules register their verbs on `app` when imported; keep each import-light.
from eagle3_quant.cli import (  # noqa: E402,F401  isort: skip
    bench_cmd, calibrate_cmd, card_cmd, cost_cmd, estimate_cmd, gguf_cmd, inspect_cmd, push_cmd, quantize_cmd,
    run_cmd, sensitivity_cmd, validate_cmd)

DEBUG_ENV = "EAGLE3_QUANT_DEBUG"


def main(argv: list[str] | None = None) -> None:
    interrupts = InterruptRecord()
    try:
        with handling_interrupts(interrupts):
            code = app(args=argv, prog_name="eagle3-quant", standalone_mode=False)  # Ctrl-C: typer returns 130
    except typer.Exit as exc:
        code = exc.exit_code
    except typer.TyperException as exc:  # usage errors: bad option or value, missing argument, bad choice
        print(f"error: {usage_line(exc)}", file=sys.stderr)
        code = exc.exit_code
    except typer.Abort:
        code = 130
    except KeyboardInterrupt:
        code = 130
    except Exception as exc:
        if interrupts.requested:   # a library turned the interrupt into another error
            code = 130
        elif os.environ.get(DEBUG_ENV):
            raise
        elif (shown := exc if isinstance(exc, Eagle3QuantError) else hub_failure(exc)) is not None:
            print(f"error: {shown}", file=sys.stderr)    # hub_failure: a Hub read no reader wrapped, same one line
            code = shown.exit_code
        else:
            raise
    if code == 130:
        print("interrupted: nothing half-written was kept", file=sys.stderr)
    code = code if isinstance(code, int) else 0
    if argv is None:    # the console script, its work done: skip the interpreter's teardown (below)
        _exit_now(code)
    sys.exit(code)


def usage_line(exc: typer.TyperException) -> str:
    """A usage error as one line, the value named, ending with where the verb's options are listed."""
    ctx = getattr(exc, "ctx", None)
    where = f" (see: {ctx.command_path} -h)" if ctx is not None else ""
    return " ".join(exc.format_message().split()) + where


def _exit_now(code: int) -> None:
    """Exit without tearing the interpreter down: once torch, transformers and Quark are imported, finalizing their
    ~4,900 modules takes ~2 s (measured after `import quark.torch`: 2.3 s), all of it after the output is written.
    Every file is closed and every child process waited for by then; stdout, stderr and logging are flushed here."""
    import logging

    logging.shutdown()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass
    os._exit(code)
