"""human_preferences: the chat page's ratings as preference pairs and SFT conversations
(stages.data.human_preferences). The job and the sensor that carry them to a model are in
assets.operations.feedback."""

import dagster as dg

from resources import YunqueSettings
from stages.asset_names import HUMAN_PREFERENCES
from stages.data.human_preferences import CODE_VERSION


@dg.asset(name=HUMAN_PREFERENCES, group_name="feedback", kinds={"json"}, code_version=CODE_VERSION)
def human_preferences(context: dg.AssetExecutionContext, settings: YunqueSettings) -> dg.MaterializeResult:
    """The ratings people gave on the chat page (`yunque serve`), read from the home's
    feedback folder: a compare with a winner becomes a preference pair, an edited answer a
    pair over each shown answer and an SFT conversation, a winner or a thumbs-up an SFT
    conversation. sft_model, reward_model and dpo_model mix them with their synthetic data
    (`post.<stage>.human_weight`); the version is a hash of the ratings, and their lineage
    names it. With no ratings yet it materializes empty and changes nothing downstream.

    Its metadata says how many ratings no trained model holds yet (`ratings_waiting`, by
    the model version that wrote the answers). Materializing it by hand uses nothing up:
    the feedback sensor counts the ratings the trained models hold, not the ones read here.
    Every asset from `sft_model` to `promoted_model` depends on it, so a new ratings
    version marks them all stale."""
    from assets.metadata import rows_table
    from stages.data.human_preferences import SUMMARY_FILE, build, waiting
    from stages.training.lineage import ratings_in_models

    store = settings.store()
    s = build(store)
    wait = waiting(store, ratings_in_models(store))
    for line in s["skipped_lines"][:20]:
        context.log.warning(f"not a rating, skipped: {line}")
    out = store.dir(HUMAN_PREFERENCES)
    counts = [{"record gave": k, "records": v} for k, v in s["records"].items()]
    models = [{"model": k, "answers": v} for k, v in s["models"].items()]
    waits = [{"answers by": k, "ratings waiting": v} for k, v in wait["by_model"].items()]
    context.log.info(f"{wait['waiting']} of {wait['ratings']} rating(s) are in no trained model yet; the models "
                     f"hold the first {wait['trained']}")
    return dg.MaterializeResult(
        metadata={"feedback_version": s["version"], "cached": s["cached"], "ratings": s["ratings"],
                  "ratings_waiting": wait["waiting"], "ratings_in_models": wait["trained"],
                  "waiting_by_model": rows_table(waits) if waits else dg.MetadataValue.json({}),
                  "preference_pairs": s["pairs"],
                  "sft_conversations": s["sft"], "skipped_lines": len(s["skipped_lines"]),
                  "newest_rating": s["newest"] or "-",
                  "records": rows_table(counts) if counts else dg.MetadataValue.json({}),
                  "models": rows_table(models) if models else dg.MetadataValue.json({}),
                  "feedback_dir": dg.MetadataValue.path(s["feedback_dir"]),
                  "summary": dg.MetadataValue.path(str(out / SUMMARY_FILE))},
        data_version=dg.DataVersion(s["version"]))
