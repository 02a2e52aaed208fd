"""Judging checkpoints: the evaluation rows and export, the report across checkpoints and seeds, and the promotion gate."""
