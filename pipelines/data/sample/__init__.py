"""The sample corpus: Debian documentation packages fetched without root (`debian`), one shard builder per package (`builders`), and `fetch_sample` that puts them together (`fetch`)."""
