"""The stage layer: what the assets call. Memoised stage functions (one module per group
of assets, named like the asset modules), the store, run planning for training, report
building, the one configuration tree (`stages.config`) and the one answer to "which shards,
which checkpoint" (`stages.training.selection`). Uses `model` and `pipelines`; never Dagster."""
