"""Driving a Dagster instance from outside the code location, for the CLI and the benchmarks:
the daemon, registering and submitting backfills, following them, in-process runs, and what
the runs cost. It sits above `assets` (it builds the code location's definitions) and below
`yunque`; with `assets` and `resources` it is the third package that imports Dagster."""
