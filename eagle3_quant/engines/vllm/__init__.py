"""vLLM: its layers' names and rules, the loader check child with its CPU patches and comparisons, the serving
child, the hidden-state export child."""
