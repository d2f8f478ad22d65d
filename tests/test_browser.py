"""The researcher page and the API reference in a real browser: Debian's chromium, driven by Playwright
(``executable_path``: Playwright never downloads a browser), against a real ``mbeacon serve``.

A researcher loads /api/docs, types the key, picks the dataset and a probe, sees the probe's prior
drawn, asks, and sees the answer, where it came from and the budget meters move; asks again (the
cached answer, free); asks with bad bounds and reads the refusal's message; finds every question in the
history. The API reference lists every operation of /api/openapi.json. Neither page breaks its
Content-Security-Policy, and the key never appears in a URL, in storage or in the server's log.
The page fits a phone's width. Screenshots go to /tmp/mbeacon-browser-*.png.

Without chromium or Playwright these tests skip, except under CI=true, where they fail.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

import httpx
import numpy as np
import pytest
from servers import BeaconServer, write_config

from mbeacon.beacon.ledger import Ledger
from mbeacon.store.cohorts import CohortStore
from mbeacon.store.demo import ensure_demo
from mbeacon.store.priors import load_prior

CHROMIUM = "/usr/bin/chromium"
ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]
SHOTS = Path("/tmp")
# SVT² with a large epsilon: an answer where data and prior disagree by far comes from the data.
THRESHOLD = 10
POLICY = {"epsilon": 100.0, "c": 3, "threshold": THRESHOLD}
TIMEOUT_MS = 30_000

pytestmark = pytest.mark.slow


def _missing() -> str | None:
    if not os.access(CHROMIUM, os.X_OK):
        return f"{CHROMIUM} is missing (apt-get install chromium)"
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        return "playwright is not installed (pip install -e '.[test]')"
    return None


@pytest.fixture(scope="module")
def browser():
    missing = _missing()
    if missing:
        if os.environ.get("CI") == "true":
            pytest.fail(f"browser tests cannot run in CI: {missing}")
        pytest.skip(missing)
    from playwright.sync_api import expect, sync_playwright

    expect.set_options(timeout=TIMEOUT_MS)  # a shared, busy machine: waits are generous, never sleeps
    with sync_playwright() as playwright:
        chromium = playwright.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        try:
            yield chromium
        finally:
            chromium.close()


@pytest.fixture(scope="module")
def demo(tmp_path_factory):
    return ensure_demo(tmp_path_factory.mktemp("demo"))


@pytest.fixture(scope="module")
def question(demo) -> dict:
    """A probe and a range the data answer far from the prior: the prior expects almost nobody there,
    the cohort has at least 3T patients (so SVT² answers from the data)."""
    cohort = CohortStore(demo.store).open(demo.dataset)
    prior = load_prior(demo.store, demo.prior)
    ids = cohort.probe_ids
    ids = ids[prior.index(ids) >= 0]
    rows = cohort.probe_index(ids)
    n = cohort.n_patients
    for lo, hi in ((0.0, 0.3), (0.3, 0.7), (0.7, 1.0), (0.1, 0.5), (0.5, 0.9)):
        alpha = cohort.count_in_range(rows, np.full(len(ids), lo), np.full(len(ids), hi))
        beta = n * prior.probability(ids, lo, hi)
        fits = np.flatnonzero((alpha >= 3 * THRESHOLD) & (beta <= 1.0))
        if fits.size:
            return {"probe": str(ids[fits[0]]), "lo": lo, "hi": hi}
    pytest.fail("the demo cohort has no probe whose data disagree with the prior")


@pytest.fixture(scope="module")
def server(demo, tmp_path_factory):
    work = tmp_path_factory.mktemp("browser")
    url = f"sqlite:///{work}/ledger.sqlite3"
    ledger = Ledger.open(url)
    key = ledger.add_user("ada", tier="CONTROLLED")
    ledger.close()
    settings = {
        "store": str(demo.store),
        "database_url": url,
        "default_prior": demo.prior,
        "rate_limit_per_minute": 0,
    }
    config = write_config(work / "beacon.toml", settings, POLICY)
    with BeaconServer(config, work, workers=1, threads=4) as running:
        yield running, key


def _open(browser, url: str, width: int = 1280):
    """A new page at ``url`` in a fresh context; returns it with the console problems and requested
    URLs collected from the start."""
    context = browser.new_context(viewport={"width": width, "height": 900})
    context.set_default_timeout(TIMEOUT_MS)
    page = context.new_page()
    problems: list[str] = []
    urls: list[str] = []
    _watch(page, problems, urls)
    return context, page, problems, urls, page.goto(url)


def _watch(page, problems: list[str], urls: list[str]) -> None:
    """Collect console errors and CSP violations, and every URL the page requests."""
    page.on("console", lambda m: problems.append(m.text) if m.type == "error" else None)
    page.on("pageerror", lambda e: problems.append(f"page error: {e}"))
    page.on("request", lambda r: urls.append(r.url))


def test_researcher_page(browser, server, question, demo):
    from playwright.sync_api import expect

    beacon, key = server
    context, page, problems, urls, response = _open(browser, beacon.url + "/api/docs")
    assert response is not None and response.status == 200
    assert "'unsafe" not in response.headers["content-security-policy"]

    # the key opens the datasets of the user's tier; the first probe's prior is drawn at once
    page.fill("#key", key)
    page.dispatch_event("#key", "change")
    expect(page.locator(f"#dataset option[value='{demo.dataset}']")).to_have_count(1)
    page.select_option("#dataset", demo.dataset)
    expect(page.locator("#dataset-note")).to_contain_text(f"at least {THRESHOLD} patients in the range")
    expect(page.locator("#dataset-note")).to_contain_text("60 patients, 2,000 probes.")
    expect(page.locator("#positives-text")).to_have_text("3 of 3")  # a budget not opened yet
    expect(page.locator("#answers-left")).to_have_text("You may get 3 more answers from the data.")
    label = page.locator(f"#dataset option[value='{demo.dataset}']").inner_text()
    assert label.count(demo.dataset) == 1, label  # the id once, then the name
    expect(page.locator("#epsilon-text")).to_have_text("100 of 100")

    # type-ahead: the probe's prefix lists it
    probe = question["probe"]
    page.fill("#probe", probe[:-2])
    expect(page.locator(f"#probe-list option[value='{probe}']")).to_have_count(1)
    page.fill("#probe", probe)
    page.fill("#min", str(question["lo"]))
    page.fill("#max", str(question["hi"]))
    expect(page.locator("#prior-probe")).to_have_text(probe)
    expect(page.locator("#chart rect.bar")).to_have_count(50)
    # the density axis has a scale: "0" and at least two values above it
    expect(page.locator("#chart text.tick[text-anchor='end']").nth(2)).to_be_attached()
    expect(page.locator("#chart-caption")).to_contain_text(f"In [{question['lo']:.2f}, {question['hi']:.2f}]")
    expect(page.locator("#chart .mark")).to_have_text(
        f"asked: {question['lo']:.2f}\u2013{question['hi']:.2f}"
    )
    page.screenshot(path=str(SHOTS / "mbeacon-browser-1-prior.png"), full_page=True)

    # ask: yes, from the data, one positive spent; the answer is marked on the curve
    page.click("#ask")
    expect(page.locator("#answer-word")).to_have_text("Yes")
    expect(page.locator("#answer-source .badge")).to_have_text("answered from the data")
    expect(page.locator("#positives-text")).to_have_text("2 of 3")
    expect(page.locator("#answers-left")).to_have_text("You may get 2 more answers from the data.")
    assert page.locator("#epsilon-text").inner_text() != "100 of 100"
    expect(page.locator("#chart .mark")).to_have_text("\u2714 yes \u00b7 from the data")
    expect(page.locator("#error")).to_be_hidden()
    page.screenshot(path=str(SHOTS / "mbeacon-browser-2-answer.png"), full_page=True)

    # the same question again: the same answer, cached, free
    page.click("#ask")
    expect(page.locator("#history tbody tr")).to_have_count(2)
    expect(page.locator("#answer-source")).to_contain_text("cached")
    expect(page.locator("#positives-text")).to_have_text("2 of 3")

    # the whole range: the prior's yes, free
    page.fill("#min", "0")
    page.fill("#max", "1")
    page.click("#ask")
    expect(page.locator("#history tbody tr")).to_have_count(3)
    expect(page.locator("#answer-source .badge")).to_have_text("answered from the prior")
    expect(page.locator("#positives-text")).to_have_text("2 of 3")
    expect(page.locator("#chart .mark")).to_have_text("\u2714 yes \u00b7 from the prior")

    # bad bounds: refused, and the page shows the server's message, not only the status
    page.fill("#min", "0.9")
    page.fill("#max", "0.2")
    page.click("#ask")
    expect(page.locator("#error")).to_be_visible()
    expect(page.locator("#error-status")).to_contain_text("HTTP 400")
    expect(page.locator("#error-message")).to_contain_text("minValue 0.9 is greater than maxValue 0.2")
    expect(page.locator("#answer")).to_be_hidden()
    expect(page.locator("#chart-caption")).to_contain_text("minValue")
    expect(page.locator("#chart .band")).to_have_count(0)  # no range drawn for a range that is not one
    expect(page.locator("#chart rect.bar")).to_have_count(50)
    expect(page.locator("#positives-text")).to_have_text("2 of 3")

    # the history, newest first, each question with its answer
    rows = page.locator("#history tbody tr")
    expect(rows).to_have_count(4)
    texts = [rows.nth(i).inner_text().split("\t") for i in range(4)]
    assert [row[0] for row in texts] == ["4", "3", "2", "1"]
    assert texts[0][4].startswith("refused (HTTP 400): ") and "greater than maxValue" in texts[0][4]
    assert [row[4] for row in texts[1:]] == ["yes", "yes", "yes"]
    assert [row[5] for row in texts[1:]] == ["prior", "data (cached)", "data"]
    assert all(row[2] == probe for row in texts)
    page.screenshot(path=str(SHOTS / "mbeacon-browser-3-history.png"), full_page=True)

    # on a phone the page fits its width (the history table scrolls inside its card)
    page.set_viewport_size({"width": 400, "height": 800})
    assert page.evaluate("() => document.documentElement.scrollWidth") <= 400
    page.screenshot(path=str(SHOTS / "mbeacon-browser-6-phone.png"), full_page=True)

    # the key: in no URL, no storage, no server log; the page broke no rule of its CSP
    storage = page.evaluate("() => [localStorage.length, sessionStorage.length, document.cookie]")
    assert storage == [0, 0, ""]
    assert urls and not [u for u in urls if key in u or key.split("_", 2)[-1] in u]
    assert key not in beacon.log() and key.split("_", 2)[-1] not in beacon.log()
    assert not [p for p in problems if "Content Security Policy" in p or "page error" in p], problems
    # the only console errors are the refused requests' own HTTP statuses
    assert all(re.search(r"status of (400|404)", p) for p in problems), problems
    context.close()


def test_api_reference(browser, server):
    from playwright.sync_api import expect

    beacon, _ = server
    document = httpx.get(beacon.url + "/api/openapi.json", timeout=30).json()
    operations = sum(len([m for m in item if m != "parameters"]) for item in document["paths"].values())
    context, page, problems, urls, response = _open(browser, beacon.url + "/api/reference")
    assert response is not None and response.status == 200
    expect(page.locator(".opblock")).to_have_count(operations)
    expect(page.locator(".information-container .title")).to_contain_text("MBeacon")
    expect(page.locator(".opblock-summary-path[data-path='/methylation']")).to_have_count(2)
    page.screenshot(path=str(SHOTS / "mbeacon-browser-4-reference.png"))

    # try one operation from the reference itself: the framework's info, no key needed
    info = page.locator(".opblock-get:has(.opblock-summary-path[data-path='/info'])")
    info.locator(".opblock-summary").click()
    info.locator("button.try-out__btn").click()
    info.locator("button.execute").click()
    expect(info.locator(".live-responses-table tbody .response-col_status").first).to_contain_text("200")
    info.screenshot(path=str(SHOTS / "mbeacon-browser-5-try-it.png"))

    assert all(u.startswith(beacon.url + "/") or u.startswith("data:") for u in urls), urls  # no CDN
    assert not problems, problems
    context.close()


def _probes_asked(beacon: BeaconServer, key: str, **question: str) -> list[str]:
    """The probes a gene or region question stands for, asked of the beacon by another user."""
    params = {**question, "minValue": "0.6", "includeResultsetResponses": "ALL"}
    response = httpx.get(beacon.url + "/api/methylation", params=params,
                         headers={"Authorization": f"Bearer {key}"}, timeout=30)  # fmt: skip
    assert response.status_code == 200, response.text
    return [s["info"]["probeId"] for s in response.json()["response"]["resultSets"]]


def test_researcher_page_asks_by_gene_and_by_region(browser, server, demo):
    """A gene and a region each stand for several probes: the page lists each probe's answer, draws the
    prior of the one picked, and counts the answers in words that agree with the budget meters."""
    from playwright.sync_api import expect

    beacon, key = server
    ledger = Ledger.open(f"sqlite:///{beacon.config.parent}/ledger.sqlite3")
    other = ledger.add_user("grace", tier="CONTROLLED")
    ledger.close()
    gene_probes = _probes_asked(beacon, other, geneId="DEMO1")
    region_probes = _probes_asked(beacon, other, referenceName="chr1", start="100000", end="101000")
    assert len(gene_probes) > 1 and len(region_probes) > 1

    context, page, problems, _, _ = _open(browser, beacon.url + "/api/docs")
    page.fill("#key", key)
    page.dispatch_event("#key", "change")
    expect(page.locator(f"#dataset option[value='{demo.dataset}']")).to_have_count(1)
    page.select_option("#dataset", demo.dataset)
    page.fill("#min", "0.6")
    page.fill("#max", "1")

    page.check("input[name=by][value=gene]")
    expect(page.locator("#gene")).to_be_visible()
    expect(page.locator("#probe")).to_be_hidden()
    expect(page.locator("#gene-list option[value='DEMO1']")).to_have_count(1)  # from /filtering_terms
    page.fill("#gene", "DEMO1")
    page.click("#ask")
    rows = page.locator("#per-probe tbody tr")
    expect(rows).to_have_count(len(gene_probes))
    assert [rows.nth(i).locator("button").inner_text() for i in range(len(gene_probes))] == gene_probes
    expect(page.locator("#answer-detail")).to_contain_text(f"of {len(gene_probes)} probes of gene DEMO1")
    # "0 answers from the data" reads wrong: the badge names where every answer came from
    badge = page.locator("#answer-source .badge").inner_text()
    mixed = r"[1-9]\d* answers? from the data, [1-9]\d* from the prior"
    assert re.fullmatch(rf"all {len(gene_probes)} answers from the (prior|data)|{mixed}", badge), badge
    assert not badge.startswith("0 "), badge
    shown = page.locator("#per-probe tr.shown button").inner_text()
    expect(page.locator("#prior-probe")).to_have_text(shown)
    expect(page.locator("#chart .mark")).to_contain_text("from the")  # the probe's answer, on its curve
    rows.nth(1).locator("button").click()
    expect(page.locator("#prior-probe")).to_have_text(gene_probes[1])
    expect(page.locator("#per-probe tr.shown")).to_have_attribute("data-probe", gene_probes[1])
    left = int(page.locator("#positives-text").inner_text().split(" of ")[0])
    more = "1 more answer" if left == 1 else f"{left} more answers"
    expect(page.locator("#answers-left")).to_have_text(f"You may get {more} from the data.")
    page.screenshot(path=str(SHOTS / "mbeacon-browser-7-gene.png"), full_page=True)

    page.check("input[name=by][value=region]")
    page.fill("#chromosome", "chr1")
    page.fill("#start", "100000")
    page.fill("#end", "101000")
    page.click("#ask")
    expect(page.locator("#history tbody tr")).to_have_count(2)
    expect(rows).to_have_count(len(region_probes))
    expect(page.locator("#answer-detail")).to_contain_text(
        f"of {len(region_probes)} probes of chr1:100000-101000"
    )
    expect(page.locator("#prior-probe")).to_have_text(page.locator("#per-probe tr.shown button").inner_text())
    history = [page.locator("#history tbody tr").nth(i).inner_text().split("\t") for i in range(2)]
    assert [row[2] for row in history] == ["chr1:100000-101000", "gene DEMO1"]
    assert all(re.fullmatch(r"yes at \d+ of \d+ probes|no \(\d+ probes\)", row[4]) for row in history), (
        history
    )
    page.screenshot(path=str(SHOTS / "mbeacon-browser-8-region.png"), full_page=True)

    icon = httpx.get(beacon.url + "/favicon.ico", timeout=30)
    assert icon.status_code == 200 and icon.headers["content-type"].startswith("image/svg+xml")
    assert not [p for p in problems if "Content Security Policy" in p or "page error" in p], problems
    assert not problems, problems  # no failed request either: the favicon is found
    context.close()
