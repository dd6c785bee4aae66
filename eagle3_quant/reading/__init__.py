"""Reading Eagle3 drafts: sources (folder or Hub), config, tensor layout per format, safetensors headers."""
