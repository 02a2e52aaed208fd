"""Evaluation: eval_report across every checkpoint, and promoted_model with the no_regression check that guards it."""
