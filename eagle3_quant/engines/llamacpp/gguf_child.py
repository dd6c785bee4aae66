"""Child of ``gguf_files.py``: reads and writes GGUF files with llama.cpp's own gguf-py (the one its converter
ships, which knows the ``eagle3`` architecture and every GGML block type), on ``PYTHONPATH``; numpy and
safetensors beside it. ``PYTHON gguf_child.py REQUEST.json RESULT.json``.

Requests (``op``):

- ``describe`` {path}: the architecture, every metadata field but the long tokenizer lists (those by length and
  sha256), every tensor's name, GGML type name, shape [rows, cols] (numpy order) and bytes.
- ``dequantize`` {path, names | null, out}: the named tensors (null: all of them) as float32 (integer tensors as they
  are) into the safetensors file ``out``, each dequantized by gguf-py's ``gguf.quants.dequantize``: ggml's own
  block formulas.
- ``replace`` {path, out, blocks, types}: ``path`` copied to ``out`` (metadata, tensors, order) with the tensors in
  the safetensors file ``blocks`` written as raw GGML blocks of ``types[name]``; then each replaced tensor read back
  from ``out``, dequantized, and compared with the tensor it replaced: {name: {"equal", "max_abs_diff"}}.
"""

from __future__ import annotations

import hashlib
import os
import sys

sys.path.append(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))    # engines/: child_protocol
from child_protocol import serve  # noqa: E402

LONG_FIELDS = ("tokenizer.ggml.tokens", "tokenizer.ggml.merges", "tokenizer.ggml.token_type", "tokenizer.ggml.scores")


def _type_name(tensor_type) -> str:
    from gguf.constants import GGMLQuantizationType

    return GGMLQuantizationType(tensor_type).name.lower().replace("_k", "_K")


def _value(field):
    value = field.contents()
    if isinstance(value, bytes | bytearray):
        return value.decode("utf-8", "replace")
    return value


def _describe(request: dict) -> dict:
    from gguf import GGUFReader

    reader = GGUFReader(request["path"], "r")
    fields = {}
    for name, field in reader.fields.items():
        if name.startswith("GGUF."):
            continue
        if name in LONG_FIELDS:
            values = field.contents()
            digest = hashlib.sha256("\n".join(map(str, values)).encode("utf-8", "replace")).hexdigest()
            fields[name] = {"length": len(values), "sha256": digest}
        else:
            fields[name] = _value(field)
    tensors = [{"name": t.name, "type": _type_name(t.tensor_type),
                "shape": [int(x) for x in reversed(t.shape.tolist())], "bytes": int(t.n_bytes)}
               for t in reader.tensors]
    return {"architecture": fields.get("general.architecture"), "fields": fields, "tensors": tensors}


def _dequantized(tensor):
    import numpy as np
    from gguf.quants import dequantize

    kind = _type_name(tensor.tensor_type)
    if kind in ("i8", "i16", "i32", "i64"):
        return np.array(tensor.data)
    shape = [int(x) for x in reversed(tensor.shape.tolist())]
    return dequantize(np.array(tensor.data), tensor.tensor_type).astype(np.float32).reshape(shape)


def _dequantize(request: dict) -> dict:
    from gguf import GGUFReader
    from safetensors.numpy import save_file

    reader = GGUFReader(request["path"], "r")
    wanted = request.get("names")
    out = {t.name: _dequantized(t) for t in reader.tensors if wanted is None or t.name in wanted}
    missing = sorted(set(wanted or ()) - set(out))
    if missing:
        raise KeyError(f"no tensor {', '.join(missing)} in {request['path']}")
    save_file(out, request["out"])
    return {"written": sorted(out)}


def _replace(request: dict) -> dict:
    import numpy as np
    from gguf import GGUFReader, GGUFValueType, GGUFWriter, Keys
    from gguf.constants import GGMLQuantizationType
    from safetensors.numpy import load_file

    reader = GGUFReader(request["path"], "r")
    blocks = load_file(request["blocks"])
    types = {name: GGMLQuantizationType[kind.upper()] for name, kind in request["types"].items()}
    architecture = _value(reader.fields[Keys.General.ARCHITECTURE])
    writer = GGUFWriter(request["out"], architecture)
    for field in reader.fields.values():
        if field.name == Keys.General.ARCHITECTURE or field.name.startswith("GGUF."):
            continue
        kind = field.types[0]
        sub = field.types[-1] if kind == GGUFValueType.ARRAY else None
        writer.add_key_value(field.name, field.contents(), kind, sub_type=sub)
    for tensor in reader.tensors:
        if tensor.name in blocks:
            data = np.ascontiguousarray(blocks[tensor.name])
            writer.add_tensor_info(tensor.name, data.shape, data.dtype, data.nbytes, types[tensor.name])
        else:
            writer.add_tensor_info(tensor.name, tensor.data.shape, tensor.data.dtype, tensor.data.nbytes,
                                   tensor.tensor_type)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_ti_data_to_file()
    for tensor in reader.tensors:
        data = np.ascontiguousarray(blocks[tensor.name]) if tensor.name in blocks else tensor.data
        writer.write_tensor_data(data, tensor_endianess=reader.endianess)
    writer.close()
    written = {t.name: t for t in GGUFReader(request["out"], "r").tensors}
    before = {t.name: t for t in reader.tensors}
    compared = {}
    for name in blocks:
        new, old = _dequantized(written[name]), _dequantized(before[name])
        same_shape = new.shape == old.shape
        diff = float(np.max(np.abs(new.astype(np.float64) - old.astype(np.float64)))) if same_shape else None
        compared[name] = {"equal": bool(same_shape and np.array_equal(new, old)), "max_abs_diff": diff,
                          "type": _type_name(written[name].tensor_type), "shape": list(new.shape)}
    return {"compared": compared}


def run(request: dict) -> dict:
    return {"describe": _describe, "dequantize": _dequantize, "replace": _replace}[request["op"]](request)


if __name__ == "__main__":
    serve(run, "gguf-py")
