"""Tokenizer checks: exact round trip (blocking), compression of the target language (warning)."""

import dagster as dg

from assets.partitions import consumed_shards
from assets.tokens import tokenizer
from resources import CorpusStorage, YunqueSettings
from stages.tokenizer import round_trip


@dg.asset_check(asset=tokenizer, blocking=True)
def tokenizer_round_trip(context: dg.AssetCheckExecutionContext, settings: YunqueSettings,
                         corpus: CorpusStorage) -> dg.AssetCheckResult:
    """decode(encode(x)) == x on held-out documents and on emoji, accents, CJK, control
    characters, special-token strings and the empty string, with the encoder the token
    shards use, which must also give the Hugging Face tokenizer's ids."""
    cfg = settings.data_config()
    result = round_trip(settings.store(), consumed_shards(context, settings, corpus, "deduped_documents").ready, cfg)
    return dg.AssetCheckResult(
        passed=not result.failures,
        metadata={"texts_checked": result.checked, "failures": len(result.failures),
                  "examples": dg.MetadataValue.json(result.failures[:5])},
    )


@dg.asset_check(asset=tokenizer)
def tokens_per_word(context: dg.AssetCheckExecutionContext, settings: YunqueSettings) -> dg.AssetCheckResult:
    """Held-out tokens per word of the target language at most tokenizer.max_tokens_per_word
    (1.4): above it, the vocabulary is too small or not fitted to the language."""
    cfg = settings.data_config()
    m = settings.store().manifest("tokenizer")
    report = m["stats"]["extra"]["compression"] if m else {"languages": {}}
    lang = cfg.langid.language
    r = report["languages"].get(lang)
    limit = cfg.tokenizer.max_tokens_per_word
    if r is None:
        return dg.AssetCheckResult(passed=False, severity=dg.AssetCheckSeverity.WARN,
                                   metadata={"reason": f"no {lang} documents in the compression report"})
    return dg.AssetCheckResult(
        passed=r["tokens_per_word"] <= limit, severity=dg.AssetCheckSeverity.WARN,
        metadata={"language": lang, "tokens_per_word": r["tokens_per_word"], "limit": limit,
                  "bytes_per_token": r["bytes_per_token"], "held_out": report.get("held_out", True),
                  "vocab_size": report.get("vocab_size", 0)},
    )
