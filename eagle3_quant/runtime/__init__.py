"""Pure PyTorch runtime for Llama-style Eagle3 drafts (BF16/FP16/FP32 and this project's FP8 checkpoints)."""
