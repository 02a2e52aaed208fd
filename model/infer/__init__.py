"""Using a checkpoint: KV-cache generation and one checkpoint's evaluation row."""
