"""SGLang: the loader check child with its CPU patches and comparisons, and the layers it feeds a draft."""
