"""The chat page in a real browser (Playwright driving Debian's Chromium, which .ci/run
installs; nothing is downloaded), used as a person uses it:

* chat and rate, compare two models, prefer one and write the answer wanted;
* a conversation of eight turns on a model whose context is 64 tokens, with a reload in
  the middle, tab switches, double sends (Ctrl+Enter twice, a double click), an empty
  message and one far too long: one request per send, every answer rated once, and the
  page says which turns the model did not see;
* the page at phone and desktop widths, nothing wider than the screen.

YUNQUE_SCREENSHOTS=DIR keeps the screenshots (docs/img/ has them)."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from pipelines.feedback import records
from tests.support.serve_server import Server, exports

pytest.importorskip("llama_cpp.server.app")
sync_api = pytest.importorskip("playwright.sync_api")
CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
if not Path(CHROMIUM).exists():
    pytest.skip("Debian's chromium is not installed (.ci/run installs it)", allow_module_level=True)

PHONE = {"width": 390, "height": 844}
DESKTOP = {"width": 1100, "height": 760}


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    models = exports(tmp_path_factory.mktemp("page-exports"))
    s = Server(tmp_path_factory.mktemp("page-home"), "--model", str(models["answers"]), "--compare",
               str(models["random"]), "--quant", "f32")
    yield s
    s.stop()


@pytest.fixture
def shots(tmp_path) -> Path:
    out = Path(os.environ.get("YUNQUE_SCREENSHOTS") or tmp_path / "shots")
    out.mkdir(parents=True, exist_ok=True)
    return out


@pytest.fixture
def browser():
    with sync_api.sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        yield b
        b.close()


class Page:
    """One tab, with the chat requests it sent and the script errors it raised."""

    def __init__(self, context, url: str, viewport: dict = DESKTOP):
        self.page = context.new_page()
        self.page.set_viewport_size(viewport)
        self.sent: list[dict] = []
        self.errors: list[str] = []
        self.page.on("pageerror", lambda e: self.errors.append(str(e)))
        self.page.on("request", lambda r: self.sent.append(r.post_data_json)
                     if r.url.endswith("/v1/chat/completions") else None)
        self.url = url
        self.open()

    def open(self) -> None:
        self.page.goto(self.url + "/")
        self.page.wait_for_function("document.querySelectorAll('#modelA option').length == 2")

    def idle(self) -> None:
        self.page.wait_for_function("!document.getElementById('send').disabled", timeout=120_000)

    def ask(self, text: str) -> None:
        self.page.fill("#prompt", text)
        self.page.click("#send")
        self.idle()

    def status(self) -> str:
        return self.page.inner_text("#status")

    def rate_last(self, choice: str) -> None:
        box = self.page.locator(".rating").last
        box.locator(f"button[data-choice={choice}]").click()
        box.locator("button.submit").click()
        self.page.locator(".rating").last.get_by_text("rating saved").wait_for(timeout=60_000)


def _ratings(server: Server) -> list[dict]:
    found = records.read(server.home / records.FEEDBACK_DIR)
    assert found.skipped == []
    return found.records


def test_chat_compare_rate_and_edit_in_a_browser(server, browser, shots):
    ctx = browser.new_context()
    tab = Page(ctx, server.url)
    tab.page.fill("#temperature", "0")
    tab.page.dispatch_event("#temperature", "change")
    tab.ask("¿Cuánto es 2 más 3?")
    # the reply reads as an answer, its tags gone; the buttons say what they do in words
    assert tab.page.locator("#history .turn.assistant .answer").last.inner_text() == "42"
    assert tab.page.locator(".rating button[data-choice=up]").last.inner_text() == "Good answer"
    # a reasoning model's reply: the reasoning folded under its label, the answer plain
    shown = tab.page.evaluate("""() => { const d = document.createElement('div');
        showReply(d, '<think>3 más 4 son 7</think><answer>7</answer>');
        return [d.querySelector('details').open, d.querySelector('summary').textContent,
                d.querySelector('.answer').textContent]; }""")
    assert shown == [False, "Reasoning", "7"]
    # the opening tag left out (the model wrote it in the prompt's turn): the same
    shown = tab.page.evaluate("""() => { const d = document.createElement('div');
        showReply(d, 'Unidades: 2 + 4 = 6.</think>6');
        return [d.querySelector('summary').textContent, d.querySelector('details div').textContent,
                d.querySelector('.answer').textContent]; }""")
    assert shown == ["Reasoning", "Unidades: 2 + 4 = 6.", "6"]
    shown = tab.page.evaluate("""() => { const d = document.createElement('div');
        showReply(d, '<think></think><answer>7</answer>');
        return [d.querySelector('details div').textContent, d.querySelector('.answer').textContent]; }""")
    assert shown == ["", "7"]
    tab.page.screenshot(path=str(shots / "chat.png"))
    before = len(_ratings(server))
    tab.rate_last("up")

    tab.page.click("#tabCompare")
    tab.page.fill("#maxTokens", "12")
    tab.page.dispatch_event("#maxTokens", "change")
    tab.ask("¿Cuánto es 20 más 22?")
    assert tab.page.inner_text("#answerA").startswith("42") and tab.page.inner_text("#answerB")
    box = tab.page.locator("#compared .rating")
    box.locator("button[data-choice=a]").click()
    box.locator("textarea").fill("20 más 22 son 42.")
    tab.page.screenshot(path=str(shots / "compare.png"))
    box.locator("button.submit").click()
    box.get_by_text("rating saved").wait_for(timeout=60_000)
    tab.page.wait_for_function(f"document.getElementById('count').textContent == '{before + 2} ratings'")
    assert tab.errors == []

    rate, compare = _ratings(server)[before:]
    assert rate["kind"] == "rate" and rate["choice"] == "up" and rate["edited"] is None
    assert rate["messages"] == [{"role": "user", "content": "¿Cuánto es 2 más 3?"}]
    assert rate["answers"][0]["text"] == "<answer>42</answer>" and rate["answers"][0]["model"] == "answers"
    assert compare["kind"] == "compare" and compare["choice"] == "a" and compare["edited"] == "20 más 22 son 42."
    assert [a["model"] for a in compare["answers"]] == ["answers", "random"]
    hashes = {a["weights_sha256"] for a in compare["answers"]}
    assert len(hashes) == 2 and all(len(h) == 64 for h in hashes)  # each answer names its weights


def test_eight_turns_a_reload_tab_switches_and_double_sends_lose_no_rating(server, browser, shots):
    ctx = browser.new_context()
    tab = Page(ctx, server.url)
    other = Page(ctx, server.url)  # a second tab of the same page: its counter follows
    before = len(_ratings(server))
    tab.page.fill("#temperature", "0")
    tab.page.dispatch_event("#temperature", "change")
    tab.page.fill("#maxTokens", "12")
    tab.page.dispatch_event("#maxTokens", "change")

    # an empty message is explained, and sends nothing
    tab.page.click("#send")
    assert "type a message first" in tab.status() and tab.sent == []
    # one far too long: the error is beside it, it stays in the box, and not in the transcript
    tab.page.fill("#prompt", "palabra " * 2500)
    tab.page.click("#send")
    tab.idle()
    assert "context" in tab.status() and tab.page.input_value("#prompt").startswith("palabra")
    assert tab.page.locator("#history .turn").count() == 0
    assert tab.page.locator("#status").is_visible()

    questions = [f"¿Cuánto es {i} más {i + 3}?" for i in range(8)]
    sends = 1  # the refused one
    for i, q in enumerate(questions):
        tab.page.fill("#prompt", q)
        if i == 2:  # Ctrl+Enter twice while the first reply streams
            tab.page.press("#prompt", "Control+Enter")
            tab.page.press("#prompt", "Control+Enter")
        elif i == 3:
            tab.page.dblclick("#send")
        else:
            tab.page.click("#send")
        tab.idle()
        sends += 1
        if i == 4:  # a reload mid-conversation, then the other tab and back
            tab.page.reload()
            tab.page.wait_for_function("document.querySelectorAll('#modelA option').length == 2")
            tab.page.click("#tabCompare")
            tab.page.click("#tabChat")
        if i % 2 == 0:
            tab.rate_last("up")
        # the odd answers are left unrated for now: they stay ratable through everything
    assert len(tab.sent) == sends  # one request per send, whatever asked for it
    # each request held the whole conversation as the page had it (the server fits it)
    assert [m["content"] for m in tab.sent[-1]["messages"] if m["role"] == "user"] == questions
    assert tab.page.input_value("#temperature") == "0" and tab.page.input_value("#maxTokens") == "12"
    turns = tab.page.locator("#history .turn")
    assert turns.count() == 16
    # the context held only the last turns: the page says what was not sent
    assert tab.page.locator("#history .turn.unsent").count() > 0
    assert "earlier message(s) not sent" in tab.page.locator("#history .turn.assistant").last.inner_text()
    tab.page.screenshot(path=str(shots / "chat-long.png"), full_page=True)

    # the unrated answers survived the reload and the tab switches: rate them now
    unrated = tab.page.locator(".rating button.submit")
    assert unrated.count() == 4
    while tab.page.locator(".rating button.submit").count():
        box = tab.page.locator(".rating:has(button.submit)").first
        box.locator("button[data-choice=down]").click()
        box.locator("button.submit").click()
        tab.page.wait_for_function(f"document.querySelectorAll('.rating button.submit').length < "
                                   f"{tab.page.locator('.rating button.submit').count()}", timeout=60_000)
    got = _ratings(server)[before:]
    assert len(got) == 8 and len({r["id"] for r in got}) == 8  # every answer rated, once
    assert sorted(r["choice"] for r in got) == ["down"] * 4 + ["up"] * 4
    for r in got:  # each rating holds what the model saw: a conversation ending with its question
        assert r["messages"][-1]["content"] in questions
    assert any(len(r["messages"]) < 2 * questions.index(r["messages"][-1]["content"]) + 1 for r in got)
    # the other tab's counter follows without a reload
    other.page.wait_for_function(f"document.getElementById('count').textContent == '{before + 8} ratings'",
                                 timeout=30_000)
    assert tab.errors == [] and other.errors == []


@pytest.mark.parametrize("name, viewport", [("phone", PHONE), ("desktop", DESKTOP)])
def test_the_page_fits_phone_and_desktop_widths(server, browser, shots, name, viewport):
    tab = Page(browser.new_context(), server.url, viewport)
    tab.ask("Piensa: ¿Cuánto es 1 más 1?")
    tab.page.click("#tabCompare")
    tab.page.fill("#maxTokens", "8")
    tab.page.dispatch_event("#maxTokens", "change")
    tab.ask("¿Cuánto es 2 más 2?")
    wide = tab.page.evaluate("document.documentElement.scrollWidth")
    assert wide <= viewport["width"], f"{name}: the page is {wide} px wide on a {viewport['width']} px screen"
    for sel in ("#send", "#compared .rating button[data-choice=a]", "#answerA", "#answerB"):
        b = tab.page.locator(sel).bounding_box()
        assert b and b["x"] >= 0 and b["x"] + b["width"] <= viewport["width"], (name, sel, b)
    if name == "phone":  # the two answers one above the other
        a, b = (tab.page.locator(s).bounding_box() for s in ("#answerA", "#answerB"))
        assert b["y"] >= a["y"] + a["height"]
    path = shots / f"page-{name}.png"
    tab.page.screenshot(path=str(path), full_page=True)
    assert path.stat().st_size > 10_000  # a page was drawn, not a blank
    assert tab.errors == []
