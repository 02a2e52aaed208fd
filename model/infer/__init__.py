"""Using a checkpoint: one checkpoint's evaluation row."""
