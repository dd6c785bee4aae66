"""`eagle3-quant bench`: the artifact and its BF16 reference in vLLM's real serving engine, with the prediction
`validate` makes for it."""
