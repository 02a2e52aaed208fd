"""The PyTorch layer: the model and its presets, the training programs that torchrun starts
(pretraining, post-training), checkpoints, generation, evaluation and export. Uses the
`pipelines` library; never `stages`, `resources`, `assets`, `yunque` or Dagster (the
programs report back through the small `dagster_pipes` package only, in `model/launch/sinks.py`)."""
