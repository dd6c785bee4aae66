"""Quark's C++ kernels, built when first used rather than at import.

`import quark.torch` (0.13) runs `quark/torch/kernel/hw_emulation/extensions.py`, which loads or JIT-compiles
(g++, ninja) the `hw_emulation` extension into torch's extension cache (`~/.cache/torch_extensions`, or
`TORCH_EXTENSIONS_DIR`): 6 s on two idle cores, 47 s measured under load, on every machine's first import. Its
module-level `kernel_ext` is what Quark calls them through. The FP8 paths this project runs on CPU (PTPC
file-to-file, static FP8 and GPTQ in memory) never call it, so `defer_kernel_build` puts a stand-in module in
its place whose `kernel_ext` builds the real one on first use, exactly as the import would have (same module
code, same cache), and forwards to it. A path that needs the kernels (a GPU, MX fake quantization) pays the
build when it first calls one; nothing else changes. `build_kernels` builds them now (`make setup`).
"""

from __future__ import annotations

import importlib.util
import sys
import threading
import types
from pathlib import Path

EXTENSIONS = "quark.torch.kernel.hw_emulation.extensions"
_lock = threading.Lock()


class _DeferredKernels:
    """Stands for Quark's `kernel_ext`: the first attribute read builds (or loads) the real one."""

    def __getattr__(self, name: str):
        return getattr(build_kernels(), name)

    def __repr__(self) -> str:
        return "<Quark hw_emulation kernels, built on first use>"


def _stand_in() -> types.ModuleType | None:
    module = sys.modules.get(EXTENSIONS)
    return module if module is not None and getattr(module, "_eagle3_quant_deferred", False) else None


def defer_kernel_build() -> None:
    """Before `import quark.torch`: its kernels are built on first use. No-op once the real module is loaded."""
    with _lock:
        if EXTENSIONS in sys.modules:
            return
        stand_in = types.ModuleType(EXTENSIONS, __doc__)
        stand_in.kernel_ext = _DeferredKernels()
        stand_in._eagle3_quant_deferred = True
        stand_in.__getattr__ = _module_attribute
        sys.modules[EXTENSIONS] = stand_in


def _module_attribute(name: str):
    """Any other name of the module: the real module's. Dunder names are not (`inspect.getmodule`, which torch
    runs at import, reads `__file__` of every module: that must not build the kernels)."""
    if name.startswith("__"):
        raise AttributeError(name)
    return getattr(_real_module(), name)


def kernels_built() -> bool:
    """Whether Quark's kernel module has run (so its kernels are built or loaded) in this process."""
    stand_in = _stand_in()
    return "_real" in vars(stand_in) if stand_in is not None else EXTENSIONS in sys.modules


def _real_module() -> types.ModuleType:
    """Quark's own extensions module, run once (this builds or loads the kernels), kept on the stand-in."""
    stand_in = _stand_in()
    if stand_in is None:
        import quark.torch.kernel.hw_emulation.extensions as real

        return real
    with _lock:
        if "_real" not in vars(stand_in):
            package = importlib.util.find_spec("quark.torch.kernel.hw_emulation")
            path = Path(package.submodule_search_locations[0]) / "extensions.py"
            spec = importlib.util.spec_from_file_location(EXTENSIONS, path)
            real = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(real)
            stand_in._real = real
    return stand_in._real


def build_kernels():
    """Quark's `kernel_ext`, built (or loaded from torch's extension cache) now."""
    return _real_module().kernel_ext
