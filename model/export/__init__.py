"""Export: a transformers directory and GGUF files (f16, q8_0, q4_0), and the check that each gives our model's logits."""
