"""llama.cpp: its tools built from the package registry (`build.py`), found (`tools.py`), its converter run on a
draft (`convert.py`), `llama-quantize` (`quantize.py`), GGUF files read and written in its own gguf-py
(`gguf_child.py`), and `llama-server` run and asked (`server.py`)."""
