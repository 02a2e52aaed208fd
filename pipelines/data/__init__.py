"""Reading a corpus and making documents worth training on: readers per format, HTML
extraction, the Gopher/C4/FineWeb quality rules, fastText language ID, MinHash and LSH dedup,
and the Debian sample corpus."""
