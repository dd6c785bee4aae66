"""Carry an engine child's changes (``cpu_changes.py``) into every process vLLM starts, through vLLM's own mechanism
for code that must load in each of them: a ``vllm.general_plugins`` entry point, which vLLM loads in the process
that builds the engine, in the engine core and in every worker (``vllm/plugins/__init__.py``).

`install` writes a one-module distribution into a folder of the child's temporary folder (removed with it): its
``entry_points.txt`` names ``PLUGIN``; the module reads which changes to make from ``CHANGES_ENV`` and imports
``cpu_changes`` from this folder (appended to ``sys.path``, after site-packages, so that nothing here shadows vLLM).
The folder goes on ``sys.path`` and ``PYTHONPATH``, which processes spawned afterwards inherit; a ``VLLM_PLUGINS``
allow-list the user set gets ``PLUGIN`` added. Child-side: standard library only.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile

PLUGIN = "eagle3_quant_cpu"
MODULE = "eagle3_quant_vllm_changes"
CHANGES_ENV = "EAGLE3_QUANT_VLLM_CHANGES"
HERE = os.path.dirname(os.path.abspath(__file__))

SHIM = f'''"""eagle3-quant's changes to vLLM's CPU build, loaded by vLLM in each of its processes."""
import json
import os
import sys


def load():
    config = json.loads(os.environ["{CHANGES_ENV}"])
    if config["folder"] not in sys.path:
        sys.path.append(config["folder"])
    import cpu_changes

    cpu_changes.apply(config["changes"])
'''


def install(changes: list[str]) -> str | None:
    """Make vLLM load the plugin in every process it starts from now on; the plugin's folder (None: no changes)."""
    if not changes:
        return None
    root = tempfile.mkdtemp(prefix="e3q-vllm-plugin-")
    info = os.path.join(root, f"{MODULE}-1.0.dist-info")
    os.makedirs(info)
    files = {os.path.join(info, "METADATA"): f"Metadata-Version: 2.1\nName: {MODULE}\nVersion: 1.0\n",
             os.path.join(info, "entry_points.txt"): f"[vllm.general_plugins]\n{PLUGIN} = {MODULE}:load\n",
             os.path.join(root, f"{MODULE}.py"): SHIM}
    for path, text in files.items():
        with open(path, "w") as fh:
            fh.write(text)
    os.environ[CHANGES_ENV] = json.dumps({"folder": HERE, "changes": list(changes)}, allow_nan=False)
    os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (root, os.environ.get("PYTHONPATH")) if p)
    sys.path.append(root)
    allowed = os.environ.get("VLLM_PLUGINS")
    if allowed is not None and PLUGIN not in allowed.split(","):
        os.environ["VLLM_PLUGINS"] = ",".join(p for p in (allowed, PLUGIN) if p)
    return root
