"""The artifact's records: the manifest (`eagle3_quant.json`) and the validation report (`validation.json`)."""
