"""The page served by nameorigin serve, in a real browser: headless Chromium (Debian's, driven by Playwright) types
names, and the test reads back what a person sees on the rendered page, never the API. Every request the page
makes must stay on the server's own 127.0.0.1 address.

NAMEORIGIN_SCREENSHOT=docs/images/page.png .venv/bin/python -m pytest tests/test_page.py  writes the screenshot
that docs/serving.md shows.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

pytest.importorskip("litserve", reason="the [serve] extra is not installed: pip install 'nameorigin[serve]'")
playwright = pytest.importorskip("playwright.sync_api", reason="the [browser] extra is not installed: pip install "
                                 "'nameorigin[browser]'")

from benchmarks.serve_load import free_port, start_server, stop_server  # noqa: E402

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
# As root in a container, without a GPU, on a machine that reaches no network: no sandbox, and none of Chromium's
# own background connections (updates, sync, field trials).
FLAGS = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking",
         "--disable-component-update", "--disable-sync", "--disable-dev-shm-usage"]


@pytest.fixture(scope="module")
def page_url(trained):
    """The page served with the suite's tiny model (four languages, each with its own ending)."""
    port = free_port()
    server = start_server(str(trained[0] / "checkpoints" / "refit.ckpt"), port, [])
    try:
        yield f"http://127.0.0.1:{port}/"
    finally:
        stop_server(server)


@pytest.mark.slow
def test_a_person_types_two_names_and_reads_the_answers_and_an_explanation(page_url, tmp_path):
    if not Path(CHROMIUM).is_file():
        pytest.skip("no browser: install Debian's chromium (apt-get install chromium), as .ci/run does")
    requests: list[str] = []
    with playwright.sync_playwright() as driver:
        browser = driver.chromium.launch(executable_path=CHROMIUM, args=FLAGS)
        try:
            page = browser.new_page(viewport={"width": 900, "height": 1100})
            page.on("request", lambda request: requests.append(request.url))
            page.goto(page_url)
            page.get_by_label("Names, one a line").fill("Nakamoto\nPetrovsky\n!!!")
            page.focus("#go")
            page.keyboard.press("Enter")  # keyboard alone submits
            answers = page.locator("li.answer")
            answers.nth(2).wait_for()
            assert answers.count() == 3
            first, second, unreadable = (answers.nth(i) for i in range(3))
            assert first.locator(".name").inner_text() == "Nakamoto"
            assert first.locator("td.label").first.inner_text() == "Japanese"  # the tiny corpus' -moto ending
            assert first.locator("td.pct").first.inner_text().endswith("%")
            assert second.locator(".name").inner_text() == "Petrovsky"
            assert second.locator("td.label").first.inner_text() == "Russian"  # its -ovsky ending
            assert "cannot read this name" in unreadable.inner_text()
            assert page.locator(".why:visible").count() == 0  # no explanation until asked
            page.get_by_label("Explain the top label").check()
            page.get_by_role("button", name="Classify").click()
            page.locator(".why:visible").first.wait_for()
            why = page.locator("li.answer").first.locator(".why")
            assert why.inner_text().startswith("Why Japanese")
            characters = why.locator(".chars span")
            assert characters.count() == len("nakamoto")
            characters.first.focus()  # the number is there without colour, on focus
            assert characters.first.get_attribute("aria-label").startswith("N: ")
            shot = os.environ.get("NAMEORIGIN_SCREENSHOT")
            page.screenshot(path=shot or str(tmp_path / "page.png"), full_page=True)
            page.locator("#about summary").click()  # the model, one click away
            assert "one of 4" in page.locator("#about-summary").inner_text()
            assert page.locator("#card").inner_text().startswith("# Model card")
        finally:
            browser.close()
    assert requests and all(url.startswith(page_url) for url in requests), requests
