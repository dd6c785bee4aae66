"""From the checkout's root, ``./eagle3_quant`` shadows an installed copy (a regular, non-editable install): the
stages that install as ``eagle3_quant.calib`` ... must still import, from the folders beside it."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# -S: no site-packages, so no editable-install finder; the checkout's root first on the path, as `python -m` puts it
WITHOUT_INSTALL = [sys.executable, "-S", "-c"]


def _run(code: str) -> subprocess.CompletedProcess:
    return subprocess.run([*WITHOUT_INSTALL, "import sys; sys.path[:0] = ['']\n" + code], cwd=ROOT,
                          capture_output=True, text=True, timeout=60)


def test_the_stages_import_from_the_checkout_without_an_editable_install():
    done = _run("import eagle3_quant.calib as c, eagle3_quant.quantize as q, eagle3_quant.export as e, "
                "eagle3_quant.validate as v\nprint(c.__file__, q.__file__, e.__file__, v.__file__)")
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == [str(ROOT / stage / "__init__.py")
                                   for stage in ("calib", "quantize", "export", "validate")]


def test_only_the_stages_are_found_beside_the_core():
    done = _run("import eagle3_quant.tests")
    assert done.returncode != 0 and "No module named 'eagle3_quant.tests'" in done.stderr
