"""Tokenizer checks: exact round trip (blocking), compression of the target language (warning).

Each says in its `description` what passing means; its result says in words what was
found (a failure starts with FAILED) and its metadata names what failed."""

import dagster as dg

from assets.data.tokens import tokenizer
from assets.partitions import consumed_shards
from resources import CorpusStorage, YunqueSettings
from stages.data.tokenizer import round_trip


@dg.asset_check(
    asset=tokenizer, blocking=True,
    description="Passes when decode(encode(x)) == x, with the encoder the token shards use, and its ids equal the "
                "Hugging Face tokenizer's, for held-out documents of every consumed shard and for probe strings "
                "(emoji, accents, CJK, control characters, special-token strings, the empty string). Blocking: "
                "token_shards wait for a tokenizer that passed.",
)
def tokenizer_round_trip(context: dg.AssetCheckExecutionContext, settings: YunqueSettings,
                         corpus: CorpusStorage) -> dg.AssetCheckResult:
    cfg = settings.data_config()
    result = round_trip(settings.store(), consumed_shards(context, settings, corpus, "deduped_documents").ready, cfg)
    if not result.failures:
        text = f"all {result.checked} texts decode to themselves, with the same ids as the Hugging Face tokenizer"
    else:
        first = result.failures[0]
        text = (f"FAILED: {len(result.failures)} of {result.checked} texts do not round-trip or differ from the "
                f"Hugging Face ids, e.g. {first['text'][:60]!r} -> {first['decoded'][:60]!r}; see failed_texts")
    return dg.AssetCheckResult(
        passed=not result.failures, description=text,
        metadata={"texts_checked": result.checked, "failures": len(result.failures),
                  "failed_texts": dg.MetadataValue.json(result.failures[:5])},
    )


@dg.asset_check(
    asset=tokenizer,
    description="Passes when held-out documents of the target language need at most "
                "tokenizer.max_tokens_per_word tokens per word (1.4 by default). A warning: above it the vocabulary "
                "is too small or not fitted to the language, and training sees less text per token.",
)
def tokens_per_word(context: dg.AssetCheckExecutionContext, settings: YunqueSettings) -> dg.AssetCheckResult:
    cfg = settings.data_config()
    m = settings.store().manifest("tokenizer")
    report = m["stats"]["extra"]["compression"] if m else {"languages": {}}
    lang = cfg.langid.language
    r = report["languages"].get(lang)
    limit = cfg.tokenizer.max_tokens_per_word
    if r is None:
        reason = f"FAILED: no {lang} documents in the compression report, so tokens per word is unknown"
        return dg.AssetCheckResult(passed=False, severity=dg.AssetCheckSeverity.WARN, description=reason,
                                   metadata={"reason": reason, "language": lang, "limit": limit,
                                             "languages_in_report": dg.MetadataValue.json(sorted(report["languages"]))})
    passed = r["tokens_per_word"] <= limit
    if passed:
        text = f"{lang}: {r['tokens_per_word']} tokens per word, within the limit of {limit}"
    else:
        text = (f"FAILED: {lang} needs {r['tokens_per_word']} tokens per word, above the limit of {limit} "
                f"(vocabulary {report.get('vocab_size', 0)}); raise tokenizer.vocab_size or check the corpus language")
    return dg.AssetCheckResult(
        passed=passed, severity=dg.AssetCheckSeverity.WARN, description=text,
        metadata={"language": lang, "tokens_per_word": r["tokens_per_word"], "limit": limit,
                  "bytes_per_token": r["bytes_per_token"], "held_out": report.get("held_out", True),
                  "vocab_size": report.get("vocab_size", 0)},
    )
