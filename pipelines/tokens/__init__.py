"""Text to token ids: the byte-level BPE tokenizer (training, encoding, chat template), the
token-array file format, and the train/validation split by document."""
