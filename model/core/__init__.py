"""What every training program shares: the model and its presets, the chat format and conversation batches, the optimizer, the learning-rate schedule, precision, FLOPs, and the parallel wrappers."""
