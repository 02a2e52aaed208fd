"""Driving a Dagster instance from the CLI: registering and submitting backfills, following them, the daemon, and in-process runs. Not part of the code location."""
