"""Training runs as stages: pretraining and post-training preparation, mixtures, which data is new, which checkpoint and shards a stage consumes, and lineage."""
