"""Checkpoints: the training state saved and resumed, the files and checksums on disk, the mirror to an object store, and opening one for use."""
