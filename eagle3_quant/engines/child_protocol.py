"""The child side of the runner's protocol (``runner.py``), for children run by their file path in an engine's
environment, where eagle3-quant is not installed: standard library only, imported from the child's own folder.

``serve(run, name)`` reads REQUEST.json (``argv[1]``), calls ``run(request)`` and writes the dict it returns to
RESULT.json (``argv[2]``); an exception becomes ``{"error": "NAME failed: TYPE: one line"}`` (its traceback goes to
stderr) and exit status 3. The process ends with ``os._exit``: an engine's atexit handlers can hang on a CPU box,
and the parent ends the process tree anyway.
"""

from __future__ import annotations

import json
import os
import sys
import traceback
from collections.abc import Callable

ERROR_CHARS = 400


def one_line(exc: BaseException) -> str:
    return " ".join(f"{type(exc).__name__}: {exc}".split())[:ERROR_CHARS]


def write_json(path: str, value) -> None:
    """Written under a temporary name and renamed: a reader never sees half a file."""
    with open(path + ".tmp", "w") as fh:
        json.dump(value, fh, allow_nan=False)
    os.replace(path + ".tmp", path)


def serve(run: Callable[[dict], dict], name: str) -> None:
    request_path, result_path = sys.argv[1:3]
    with open(request_path) as fh:
        request = json.load(fh)
    try:
        result, code = run(request), 0
    except Exception as exc:  # noqa: BLE001 - the parent gets one line, the traceback goes to stderr
        traceback.print_exc()
        result, code = {"error": f"{name} failed: {one_line(exc)}"}, 3
    write_json(result_path, result)
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)
