"""bench/bench_quality.py: the whole bench runs on a few real pages, offline (the suite's
socket guard is on), and datatrove's filter, fed our normalised lines and the same model
file, decides as ours does on every document."""

from __future__ import annotations

import re

from bench import bench_quality


def test_pages_in_turn_interleaves_languages_and_keeps_the_longer_tail():
    assert bench_quality.pages_in_turn([["a1", "a2", "a3"], ["b1"]]) == ["a1", "b1", "a2", "a3"]


def test_the_bench_scores_both_sides_alike_on_real_pages(capsys):
    bench_quality.main(["--docs", "20", "--rounds", "1"])
    out = capsys.readouterr().out
    assert "the same bytes as the model ours scores with" in out
    kept = re.search(r"ours keeps (\d+) of 20", out)
    assert kept and 0 < int(kept.group(1)) < 20  # es pages kept, fr pages dropped: both decisions occur
    # the same lines into the same model: the same decision and the same score, document by document
    assert re.search(r"datatrove +keeps +\d+; decisions differ on 0 of 20 .* 20 identical", out)
    assert "datatrove-raw  keeps" in out  # its own preprocessing: counted, not asserted equal
    for line in ("ours vs datatrove: median", "ours vs datatrove-raw: median",
                 "our normalise alone, share of ours' seconds"):
        assert line in out
