"""Tokenizer: BPE training (timed once, no peer) and ENCODING A BATCH OF DOCUMENTS held in
memory, ours against tiktoken's and Hugging Face `tokenizers`' batch APIs, on the same
documents, the same vocabulary and the same thread count, in interleaved rounds.

    python -m bench.bench_tokenizer [--input GLOB] [--limit N] [--vocab N] [--rounds N]
                                    [--threads N] [--quick]

Every case must give identical ids on every document, or the benchmark fails; the ratios
are ours_encode against each peer. The cases: docs/benchmarks.md#tokenizer-bench_tokenizer.
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

PEERS = ("tiktoken_encode_batch", "hf_encode_batch_fast")


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--input", default=default_glob("clean_documents"),
                   help="parquet glob of documents (default: the sample's clean_documents)")
    p.add_argument("--limit", type=int, default=None, help="first N documents of the input")
    p.add_argument("--vocab", type=int, default=None, help="vocabulary size (default 8192; 512 with --quick)")
    p.add_argument("--rounds", "--repeat", dest="rounds", type=int, default=None,
                   help="interleaved encode rounds (default 5; 2 with --quick)")
    p.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    p.add_argument("--quick", action="store_true", help="a check that it runs: 2,000 documents, vocab 512, 2 rounds")
    args = p.parse_args(argv)
    args.limit = args.limit or (2000 if args.quick else None)
    args.vocab = args.vocab or (512 if args.quick else 8192)
    args.rounds = args.rounds or (2 if args.quick else 5)
    # before the first tokenizers call, which sizes its thread pool for the process
    os.environ["RAYON_NUM_THREADS"] = str(args.threads)

    _, texts = load_texts(args.input, args.limit)
    mb = sum(len(t.encode()) for t in texts) / 1e6
    print(f"{len(texts):,} documents, {mb:.1f} MB of UTF-8 text, {args.threads} threads, vocab {args.vocab}")

    t0 = time.perf_counter()
    tok = train_bpe(texts, args.vocab)
    train_s = time.perf_counter() - t0
    print(f"train_bpe (HF BpeTrainer via train_from_iterator, all {len(texts):,} texts; no peer, timed once): "
          f"{train_s:.1f} s ({mb / train_s:.1f} MB/s)")

    with tempfile.TemporaryDirectory() as d:
        save_pretrained(tok, Path(d), 1024)
        ours = DocumentEncoder(d, backend="tiktoken")
        hf = DocumentEncoder(d, backend="hf").hf
        peer = tiktoken_encoding(hf)
        dtype = token_dtype(ours.vocab_size)

        def ours_encode():
            return ours.encode_arrays(texts, threads=args.threads)

        def ours_encode_write():
            arrays = ours.encode_arrays(texts, threads=args.threads)
            w = SplitWriter(Path(d), "bench", dtype, ours.eot_id)
            w.add(arrays, 0)
            w.close()
            return arrays

        def hf_encode_batch_fast():
            return [e.ids for e in hf.encode_batch_fast(texts, add_special_tokens=False)]

        def tiktoken_encode_batch():
            return peer.encode_batch(texts, num_threads=args.threads, allowed_special=ours.TAGS,
                                     disallowed_special=())

        cases = {"ours_encode": ours_encode, "tiktoken_encode_batch": tiktoken_encode_batch,
                 "hf_encode_batch_fast": hf_encode_batch_fast, "ours_encode_write": ours_encode_write}
        rounds = interleaved(cases, args.rounds)
        packed = np.fromfile(Path(d) / "bench.bin", dtype)
        ours.close()
    ref = [a.tolist() for a in rounds.last["ours_encode"]]
    for name in (*PEERS, "ours_encode_write"):
        got = rounds.last[name]
        same = sum((a.tolist() if isinstance(a, np.ndarray) else a) == b for a, b in zip(got, ref))
        if same != len(ref):
            raise SystemExit(f"{name}: {len(ref) - same} documents with different ids than ours_encode")
    tokens = sum(map(len, ref))
    assert len(packed) == tokens + len(ref)  # one end-of-document token each
    print(f"identical ids on all {len(ref):,} documents; {tokens:,} tokens, "
          f"{mb * 1e6 / tokens:.2f} bytes/token")
    rounds.report("ours_encode", "MB/s", work=mb, compare=[],
                  title=f"encoding the {len(ref):,} documents, {args.rounds} interleaved rounds (seconds per call):")
    for name in rounds.cases:
        rate = Spread.of([tokens / s / 1e6 for s in rounds.seconds(name)])
        print(f"  {name}: {rate.fmt('.2f', 'Mtok/s')}")
    print("ours against each peer (encode a batch of documents, same threads; no writing on either side):")
    for name in PEERS:
        rounds.versus("ours_encode", name)
    rounds.versus("ours_encode_write", "tiktoken_encode_batch",
                  "ours_encode_write vs tiktoken_encode_batch (not like for like: ours also writes the arrays)")


if __name__ == "__main__":
    main()
