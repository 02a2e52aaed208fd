"""The data library: torch-free and Dagster-free. `data` (read, extract, filter, language ID,
MinHash and dedup, the sample corpus), `tokens` (tokenizer, token arrays, split), `tasks`
(math, chat and preference data, text statistics), `config` (the library's sections of the
configuration tree) and `sections` (the kit every section is built with, the model's too).
It never imports the layers above it, torch or Dagster (tests/test_layers.py)."""
