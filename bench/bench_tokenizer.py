"""Tokenizer training time and encode throughput, our batch path against tiktoken and
Hugging Face `tokenizers`, on the same documents in the same run.

    python -m bench.bench_tokenizer [--input GLOB] [--vocab N] [--rounds N] [--threads N]

Training: `pipelines.tokens.tokenizer.train_bpe` (HF `tokenizers` BpeTrainer) on every input text.
Encoding, each given the texts in memory and the same number of threads:
  ours      `DocumentEncoder.encode_arrays` (tiktoken's encode_to_numpy on a thread pool)
            + packing into the uint16 token array and offsets that token_shards writes
            (pipelines.tokens.token_format.SplitWriter)
  tiktoken  `tiktoken.Encoding(pat_str=our split pattern, mergeable_ranks=the bytes of
            each vocabulary entry)`.encode_batch (the reasoning tags allowed, as in ours):
            the peer, no packing
  hf        `tokenizers.Tokenizer.encode_batch_fast` on the trained tokenizer.json (what
            `transformers` users get)
All three must give identical ids on every document, or the benchmark fails. They run in
interleaved rounds, rotating which goes first (bench.common.interleaved); ratios are
taken within each round, and their median and spread over the rounds are reported.
Training is timed once: it has no peer here (train_bpe is HF's trainer).
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from pathlib import Path

import numpy as np

from bench.common import Spread, default_glob, interleaved, load_texts
from pipelines.tokens.token_format import SplitWriter, token_dtype
from pipelines.tokens.tokenizer import (
    DocumentEncoder,
    save_pretrained,
    tiktoken_encoding,
    train_bpe,
)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--input", default=default_glob("clean_documents"),
                   help="parquet glob of documents (default: the sample's clean_documents)")
    p.add_argument("--vocab", type=int, default=8192)
    p.add_argument("--rounds", "--repeat", dest="rounds", type=int, default=5,
                   help="interleaved encode rounds (ours, tiktoken, hf, rotating)")
    p.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    args = p.parse_args()
    # before the first tokenizers call, which sizes its thread pool for the process
    os.environ["RAYON_NUM_THREADS"] = str(args.threads)

    _, texts = load_texts(args.input)
    mb = sum(len(t.encode()) for t in texts) / 1e6
    print(f"{len(texts):,} documents, {mb:.1f} MB of UTF-8 text, {args.threads} threads, vocab {args.vocab}")

    t0 = time.perf_counter()
    tok = train_bpe(texts, args.vocab)
    train_s = time.perf_counter() - t0
    print(f"train BPE: {train_s:.1f} s ({mb / train_s:.1f} MB/s)")

    with tempfile.TemporaryDirectory() as d:
        save_pretrained(tok, Path(d), 1024)
        ours = DocumentEncoder(d, backend="tiktoken")
        hf = DocumentEncoder(d, backend="hf").hf
        peer = tiktoken_encoding(hf)
        dtype = token_dtype(ours.vocab_size)

        def run_ours():
            arrays = ours.encode_arrays(texts, threads=args.threads)
            w = SplitWriter(Path(d), "bench", dtype, ours.eot_id)
            w.add(arrays, 0)
            w.close()
            return arrays

        def run_hf():
            return [e.ids for e in hf.encode_batch_fast(texts, add_special_tokens=False)]

        def run_tiktoken():
            return peer.encode_batch(texts, num_threads=args.threads, allowed_special=ours.TAGS,
                                     disallowed_special=())

        rounds = interleaved({"ours": run_ours, "tiktoken": run_tiktoken, "hf": run_hf}, args.rounds)
        packed = np.fromfile(Path(d) / "bench.bin", dtype)
    ref = [a.tolist() for a in rounds.last["ours"]]
    for name in ("tiktoken", "hf"):
        same = sum(a == b for a, b in zip(rounds.last[name], ref))
        if same != len(ref):
            raise SystemExit(f"{name}: {len(ref) - same} documents with different ids than ours")
    tokens = sum(map(len, ref))
    assert len(packed) == tokens + len(ref)  # one end-of-document token each
    print(f"identical ids on all {len(ref):,} documents; {tokens:,} tokens, "
          f"{mb * 1e6 / tokens:.2f} bytes/token")
    rounds.report("tiktoken", "MB/s", work=mb, title=f"encode, {args.rounds} interleaved rounds "
                  "(ratios: tiktoken seconds / case seconds, > 1: faster than tiktoken):")
    for name in rounds.cases:
        rate = Spread.of([tokens / s / 1e6 for s in rounds.seconds(name)])
        print(f"  {name}: {rate.fmt('.2f', 'Mtok/s')}")
    print(f"  ours vs hf: {rounds.ratio('ours', 'hf').fmt()} (> 1: ours faster)")

if __name__ == "__main__":
    main()
