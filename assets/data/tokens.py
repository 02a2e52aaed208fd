"""tokenizer (whole corpus) and token_shards (per shard, in batches)."""

from collections.abc import Iterator

import dagster as dg

from assets.batch import POLICY, Event, ShardEvents, each_shard
from assets.conditions import changed_deps, no_dep_requested
from assets.data.dedup import deduped_documents
from assets.partitions import consumed_shards, shards
from resources import CorpusStorage, YunqueSettings
from stages.asset_names import TOKEN_SHARDS, TOKENIZER
from stages.store.versions import CODE_VERSIONS

AC = dg.AutomationCondition

# Trained once by automation, when it is missing and every registered shard has
# deduplicated output. A shard that lands later does not retrain it (that would make
# every token shard and model stale). A changed tokenizer.* setting or
# `tokenizer.retrain` retrains it when it is materialized by hand (UI, `yunque run`).
# (AC.on_missing() would never fire here: it only reacts to partitions added after it was
# first evaluated, and this asset is missing from the start.) Requested again after a
# failure only when more documents land.
TOKENIZER_CONDITION = (
    AC.missing() & changed_deps().since_last_handled() & no_dep_requested() & ~AC.any_deps_missing()
    & ~AC.any_deps_in_progress() & ~AC.in_progress()
).with_label("missing, all shards deduplicated")

# Re-encode a shard when its documents change, and every shard when the tokenizer does,
# but never with a tokenizer whose blocking round-trip check failed (blocking checks only
# hold inside one run, and the tokenizer and the shards always run apart).
TOKENS_CONDITION = (
    changed_deps().since_last_handled() & no_dep_requested() & ~AC.any_deps_missing() & ~AC.any_deps_in_progress()
    & ~AC.in_progress() & AC.all_deps_blocking_checks_passed()
).with_label("documents or tokenizer updated")


@dg.asset(deps=[deduped_documents], code_version=CODE_VERSIONS[TOKENIZER], group_name="tokens",
          kinds={"huggingface"}, automation_condition=TOKENIZER_CONDITION)
def tokenizer(context: dg.AssetExecutionContext, settings: YunqueSettings,
              corpus: CorpusStorage) -> dg.MaterializeResult:
    """Byte-level BPE trained on a sample of the deduplicated training split, saved as a
    Hugging Face tokenizer directory (tokenizer.json, tokenizer_config.json with a chat
    template) with a compression report on held-out documents."""
    from assets.metadata import rows_table
    from stages.data.tokenizer import TokenizerError, tokenizer_stage

    store = settings.store()
    cfg = settings.data_config()
    ready = consumed_shards(context, settings, corpus, "deduped_documents").ready
    try:
        stats = tokenizer_stage(store, ready, cfg)
    except TokenizerError as e:
        raise dg.Failure(str(e)) from e
    x = stats.extra
    untrained = sorted(set(ready) - set(x["shards"]))
    if untrained:
        context.log.info(f"shards added since the tokenizer was trained (encoded with it as is): {untrained}")
    report = x["compression"]
    rows = [{"language": lang, **{k: v for k, v in r.items()}} for lang, r in report["languages"].items()]
    target = report["languages"].get(cfg.langid.language, {})
    md = {
        "vocab_size": x["vocab_size"], "tokenizer_hash": x["tokenizer_hash"], "cached": stats.cached,
        "train_documents": x["train_documents"], "train_bytes": x["train_bytes"],
        "sample_fraction": x["sample_fraction"], "held_out_documents": x["held_out_documents"],
        "train_seconds": x["train_seconds"], "encoder": x["encoder"], "encoder_mismatches": x["encoder_mismatches"],
        "trained_on_shards": dg.MetadataValue.json(x["shards"]),
        "shards_added_since": dg.MetadataValue.json(untrained),
        "tokens_per_word": target.get("tokens_per_word", 0.0),
        "bytes_per_token": target.get("bytes_per_token", 0.0),
        "compression_report_path": dg.MetadataValue.path(str(store.dir(TOKENIZER) / "compression_report.json")),
        "path": dg.MetadataValue.path(str(store.dir(TOKENIZER))),
    }
    if rows:
        md["compression"] = rows_table(rows)
    return dg.MaterializeResult(metadata=md, data_version=dg.DataVersion(x["tokenizer_hash"]))


@dg.asset(partitions_def=shards, deps=[deduped_documents, tokenizer], code_version=CODE_VERSIONS[TOKEN_SHARDS],
          group_name="tokens", kinds={"numpy"}, automation_condition=TOKENS_CONDITION, backfill_policy=POLICY,
          output_required=False)
def token_shards(context: dg.AssetExecutionContext, settings: YunqueSettings,
                 corpus: CorpusStorage) -> Iterator[object]:
    """The shard's documents as flat token arrays (train and validation split by document),
    end-of-document token after each, with offsets and a JSON header; np.memmap-able."""
    from assets.metadata import rows_table
    from model.core.config import corpus_verdict
    from stages.data.token_shards import corpus_tokens, token_shard_stage

    store = settings.store()
    cfg = settings.data_config()
    ready = consumed_shards(context, settings, corpus, "deduped_documents").ready
    tok = store.manifest(TOKENIZER)
    vocab = tok["stats"]["extra"]["vocab_size"] if tok else 0
    events = ShardEvents(context)

    def one(shard: str) -> Iterator[Event]:
        stats = token_shard_stage(store, shard, cfg)
        x = stats.extra
        md = {
            "documents": stats.docs_out, "tokens": x["tokens"], "train_tokens": x["train_tokens"],
            "val_tokens": x["val_tokens"], "train_documents": x["train_documents"],
            "val_documents": x["val_documents"], "bytes_per_token": round(stats.bytes_in / max(1, x["tokens"]), 3),
            "dtype": x["dtype"], "tokenizer_hash": x["tokenizer_hash"], "cached": stats.cached,
            "dagster/row_count": stats.docs_out,
            "path": dg.MetadataValue.path(str(store.dir(TOKEN_SHARDS, shard))),
        }
        # over the shards encoded so far with this tokenizer ("N of M" says whether it is
        # all): read once per batch, not once per shard, and reported with the batch's last
        if shard == context.partition_keys[-1]:
            total = corpus_tokens(store, ready)
            md |= {"corpus_train_tokens": total["train_tokens"],
                   "corpus_shards_encoded": f"{total['shards']} of {len(ready)}",
                   "tokens_per_parameter": rows_table(corpus_verdict(total["train_tokens"], vocab))}
        yield events.materialization(TOKEN_SHARDS, shard, md, stats.key, CODE_VERSIONS[TOKEN_SHARDS],
                                     {"deduped_documents": shard, TOKENIZER: None})

    yield from each_shard(context, one)
