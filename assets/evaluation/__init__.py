"""Evaluation and its verdicts: eval_report across every checkpoint, exported_model (Hugging
Face and GGUF, checked against our logits), and promoted_model with the no_regression
check that guards it."""
