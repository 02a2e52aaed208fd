"""The Dagster graph, in folders by domain: `data`, `training`, `evaluation`, `use` (export
and ratings) and `operations` (jobs, sensors, schedule), over the shared partitions, batches,
conditions and metadata; `definitions` is the code location. Assets are thin: read config
and resources, call one `stages` function, return metadata."""
