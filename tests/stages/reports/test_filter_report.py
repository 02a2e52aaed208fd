"""The filtered_documents report from a real filter_stage run: per-rule metrics, counts
that add up, histograms that mark the threshold, the rejected sample, and metadata small
enough for the Dagster UI."""

from __future__ import annotations

import numpy as np
import pyarrow.parquet as pq
import pytest

from pipelines.data.filters.rules import RuleSpec
from pipelines.data.filters.rules import fails as rule_fails
from stages.reports.filters import report as fr
from stages.store.outputs import DataStore
from tests.support.filter_homes import build_home, write_junk_shard


@pytest.fixture(scope="module")
def home(tmp_path_factory) -> tuple[DataStore, dict]:
    tmp = tmp_path_factory.mktemp("filter_report")
    return build_home(tmp / "corpus", tmp / "home")


def test_metrics_table_has_a_column_per_rule_and_nulls_where_langid_dropped(home):
    store, stats = home
    table = fr.read_metrics(store, "manuales")
    rules = fr.rules_of(table)
    assert rules and all(isinstance(r, RuleSpec) for r in rules)
    assert table.num_rows == stats["manuales"].docs_in
    assert {r.reason for r in rules} <= set(table.column_names)
    rows = table.to_pylist()
    english = [r for r in rows if r["source"].endswith("english.txt")]
    assert english and english[0]["reason"] == "langid:other_language" and not english[0]["kept"]
    assert all(english[0][r.reason] is None for r in rules)  # never judged by the quality rules
    kept = [r for r in rows if r["kept"]]
    assert kept and all(r["reason"] is None for r in kept)
    measured = [r for r in rules if r.threshold is not None]
    assert all(any(k[r.reason] is not None for k in kept) for r in measured)
    assert fr.profile_of(table)["filters_key"]


def test_counts_add_up_and_fails_cover_first_failures(home):
    store, stats = home
    for shard, st in stats.items():
        report = fr.shard_report(store, shard)
        assert report.docs_in == st.docs_in and report.kept == st.docs_out
        assert report.accounted() == report.docs_in
        by_rule = sum(r.dropped for r in report.rules)
        assert by_rule + sum(report.langid["drops"].values()) + report.kept == report.docs_in
        for r in report.rules:
            assert r.fails >= r.dropped and r.measured <= report.docs_in
    junk = fr.shard_report(store, "basura")
    # the five junk documents, each counted once: by its first failing rule or by language ID
    assert junk.kept == 4 and sum(r.dropped for r in junk.rules) + sum(junk.langid["drops"].values()) == 5
    assert len([r for r in junk.rules if r.dropped]) >= 2


def test_vector_fails_agrees_with_the_filters_own_comparison():
    values = np.array([0.0, 0.1, 0.5, 1.0, 2.0, float("nan")])
    for drop_if in ("below", "above", "flag"):
        for thr in (None, 0.5, 1.0):
            rule = RuleSpec("x:y", "m", drop_if, thr)
            expect = [rule_fails(drop_if, thr, float(v)) for v in values]
            assert fr.fails(values, rule).tolist() == expect


def test_samples_are_deterministic_short_and_from_their_reason(home):
    store, _ = home
    report = fr.shard_report(store, "basura", n=2)
    rejected = pq.read_table(store.rejected("basura", "filter"))
    assert set(report.samples) == set(report.drops)
    for reason, rows in report.samples.items():
        assert 1 <= len(rows) <= 2 and all(r["reason"] == reason for r in rows)
        assert all(len(r["text"]) <= fr.SAMPLE_CHARS for r in rows)
        ids = sorted(d for d, why in zip(rejected["doc_id"].to_pylist(), rejected["reason"].to_pylist())
                     if why == reason)
        assert [r["doc_id"] for r in rows] == ids[:2]
    long = [r for rows in report.samples.values() for r in rows if r["chars"] > fr.SAMPLE_CHARS]
    assert long and all(len(r["text"]) == fr.SAMPLE_CHARS for r in long)
    md = fr.samples_markdown(report.samples, report.drops)
    assert all(f"`{reason}`" in md for reason in report.drops)


def test_histograms_mark_each_threshold(home):
    import matplotlib.pyplot as plt

    store, _ = home
    report = fr.shard_report(store, "basura")
    fams = fr.families(report)
    assert list(fams) == ["gopher_repetition", "gopher_quality", "c4", "fineweb", "integrity"]
    for family in ("gopher_quality", "fineweb"):
        fig = fr.figure(report, family, fams[family])
        for ax, row in zip(fig.axes, fams[family]):
            red = [tuple(line.get_xdata()) for line in ax.get_lines() if line.get_color() == "tab:red"]
            if row.threshold is not None and row.drop_if != "flag":
                assert red == [(row.threshold, row.threshold)], row.reason
        plt.close(fig)


def test_text_histograms_put_each_value_and_threshold_in_its_bin():
    from stages.reports.filters.histograms import BLOCKS, MARK, sparkline

    values = np.array([0.0] * 10 + [0.5] * 5 + [1.0])
    line = sparkline(values, 0.25, "below")
    assert len(line) == 31 and line.count(MARK) == 1
    cells = line.replace(MARK, "")
    # 30 bins over [0, 1]: the fullest bin is the first, the threshold falls after bin 7
    assert cells[0] == BLOCKS[-1] and cells[15] == BLOCKS[4] and cells[-1] == BLOCKS[1]
    assert line.index(MARK) == 8 and set(cells[1:15]) == {" "}
    assert sparkline(np.array([0.0, 1.0, 1.0]), 1.0, "flag") == "0: 1 · 1: 2"
    assert MARK not in sparkline(values, None, "below")


def test_dagster_metadata_is_small_enough_for_the_ui(home):
    from assets.metadata import filter_report_metadata

    store, _ = home
    report = fr.shard_report(store, "basura")
    md = filter_report_metadata(report)
    assert {"filter_rules", "filter_profile", "langid", "rejected_samples"} <= set(md)
    assert {k for k in md if k.startswith("histograms/")} == {f"histograms/{f}" for f in fr.families(report)}
    sizes = {k: len(str(v.value)) for k, v in md.items()}
    assert sum(sizes.values()) < 60_000, sizes
    quality = md["histograms/gopher_quality"].value
    assert quality.startswith("**basura: gopher_quality**")
    rule = next(r for r in report.rules if r.reason == "gopher_quality:min_doc_words")
    lines = [r for r in quality.splitlines() if r.startswith("| min_doc_words ")]
    assert len(lines) == 1 and f"| below {rule.threshold:g} | {rule.dropped} | {rule.fails} | {rule.measured} |" \
        in lines[0] and rule.fails > 0
    assert md["filter_profile"].value["profile"] == "docs"


def test_inspect_filters_prints_and_plots_the_histograms(home, tmp_path, capsys):
    from yunque.cli.main import main

    store, _ = home
    assert main(["--home", str(store.home), "inspect", "filters", "--shard", "basura", "--plot",
                 str(tmp_path / "png")]) == 0
    out = capsys.readouterr().out
    assert out.startswith("basura: 9 documents judged") and "| min_doc_words |" in out
    pngs = sorted(p.name for p in (tmp_path / "png").glob("*.png"))
    assert pngs == sorted(f"basura.{f}.png" for f in fr.families(fr.shard_report(store, "basura")))
    assert main(["--home", str(store.home), "inspect", "filters", "--shard", "nada"]) == 2


def test_the_materialization_carries_the_report(tmp_path):
    """Through Dagster, as a backfill runs it: the histograms, the rules, the profile and
    the sample are in the metadata, and its counts add up. (A shard that language ID
    empties before any rule runs is materialized by tests/pipelines/data/test_dedup.py's graph.)"""
    import json

    import dagster as dg

    from assets.definitions import ASSETS, build_resources

    corpus = tmp_path / "corpus"
    write_junk_shard(corpus)
    resources = build_resources(home=str(tmp_path / "home"), corpus=str(corpus), overrides=json.dumps({}))
    keys = ("raw_documents", "clean_documents", "filtered_documents")
    with dg.instance_for_test() as instance:
        instance.add_dynamic_partitions("shards", ["basura"])
        result = dg.materialize(ASSETS, selection=dg.AssetSelection.assets(*keys), partition_key="basura",
                                instance=instance, resources=resources)
    mat = next(m.materialization for m in result.get_asset_materialization_events()
               if m.asset_key == dg.AssetKey("filtered_documents"))
    md = {k: v.value for k, v in mat.metadata.items()}
    assert {k for k in md if k.startswith("histograms/")} == {
        f"histograms/{f}" for f in ("gopher_repetition", "gopher_quality", "c4", "fineweb", "integrity")}
    assert md["histograms/gopher_quality"].startswith("**basura: gopher_quality**")
    assert md["filter_profile"]["profile"] == "docs"
    dropped = sum(r.data["dropped"] for r in md["filter_rules"].records)
    assert dropped + sum(md["langid"]["drops"].values()) + md["documents_out"] == md["documents_in"] == 9
    assert "`langid:other_language`" in md["rejected_samples"] and md["rejected_samples"].count("#### ") >= 2
