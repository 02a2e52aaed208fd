"""eval_contamination (whole corpus) and its blocking check: no evaluation set leaked into
the training split (stages.data.decontamination)."""

import dagster as dg

from assets.data.tokens import token_shards
from assets.partitions import consumed_shards
from resources import CorpusStorage, YunqueSettings
from stages.asset_names import EVAL_CONTAMINATION
from stages.store.versions import CODE_VERSIONS

ASSET = EVAL_CONTAMINATION


# group "tokens", with the token shards it checks (and purifies): the UI draws it between them and
# base_model, which trains on its clean split, not at the end of the graph with eval_report
@dg.asset(deps=[token_shards], code_version=CODE_VERSIONS[ASSET], group_name="tokens", kinds={"parquet"})
def eval_contamination(context: dg.AssetExecutionContext, settings: YunqueSettings,
                       corpus: CorpusStorage) -> dg.MaterializeResult:
    """Every evaluation set (held-out math in both wordings, the held-out domain QA pairs, a
    GSM8K file, decontamination.eval_files) looked up in the training split of every
    consumed token shard by 13-gram overlap (GPT-3's method). The report names each
    contaminated item with the shard and document it was found in; with
    decontamination.purify, a purified split leaves those documents out (recorded in
    rejected_documents, reason eval_contamination) and base_model trains on it."""
    from assets.metadata import rows_table
    from stages.data.decontamination import DecontaminationError, decontamination_stage
    from stages.training.pretrain import token_inputs
    from stages.training.runs import PretrainError

    store = settings.store()
    chosen = consumed_shards(context, settings, corpus, "token_shards")
    if chosen.pending:
        raise dg.Failure(f"shards not encoded yet: {sorted(chosen.pending)}; materialize token_shards for them first",
                         allow_retries=False)
    try:
        _, versions, _ = token_inputs(store, chosen.ready)
        stats = decontamination_stage(store, versions, settings.data_config(), progress=context.log.info)
    except (PretrainError, DecontaminationError) as e:
        raise dg.Failure(str(e), allow_retries=False) from e
    x = stats.extra
    sets = [{"set": name, **r} for name, r in x["sets"].items()]
    out = store.dir(ASSET)
    return dg.MaterializeResult(
        metadata={
            "passed": x["passed"], "cached": stats.cached, "method": x["method"], "ngram": x["ngram"],
            "limit": x["limit"], "sets": rows_table(sets) if sets else dg.MetadataValue.json([]),
            "sets_checked": dg.MetadataValue.json(sorted(x["sets"])),
            "training_documents_scanned": x["documents_scanned"],
            "contaminated_documents": x["contaminated_documents"],
            "purified_shards": dg.MetadataValue.json(sorted(x["purified_shards"])),
            "domain_qa_replaced": len(x["domain_qa_replaced"]),
            "seconds": x["seconds"], "index_bytes": x["index_bytes"],
            "report": dg.MetadataValue.path(str(out / "report.json")),
            "hits": dg.MetadataValue.path(str(out / "hits.parquet")),
        },
        data_version=dg.DataVersion(stats.key))


@dg.asset_check(
    asset=eval_contamination, blocking=True,
    description="Passes when no evaluation set has more than decontamination.max_contaminated of its items in the "
                "training split (13-gram overlap), or when decontamination.purify removed the documents they were "
                "found in. Blocking: base_model does not train on a contaminated split (and refuses to, outside "
                "this run too).",
)
def no_eval_contamination(context: dg.AssetCheckExecutionContext,
                          settings: YunqueSettings) -> dg.AssetCheckResult:
    from stages.data.decontamination import report

    r = report(settings.store())
    if r is None:
        return dg.AssetCheckResult(passed=False, description="FAILED: eval_contamination has no report yet")
    over = {n: s for n, s in r["sets"].items() if s["over_limit"]}
    sets = ", ".join(f"{n} {s['contaminated']}/{s['items']}" for n, s in r["sets"].items())
    if not over:
        text = f"no set above {r['limit']:.0%} contaminated ({sets})"
    elif r["passed"]:
        text = (f"contaminated items found ({sets}); the purified split leaves out their "
                f"{r['contaminated_documents']} documents")
    else:
        name, s = next(iter(over.items()))
        text = (f"FAILED: {len(over)} sets above {r['limit']:.0%} contaminated, e.g. {name}: {s['contaminated']} of "
                f"{s['items']} items found in the training split; see contaminated_items, or set "
                "decontamination.purify=true")
    return dg.AssetCheckResult(
        passed=bool(r["passed"]), description=text,
        metadata={"sets": dg.MetadataValue.json(r["sets"]),
                  "contaminated_items": dg.MetadataValue.json(r["examples"]),
                  "contaminated_documents": r["contaminated_documents"]})
