"""The chat page in a real browser (Playwright driving Debian's Chromium, which .ci/run
installs; nothing is downloaded): chat with a model and rate the answer, compare two
models on one prompt, prefer one and write the answer wanted, and find both ratings in
the home's feedback folder, well formed. YUNQUE_SCREENSHOTS=DIR keeps the screenshots
(docs/img/ has them)."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from pipelines.feedback import records
from tests.serve_server import Server, exports

pytest.importorskip("llama_cpp.server.app")
sync_api = pytest.importorskip("playwright.sync_api")
CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
if not Path(CHROMIUM).exists():
    pytest.skip("Debian's chromium is not installed (.ci/run installs it)", allow_module_level=True)


def _saved(page) -> None:
    page.wait_for_function("document.getElementById('status').textContent.includes('rating saved')", timeout=60_000)


def test_chat_compare_rate_and_edit_in_a_browser(tmp_path):
    models = exports(tmp_path / "exports")
    home = tmp_path / "home"
    server = Server(home, "--model", str(models["answers"]), "--compare", str(models["random"]), "--quant", "f32")
    shots = Path(os.environ.get("YUNQUE_SCREENSHOTS") or tmp_path / "shots")
    shots.mkdir(parents=True, exist_ok=True)
    try:
        with sync_api.sync_playwright() as p:
            browser = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
            page = browser.new_page(viewport={"width": 1100, "height": 760})
            errors: list[str] = []
            page.on("pageerror", lambda e: errors.append(str(e)))
            page.goto(server.url + "/")
            page.wait_for_function("document.querySelectorAll('#modelA option').length == 2")

            # chat with model A, greedy, and give the answer a thumbs up
            page.fill("#temperature", "0")
            page.fill("#prompt", "¿Cuánto es 2 más 3?")
            page.click("#send")
            page.wait_for_selector("#rating:not(.hidden)")
            assert "<answer>42</answer>" in page.inner_text("#history")
            page.click("#rateChoices button[data-choice=up]")
            page.screenshot(path=str(shots / "chat.png"))
            page.click("#submitRating")
            _saved(page)

            # compare A and B on one prompt; A is better, and this is the answer wanted
            page.click("#tabCompare")
            page.fill("#maxTokens", "12")
            page.fill("#prompt", "¿Cuánto es 20 más 22?")
            page.click("#send")
            page.wait_for_selector("#rating:not(.hidden)")
            assert page.inner_text("#answerA") == "<answer>42</answer>" and page.inner_text("#answerB")
            page.click("#compareChoices button[data-choice=a]")
            page.fill("#edited", "20 más 22 son 42.")
            page.screenshot(path=str(shots / "compare.png"))
            page.click("#submitRating")
            _saved(page)
            assert "2 ratings" in page.inner_text("#count")
            assert errors == []
            browser.close()
    finally:
        server.stop()

    found = records.read(home / records.FEEDBACK_DIR)
    assert found.skipped == []
    rate, compare = found.records
    assert rate["kind"] == "rate" and rate["choice"] == "up" and rate["edited"] is None
    assert rate["messages"] == [{"role": "user", "content": "¿Cuánto es 2 más 3?"}]
    assert rate["answers"][0]["text"] == "<answer>42</answer>" and rate["answers"][0]["model"] == "answers"
    assert compare["kind"] == "compare" and compare["choice"] == "a" and compare["edited"] == "20 más 22 son 42."
    assert [a["model"] for a in compare["answers"]] == ["answers", "random"]
    hashes = {a["weights_sha256"] for a in compare["answers"]}
    assert len(hashes) == 2 and all(len(h) == 64 for h in hashes)  # each answer names its weights
