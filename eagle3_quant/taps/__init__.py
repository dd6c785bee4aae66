"""Taps: which target layers (transformers ``hidden_states`` indices) feed the draft's fc. Everything about them
that needs no stage lives here; the stages call it and keep only their glue.

- ``conventions``: the two ways ids count (input / output), `resolve_taps`, the engines' ascending order.
- ``engine_rules``: what each engine (vLLM V1, vLLM V2, SGLang) reads from a config and feeds, `engine_taps`.
- ``candidates``: the layers the draft was trained on and the candidate layer sets worth measuring.
- ``capture``: what a calibration set captures and records about its taps, and the candidates a set can rebuild.
- ``summary``: trained vs served as the verbs report it (`inspect`, the mismatch note, `validate`'s metrics.taps).
- ``written_ids``: the ids `--serve-taps trained` writes so that every engine feeds the chosen layers.
- ``serve_decision``: `--serve-taps`' decision from the config and the measured candidates.

Elsewhere: the manifest's record in ``records/serve_taps.py``; SGLang's own reading in ``engines/sglang/taps.py``;
measuring the candidates in ``quantize/serve_taps.py`` and ``validate/taps_report.py``; the bench's reference with
the artifact's ids in ``bench/taps.py``; the views in ``cli/render_taps.py`` and ``export/card_taps.py``.
"""
