"""Every Python package folder ships in the wheel (the package-dir mapping lists packages by hand)."""

from __future__ import annotations

import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_every_package_folder_is_listed():
    setuptools = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    mapping, listed = setuptools["package-dir"], set(setuptools["packages"])
    found = set()
    for name, folder in mapping.items():
        base = ROOT / folder
        for init in base.rglob("__init__.py"):
            rel = init.parent.relative_to(base)
            if "__pycache__" not in rel.parts:
                found.add(".".join([name, *rel.parts]))
    assert found == listed, f"unlisted: {sorted(found - listed)}, missing: {sorted(listed - found)}"
