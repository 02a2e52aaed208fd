"""The data half of the graph on a two-shard corpus, in a real Dagster instance under a
temporary home: materialize, checks, exactly-once, re-run is cached (and `yunque run` of
the whole graph then starts no run), a new shard."""

from __future__ import annotations

import collections
import itertools
import json
import os
import subprocess
import sys

import dagster as dg
import polars as pl
import pytest

from tests.support import REPO
from tests.support.factory import SMALL_RUN, add_shard, write_two_shards
from yunque import env


@pytest.fixture()
def home(tmp_path, monkeypatch):
    monkeypatch.setenv("YUNQUE_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path / "home" / "dagster"))  # restored afterwards
    return env.use_home(tmp_path / "home")


@pytest.fixture()
def corpus(tmp_path):
    root = tmp_path / "corpus"
    expected = write_two_shards(root)
    return root, expected


def test_whole_data_graph(home, corpus):
    from orchestration.runner import run_graph

    root, expected = corpus
    summary = run_graph(str(root), overrides=SMALL_RUN)
    assert summary.ok, [r.error for r in summary.runs if not r.ok]
    assert sorted(summary.shards) == ["foro", "manuales"]

    kept = pl.read_parquet(f"{home}/data/deduped_documents/*/*.parquet")
    rejected = pl.read_parquet(f"{home}/data/rejected_documents/*/*.parquet")
    for col in ("doc_id", "shard", "source", "text", "lang", "lang_score"):
        assert col in kept.columns
    for col in ("doc_id", "shard", "source", "stage", "reason"):
        assert col in rejected.columns
    assert set(kept["lang"]) == {"es"}
    # every record read is accounted for exactly once: 10 files in manuales, 6 jsonl records
    # + 2 gz files in foro
    assert kept.height + rejected.height == 10 + 6 + 2
    assert pl.concat([kept["doc_id"], rejected["doc_id"]]).n_unique() == kept.height + rejected.height
    reasons = dict(zip(*rejected.group_by("reason").len().sort("reason").to_dict().values()))
    assert reasons.get("malformed_json") == 1 and reasons.get("decompress_error") == 1
    assert reasons.get("langid:other_language") == expected["langid"]
    assert reasons.get("near_duplicate") == expected["near_duplicate"]
    # the planted pair (manuales/guia.txt and the last record of foro/mensajes.jsonl): one
    # kept, the other rejected as its near-duplicate
    dup_src = rejected.filter(pl.col("reason") == "near_duplicate")["source"].to_list()
    pair = {"manuales/guia.txt", "foro/mensajes.jsonl#6"}
    assert len(dup_src) == 1 and dup_src[0] in pair
    assert (pair - set(dup_src)) <= set(kept["source"].to_list())
    # HTML boilerplate is gone from the kept text
    html = kept.filter(pl.col("source").str.ends_with(".html"))
    assert html.height == 6
    assert not any("cookies" in t or "Todos los derechos" in t for t in html["text"])

    instance = dg.DagsterInstance.get()
    # each shard's metadata, stage by stage, accounts for its documents: what a stage read is
    # what the stage before it kept, what it kept is what it read less its drops, the drops
    # are the rejected rows reason by reason, and the last stage's count and bytes are the
    # kept rows'
    chain_keys = ("raw_documents", "clean_documents", "filtered_documents", "minhash_signatures",
                  "deduped_documents")
    for shard, records_read in (("manuales", 10), ("foro", 6 + 2)):
        md = {}
        for key in chain_keys:
            mats = instance.fetch_materializations(dg.AssetKey(key), limit=10).records  # newest first
            assert {m.partition_key for m in mats} == {"foro", "manuales"}, key
            md[key] = {k: v.value for k, v in next(m for m in mats if m.partition_key == shard)
                       .asset_materialization.metadata.items()}
            drops = md[key]["drops_json"]
            assert md[key]["documents_out"] == md[key]["documents_in"] - sum(drops.values()), (shard, key, md[key])
            assert md[key]["rejected"] == sum(drops.values()) and "drops" in md[key], (shard, key)
        assert md["raw_documents"]["documents_in"] == records_read
        for before, after in itertools.pairwise(chain_keys):
            assert md[after]["documents_in"] == md[before]["documents_out"], (shard, before, after)
        for before, after in (("raw_documents", "clean_documents"), ("clean_documents", "filtered_documents"),
                              ("filtered_documents", "deduped_documents")):
            assert md[after]["bytes_in"] == md[before]["bytes_out"], (shard, before, after)
        mine = kept.filter(pl.col("shard") == shard)
        assert md["deduped_documents"]["documents_out"] == mine.height
        assert md["deduped_documents"]["bytes_out"] == sum(len(t.encode()) for t in mine["text"])
        drops = collections.Counter()
        for key in chain_keys:
            drops.update(md[key]["drops_json"])
        assert drops == collections.Counter(rejected.filter(pl.col("shard") == shard)["reason"].to_list()), shard
    assert instance.fetch_materializations(dg.AssetKey("dedup_index"), limit=1).records
    # every evaluation of a check, per asset and shard (a dict by check name alone would keep
    # only the last shard's verdict)
    evaluations = [(label, name, passed) for r in summary.runs for label, name, passed, _ in r.checks]
    checks = {name for _, name, _ in evaluations}
    assert {"every_document_once", "language_is_pure", "no_near_duplicates_left", "tokenizer_round_trip",
            "tokens_per_word", "loss_mask_assistant_only"} <= checks
    for shard in ("foro", "manuales"):  # the shard checks ran on each shard
        assert {n for label, n, _ in evaluations if label == f"deduped_documents[{shard}]"} >= {
            "every_document_once", "language_is_pure"}, shard
    # warnings: a 512-token vocabulary on random words may exceed 1.4 tokens per word,
    # 4 training steps on a corpus without validation documents prove nothing about loss,
    # and a model that has seen 256 tokens repeats itself; two post-training steps on a
    # dozen examples decide nothing about held-out pairs or reward hacking either
    warnings = ("tokens_per_word", "val_loss_below_unigram_entropy", "repetition",
                "heldout_pair_accuracy_above_chance", "no_reward_hacking")
    assert [(label, n) for label, n, passed in evaluations if not passed and n not in warnings] == []
    model = next(r.assets["base_model"] for r in summary.runs if "base_model" in r.assets)
    assert model["step"] == 4 and model["checkpoint"].endswith("step-00000004") and model["mlflow_run_id"]
    # ... evaluated on the token shards' validation split, and exported
    report = next(r.assets["eval_report"] for r in summary.runs if "eval_report" in r.assets)
    assert report["stages"] == ["base_model", "sft_model", "dpo_model", "ppo_model", "grpo_model"]
    assert report["cached"] is False
    # its numbers are the report's table, stage by stage (report.json beside report.md)
    from assets.evaluation.report import NUMERIC
    from stages.evaluation.promotion import FIGURES

    table = json.loads((home / "data" / "eval_report" / "report.json").read_text())["table"]
    assert [r["stage"] for r in table] == report["stages"] and (home / "data" / "eval_report" / "report.md").exists()
    numbers = {r["stage"]: {c: r[c] for c in NUMERIC if isinstance(r[c], (int, float))} for r in table}
    assert all("math_accuracy" in numbers[s] for s in report["stages"])
    assert report["figures"] == numbers
    # the numbers the UI plots across materializations: the figures of the chain's last stage only
    assert report["last_stage"] == "grpo_model"
    assert {k: v for k, v in report.items() if isinstance(v, (int, float)) and not isinstance(v, bool)} == {
        f"last_stage/{c}": numbers["grpo_model"][c] for c in FIGURES if c in numbers["grpo_model"]}
    exported = next(r.assets["exported_model"] for r in summary.runs if "exported_model" in r.assets)
    # the last stage of the chain is what gets exported
    assert exported["checkpoint"].endswith("grpo_model/step-00000002") and exported["max_abs_logit_diff"] <= 1e-4
    assert {"transformers_logits_match", "gguf_logits_match", "val_loss_rising", "repetition"} <= checks

    # The tokenizer and token arrays: loadable by transformers and by the training loader.
    from transformers import AutoTokenizer

    from model.pretrain.data import TokenWindows
    from pipelines.tokens.token_format import TokenShard

    tok = AutoTokenizer.from_pretrained(home / "data" / "tokenizer")
    assert len(tok) == 512
    tok_mat = instance.fetch_materializations(dg.AssetKey("tokenizer"), limit=1).records[0]
    assert tok_mat.asset_materialization.metadata["vocab_size"].value == 512
    paths = sorted((home / "data" / "token_shards").iterdir())
    assert [p.name for p in paths] == ["foro", "manuales"]
    headers = [TokenShard.open(p).header for p in paths]
    assert sum(h["splits"]["train"]["documents"] + h["splits"]["val"]["documents"] for h in headers) == kept.height
    x, _ = TokenWindows(paths, seq_len=16, batch_size=2).next_batch()
    assert x.shape == (2, 16) and int(x.max()) < 512
    ts = instance.fetch_materializations(dg.AssetKey("token_shards"), limit=10).records
    assert {m.partition_key for m in ts} == {"foro", "manuales"}
    assert "tokens_per_parameter" in ts[0].asset_materialization.metadata

    # Re-running an unchanged corpus does no work: every stage reports a cache hit.
    again = run_graph(str(root), overrides=SMALL_RUN)
    assert again.ok
    cached = [m.get("cached") for r in again.runs for m in r.assets.values()]
    assert cached and all(cached)

    # `yunque run` of the whole graph as a user types it, everything up to date: every data
    # output by its stage key, every model asset by its plan tag; no daemon, no run
    runs_before = len(instance.get_runs())
    done = subprocess.run([sys.executable, "-m", "yunque.cli", "--home", str(home), "run", "--corpus", str(root),
                           "--overrides", SMALL_RUN], cwd=REPO, capture_output=True, text=True, timeout=600,
                          check=False, env={**os.environ, "YUNQUE_HOME": str(home)})
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "nothing changed: no run started" in done.stdout, done.stdout[-3000:]
    assert "starting a Dagster daemon" not in done.stdout
    assert len(instance.get_runs()) == runs_before

    # A new shard: only its own signatures are computed; the old shards' stay cached.
    add_shard(root, "nuevo")
    third = run_graph(str(root), overrides=SMALL_RUN)
    assert third.ok
    sig_runs = {shard: m["cached"] for r in third.runs for (a, shard), m in r.per_shard.items()
                if a == "minhash_signatures"}
    assert sig_runs == {"foro": True, "manuales": True, "nuevo": False}
    kept = pl.read_parquet(f"{home}/data/deduped_documents/*/*.parquet")
    assert set(kept["shard"]) == {"foro", "manuales", "nuevo"}
    # ... and it is encoded with the existing tokenizer, which is not retrained
    md = {**{(None, k): m for r in third.runs if not r.shards for k, m in r.assets.items()},
          **{(shard, a): m for r in third.runs for (a, shard), m in r.per_shard.items()}}
    assert md[(None, "tokenizer")]["cached"] is True
    assert md[("nuevo", "token_shards")]["cached"] is False
    for shard in ("foro", "manuales"):
        assert md[(shard, "token_shards")]["cached"] == md[(shard, "deduped_documents")]["cached"]

    # Retraining the tokenizer (another vocabulary) marks every token shard stale.
    from dagster._core.definitions.data_version import StaleStatus
    from dagster._utils.test.data_versions import get_stale_status_resolver

    from assets.definitions import ASSETS

    def stale(key: str) -> set[str]:
        resolver = get_stale_status_resolver(instance, ASSETS)
        return {p for p in ("foro", "manuales", "nuevo")
                if resolver.get_status(dg.AssetKey(key), p) == StaleStatus.STALE}

    assert stale("token_shards") == set()
    retrained = run_graph(str(root), select="key:tokenizer", overrides=json.dumps({"tokenizer.vocab_size": 480}))
    assert retrained.ok and retrained.runs[0].assets["tokenizer"]["vocab_size"] == 480
    assert stale("token_shards") == {"foro", "manuales", "nuevo"}


def test_select_runs_only_the_selection(home, corpus):
    from orchestration.runner import plan, run_graph

    root, _ = corpus
    phases = plan("key:raw_documents")
    assert [[k.to_user_string() for k in p.keys] for p in phases] == [["raw_documents"]]
    summary = run_graph(str(root), select="key:raw_documents")
    assert summary.ok and len(summary.runs) == 1  # both shards in one batch
    assert summary.runs[0].shards == ["foro", "manuales"] and set(summary.runs[0].assets) == {"raw_documents"}
    assert not (home / "data" / "clean_documents").exists()
    with pytest.raises(ValueError, match="matches no asset"):
        plan("key:nope")


def test_shard_sensor_registers_new_shards(home, tmp_path):
    from assets.definitions import defs
    from resources import CorpusStorage
    from tests.assets.sensor_ticks import requested_partitions

    root = tmp_path / "watched"
    add_shard(root, "uno")
    instance = dg.DagsterInstance.get()
    sensor = defs().get_sensor_def("shard_sensor")
    resources = {"corpus": CorpusStorage(uri=str(root))}
    ctx = dg.build_sensor_context(instance=instance, resources=resources)
    result = sensor(ctx)
    assert requested_partitions(result) == ["uno"]
    assert result.dynamic_partitions_requests[0].partition_keys == ["uno"]
    instance.add_dynamic_partitions("shards", ["uno"])

    # nothing new: skipped
    ctx = dg.build_sensor_context(instance=instance, resources=resources, cursor=result.cursor)
    again = sensor(ctx)
    assert not again.run_requests and again.skip_reason

    add_shard(root, "dos", seed=5)
    ctx = dg.build_sensor_context(instance=instance, resources=resources, cursor=again.cursor or result.cursor)
    third = sensor(ctx)
    assert requested_partitions(third) == ["dos"]
    assert third.dynamic_partitions_requests[0].partition_keys == ["dos"]
    assert json.loads(third.cursor).keys() == {"uno", "dos"}
    instance.add_dynamic_partitions("shards", ["dos"])

    # a changed shard is requested again; a vanished one is deregistered
    (root / "uno" / "extra.txt").write_text("Otro documento más.", encoding="utf-8")
    import shutil

    shutil.rmtree(root / "dos")
    ctx = dg.build_sensor_context(instance=instance, resources=resources, cursor=third.cursor)
    fourth = sensor(ctx)
    assert requested_partitions(fourth) == ["uno"]
    assert [(type(r).__name__, r.partition_keys) for r in fourth.dynamic_partitions_requests] == [
        ("DeleteDynamicPartitionsRequest", ["dos"])]


def test_definitions_load():
    from assets.definitions import defs

    graph = defs().resolve_asset_graph()
    names = {k.to_user_string() for k in graph.get_all_asset_keys()}
    assert names == {"raw_documents", "clean_documents", "filtered_documents", "minhash_signatures", "quality_model",
                     "dedup_index", "deduped_documents", "tokenizer", "token_shards", "eval_contamination",
                     "base_model", "sft_model", "reward_model", "dpo_model", "ppo_model", "grpo_model", "eval_report",
                     "exported_model", "promoted_model", "human_preferences"}
    # the chain's order: each post-training stage starts from the one before it
    parents = {k.to_user_string(): {p.to_user_string() for p in graph.get(k).parent_keys}
               for k in graph.get_all_asset_keys()}
    assert parents["sft_model"] == {"base_model", "human_preferences"}
    assert parents["ppo_model"] == {"dpo_model", "reward_model", "human_preferences"}
    # the chat page's ratings: read by SFT, the reward model and DPO, and a direct parent of
    # everything after them up to the promotion, so that new ratings mark it all stale
    assert {a for a, p in parents.items() if "human_preferences" in p} == {
        "sft_model", "reward_model", "dpo_model", "ppo_model", "grpo_model", "eval_report", "exported_model",
        "promoted_model"}
    assert parents["grpo_model"] == {"ppo_model", "human_preferences"} and "grpo_model" in parents["exported_model"]
    assert "eval_contamination" in parents["base_model"] and parents["eval_contamination"] == {"token_shards"}
    assert graph.get_check_spec(dg.AssetCheckKey(dg.AssetKey("eval_contamination"), "no_eval_contamination")).blocking
    assert defs().resolve_job_def("shard_job") is not None
    # new data reaches a model: the training job covers everything from base_model on, and
    # its schedule is off until the user turns it on
    train = defs().resolve_job_def("train_and_promote")
    assert {k.to_user_string() for k in train.asset_layer.selected_asset_keys} >= {
        "eval_contamination", "base_model", "grpo_model", "eval_report", "exported_model", "promoted_model"}
    align = defs().resolve_job_def("align_on_feedback")
    assert {k.to_user_string() for k in align.asset_layer.selected_asset_keys} == {
        "human_preferences", "sft_model", "reward_model", "dpo_model", "ppo_model", "grpo_model", "eval_report",
        "exported_model", "promoted_model"}
    schedule = defs().resolve_schedule_def("train_on_new_data")
    assert schedule.default_status == dg.DefaultScheduleStatus.STOPPED and schedule.description
    for sensor in defs().sensors:
        assert sensor.description, f"{sensor.name} says what it does"


def test_graph_on_s3_corpus(home, tmp_path, s3_server, monkeypatch):
    """The same graph with the corpus under an s3:// prefix on a real S3-protocol server."""
    import boto3

    from orchestration.runner import run_graph

    local = tmp_path / "corpus"
    write_two_shards(local)
    s3 = boto3.client("s3", endpoint_url=s3_server)
    s3.create_bucket(Bucket="lake")
    for path in local.rglob("*"):
        if path.is_file():
            s3.upload_file(str(path), "lake", f"raw/es/{path.relative_to(local)}")
    summary = run_graph("s3://lake/raw/es", endpoint_url=s3_server, overrides=SMALL_RUN)
    assert summary.ok, [r.error for r in summary.runs if not r.ok]
    kept = pl.read_parquet(f"{home}/data/deduped_documents/*/*.parquet")
    rejected = pl.read_parquet(f"{home}/data/rejected_documents/*/*.parquet")
    assert kept.height + rejected.height == 18
    assert kept["source"].str.starts_with("manuales/").any()


def test_automation_follows_new_signatures():
    """dedup_index and deduped_documents are eager, and the automation sensor that
    evaluates them is on by default (otherwise sensor-driven shard runs stop halfway)."""
    from assets.definitions import defs

    sensor = defs().get_sensor_def("data_automation")
    assert sensor.default_status == dg.DefaultSensorStatus.RUNNING
    graph = defs().resolve_asset_graph()
    for key in ("dedup_index", "deduped_documents", "tokenizer", "token_shards"):
        assert graph.get(dg.AssetKey(key)).automation_condition is not None
