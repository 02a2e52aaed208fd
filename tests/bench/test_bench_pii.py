"""bench/bench_pii.py: its scores say what its docstring says, and the whole bench runs
on a few planted pages with every side, offline (the suite's socket guard is on)."""

from __future__ import annotations

from types import SimpleNamespace

from bench import bench_pii
from bench.bench_pii import Flag, Score, merged, replace_spans, score_doc


def _doc() -> SimpleNamespace:
    text = ("Escriba a ana.ruiz@gmail.com o llame al +34 612 345 678. "
            "La versión 1.2.3.4 y la IP 192.0.2.7 son ejemplos.")
    return SimpleNamespace(text=text, values=[("email", "ana.ruiz@gmail.com"), ("phone", "+34 612 345 678")],
                           lookalikes=["1.2.3.4", "192.0.2.7"])


def test_a_value_is_caught_only_when_every_letter_and_digit_is_covered():
    doc = _doc()
    t = doc.text
    e = t.index("ana.ruiz")
    p = t.index("+34")
    s = Score()
    # the email whole; the phone without its "+" (caught) ...
    score_doc(s, doc, [Flag("email", e, e + 18), Flag("phone", p + 1, p + 15)], show=0)
    assert (s.caught["email"], s.caught["phone"]) == (1, 1)
    # ... but not without its last digit
    s = Score()
    score_doc(s, doc, [Flag("phone", p, p + 14)], show=0)
    assert s.caught["phone"] == 0 and s.recall("phone") == 0.0 and s.recall("email") == 0.0


def test_precision_counts_spans_on_lookalikes_and_text_against_the_side():
    doc = _doc()
    t = doc.text
    v = t.index("1.2.3.4")
    w = t.index("Escriba")
    p = t.index("+34")
    flags = [Flag("ip_address", v, v + 7), Flag("ip_address", w, w + 7), Flag("phone", p, p + 15),
             Flag("phone", p + 4, p + 15)]  # two readings of one number: one span once merged
    s = Score()
    score_doc(s, doc, flags, show=0)
    assert s.flags["phone"] == 1 and s.precision("phone") == 1.0
    assert s.flags["ip_address"] == 2 and s.precision("ip_address") == 0.0
    assert s.on_lookalike["ip_address"] == 1
    assert (s.lookalikes, s.lookalikes_intact) == (2, 1)


def test_merged_and_replaced_spans():
    spans = merged([Flag("phone", 0, 5), Flag("phone", 3, 9), Flag("email", 2, 4)])
    assert sorted((f.kind, f.start, f.end) for f in spans) == [("email", 2, 4), ("phone", 0, 9)]
    assert replace_spans("abcdefghij", [Flag("x", 1, 3), Flag("y", 2, 5), Flag("z", 7, 8)],
                         lambda f: f"<{f.kind}>") == "a<x>fg<z>ij"


def test_datatrove_spans_replay_its_output():
    from datatrove.pipeline.formatters import PIIFormatter

    f = PIIFormatter()
    text = "a@b.org 8.8.8.8 x 10.0.0.1 y 1.1.1.1 c@d.io 9.9.9.9"
    assert bench_pii.datatrove_replay_ok(f, text)
    kinds = sorted(fl.kind for fl in bench_pii.datatrove_find(f, text))
    assert kinds == ["email", "email", "ip_address", "ip_address", "ip_address"]  # 10.0.0.1: private


def test_the_bench_runs_every_side_on_planted_pages(capsys):
    bench_pii.main(["--language", "es", "--docs", "4", "--rounds", "1", "--show", "1"])
    out = capsys.readouterr().out
    assert "== es: 4 documents" in out and "Presidio phone regions ES" in out
    assert "datatrove's spans replayed give its output exactly on 4/4 documents" in out
    for line in ("ours vs presidio: median", "ours vs datatrove: median", "look-alikes intact: ours"):
        assert line in out
    assert "leaked verbatim in the output: ours " in out
