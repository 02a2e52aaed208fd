"""The on-disk format of a token shard (`data/token_shards/<shard>/`):

    header.json        {"format", "dtype", "vocab_size", "eot_id", "tokenizer_hash", "shard",
                        "splits": {"train": {"documents", "tokens", "bytes"}, "val": {...}}}
    train.bin          flat little-endian uint16 (uint32 if the vocabulary needs it): every
                       document's tokens followed by the end-of-document token
    train.idx          flat int64, documents + 1 offsets into train.bin (document i is
                       tokens[idx[i]:idx[i+1]], its trailing end-of-document token included)
    val.bin, val.idx   the same for the validation documents
    documents.parquet  doc_id, split, index within the split: lineage from tokens to documents

Plain files so numpy (`np.memmap`), other languages and other trainers can read them
without this package.
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Self

import numpy as np

FORMAT = "yunque.tokens/1"
HEADER = "header.json"
SPLITS = ("train", "val")


def token_dtype(vocab_size: int) -> np.dtype:
    return np.dtype("<u2") if vocab_size <= 2**16 else np.dtype("<u4")


class TokenShardError(ValueError):
    pass


@dataclass
class TokenSplit:
    tokens: np.ndarray  # memory-mapped, read-only
    offsets: np.ndarray  # int64, documents + 1

    @property
    def documents(self) -> int:
        return len(self.offsets) - 1

    def document(self, i: int) -> np.ndarray:
        return self.tokens[self.offsets[i]:self.offsets[i + 1]]


@dataclass
class TokenShard:
    path: Path
    header: dict

    @classmethod
    def open(cls, path: str | Path) -> TokenShard:
        path = Path(path)
        hp = path / HEADER
        if not hp.exists():
            raise TokenShardError(f"{path}: no {HEADER}; is this a token shard directory?")
        header = json.loads(hp.read_text())
        if header.get("format") != FORMAT:
            raise TokenShardError(f"{hp}: format {header.get('format')!r}, expected {FORMAT!r}")
        return cls(path, header)

    @property
    def tokenizer_hash(self) -> str:
        return self.header["tokenizer_hash"]

    def verify(self) -> None:
        """Raise TokenShardError unless every file has the size its header says."""
        for name in SPLITS:
            self.split(name)

    def split(self, name: str) -> TokenSplit:
        if name not in SPLITS:
            raise TokenShardError(f"unknown split {name!r}; choose one of {SPLITS}")
        info = self.header["splits"][name]
        dtype = np.dtype(self.header["dtype"])
        tokens = _memmap(self.path / f"{name}.bin", dtype, info["tokens"])
        offsets = _memmap(self.path / f"{name}.idx", np.dtype("<i8"), info["documents"] + 1)
        return TokenSplit(tokens, offsets)


def _memmap(path: Path, dtype: np.dtype, count: int) -> np.ndarray:
    size = path.stat().st_size if path.exists() else -1
    if size != count * dtype.itemsize:
        raise TokenShardError(f"{path}: {size} bytes, header says {count} x {dtype} "
                              f"= {count * dtype.itemsize}; the shard is truncated or mixed")
    if count == 0:
        return np.zeros(0, dtype)
    return np.memmap(path, dtype=dtype, mode="r", shape=(count,))


class SplitWriter:
    """Appends documents' tokens to `<split>.bin` and offsets to `<split>.idx` as they
    are encoded, so a shard never needs its whole token array in memory."""

    def __init__(self, directory: Path, name: str, dtype: np.dtype, eot_id: int):
        self.name, self.dtype, self.eot = name, dtype, eot_id
        # kept open across add() calls; close() closes them
        self.bin = open(directory / f"{name}.bin", "wb")  # noqa: SIM115
        self.idx = open(directory / f"{name}.idx", "wb")  # noqa: SIM115
        self.tokens = self.documents = self.bytes = 0
        self.idx.write(np.zeros(1, "<i8").tobytes())

    def add(self, docs: Sequence[np.ndarray], nbytes: int) -> None:
        if not len(docs):
            return
        eot = np.array([self.eot], self.dtype)
        pieces: list[np.ndarray] = []
        for d in docs:
            pieces += (d, eot)
        flat = np.concatenate(pieces).astype(self.dtype, copy=False)
        ends = np.cumsum([len(d) + 1 for d in docs], dtype=np.int64)
        self.bin.write(flat.tobytes())
        self.idx.write((ends + self.tokens).astype("<i8").tobytes())
        self.tokens += int(ends[-1])
        self.documents += len(docs)
        self.bytes += nbytes

    def close(self) -> dict:
        for f in (self.bin, self.idx):
            if not f.closed:
                f.flush()
                os.fsync(f.fileno())  # the manifest that follows must not outlive the data
                f.close()
        return {"documents": self.documents, "tokens": self.tokens, "bytes": self.bytes}

    def reset(self) -> None:
        """Start over (the caller re-encodes the shard with another encoder)."""
        for f in (self.bin, self.idx):
            f.seek(0)
            f.truncate()
        self.tokens = self.documents = self.bytes = 0
        self.idx.write(np.zeros(1, "<i8").tobytes())

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc) -> None:
        self.bin.close()
        self.idx.close()
