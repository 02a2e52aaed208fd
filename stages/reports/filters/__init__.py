"""The filter report: per-rule histograms, the per-document metrics table, and the rejected-document samples."""
