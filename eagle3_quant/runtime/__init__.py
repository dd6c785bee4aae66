"""Pure PyTorch runtime for Llama-style Eagle3 drafts (BF16/FP16/FP32 and this project's FP8 checkpoints).

Public entry points are re-exported lazily by ``eagle3_quant`` (``load_draft``, ``save_draft``,
``new_draft_config``, ``Eagle3Draft``). Modules: ``fp8`` (FP8 primitives), ``fp8_linear``, ``rope``,
``attention``, ``spec``, ``model``, ``embedding``, ``loading``, ``saving``, ``drafting`` (``propose``,
``propose_all``, ``draft_inputs``).
"""
