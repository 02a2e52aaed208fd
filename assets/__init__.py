"""Dagster assets, checks, partitions, sensors and jobs, one module per stage; `definitions`
is the code location. Assets are thin: read config and resources, call one `stages` function,
return metadata."""
