"""`eagle3-quant` command line. Each verb calls exactly one public function; errors become one line."""

from __future__ import annotations

import os
import signal
import sys

import typer

from eagle3_quant.cli.app import app
from eagle3_quant.errors import Eagle3QuantError

# Command modules register their verbs on `app` when imported; keep each import-light.
from eagle3_quant.cli import (  # noqa: E402,F401  isort: skip
    calibrate_cmd, card_cmd, inspect_cmd, push_cmd, quantize_cmd, run_cmd, sensitivity_cmd)

DEBUG_ENV = "EAGLE3_QUANT_DEBUG"


def _terminated(signum, frame) -> None:
    raise KeyboardInterrupt  # SIGTERM cleans up like Ctrl-C: temporary folders are removed


def main(argv: list[str] | None = None) -> None:
    previous = signal.signal(signal.SIGTERM, _terminated)
    try:
        code = app(args=argv, prog_name="eagle3-quant", standalone_mode=False)
    except typer.Exit as exc:
        code = exc.exit_code
    except typer.TyperException as exc:  # usage errors: bad option, missing argument, bad choice
        show = getattr(exc, "show", None)
        show() if show else print(f"error: {exc.format_message()}", file=sys.stderr)
        code = exc.exit_code
    except typer.Abort:
        print("aborted", file=sys.stderr)
        code = 130
    except Eagle3QuantError as exc:
        if os.environ.get(DEBUG_ENV):
            raise
        print(f"error: {exc}", file=sys.stderr)
        code = exc.exit_code
    except KeyboardInterrupt:
        print("interrupted: nothing was written", file=sys.stderr)
        code = 130
    finally:
        signal.signal(signal.SIGTERM, previous)
    sys.exit(code if isinstance(code, int) else 0)
