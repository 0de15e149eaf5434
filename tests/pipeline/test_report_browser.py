"""The run report of a real pipeline run, opened in headless Chromium from ``file://`` with the
network off: the funnel shown is the manifest's, every chart has a size on screen, the sample
documents' text in the DOM is the documents table's text exactly, and the console is clean.

Chromium and its driver come from Debian (``.ci/install-chromium``); Selenium talks to
``/usr/bin/chromedriver`` through ``Service``, so Selenium Manager never downloads anything.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from chunkline.index.manifest import load_manifest
from chunkline.index.manifest_types import Manifest
from chunkline.index.tables import read_table
from chunkline.pipeline.config import load_config
from chunkline.pipeline.report import REPORT
from chunkline.pipeline.report.gather import SAMPLE_CHARS
from chunkline.pipeline.run import run

webdriver = pytest.importorskip("selenium.webdriver", reason="selenium is not installed (pip install selenium)")
from selenium.webdriver.chrome.service import Service  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
CHROMIUM, CHROMEDRIVER = "/usr/bin/chromium", "/usr/bin/chromedriver"
pytestmark = pytest.mark.slow

FOOTER = "Northwind Robotics GmbH - internal documentation, do not forward."
HOSTILE = "</pre></style><script>document.title='owned'</script><img src=x onerror=\"console.error(1)\">"


def corpus(root: Path) -> Path:
    """Five pages sharing a footer (boilerplate at min_docs 3), an exact copy of one, a hostile
    page (the first Markdown document: the one drawn as a sample), a JSONL file with a malformed line and an empty file (two rejections)."""
    root.mkdir()
    topics = ["calibration", "charging", "gripper", "dispatch", "safety"]
    for i, topic in enumerate(topics):
        body = "\n\n".join(f"## Step {n}\n\nThe {topic} step {n} of the procedure takes {n + i} minutes "
                           f"and needs the {topic} checklist signed." for n in range(1, 12))
        (root / f"{topic}.md").write_text(f"# {topic.title()} guide\n\n{body}\n\n{FOOTER}\n", encoding="utf-8")
    shutil.copy(root / "calibration.md", root / "calibration-copy.md")
    (root / "notes.txt").write_text("Dock notes.\r\nThe dock at bay 4 is slow.\n" * 3, encoding="utf-8")
    (root / "a-hostile.md").write_text(f"# Hostile {HOSTILE}\n\n{HOSTILE} \"quotes\" & ü 🙂\n", encoding="utf-8")
    (root / "faq.jsonl").write_text('{"id": "q1", "text": "How long is a shift? Eight hours."}\n'
                                    '{"id": "q2", "text": \n', encoding="utf-8")
    (root / "empty.md").write_bytes(b"")
    return root


@pytest.fixture(scope="module")
def published(tmp_path_factory) -> tuple[Path, Manifest]:
    base = tmp_path_factory.mktemp("report")
    cfg = load_config(ROOT / "configs" / "local.yaml", [
        f"input.pattern={corpus(base / 'corpus')}/**", f"output.path={base / 'out'}",
        "embed=null", "split.tokenizer=words", "split.max_tokens=48", "boilerplate.min_docs=3"])
    summary = run(cfg)
    assert summary.published, summary.problems
    run_dir = Path(summary.run_dir)
    return run_dir, load_manifest(str(run_dir))


@pytest.fixture(scope="module")
def browser():
    missing = [path for path in (CHROMIUM, CHROMEDRIVER) if not Path(path).exists()]
    if missing:
        pytest.skip(f"{' and '.join(missing)} not installed: run .ci/install-chromium "
                    "(apt-get install chromium chromium-driver)")
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for argument in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                     "--window-size=1200,2400",
                     # Nothing resolves: a report that reached for the network would fail to load.
                     "--host-resolver-rules=MAP * ~NOTFOUND"):
        options.add_argument(argument)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)
    driver.execute_cdp_cmd("Network.enable", {})
    driver.execute_cdp_cmd("Network.emulateNetworkConditions", {
        "offline": True, "latency": 0, "downloadThroughput": -1, "uploadThroughput": -1})
    yield driver
    driver.quit()


@pytest.fixture(scope="module")
def page(published, browser, tmp_path_factory):
    run_dir, _ = published
    browser.get((run_dir / REPORT).as_uri())
    browser.save_screenshot(str(tmp_path_factory.mktemp("screenshot") / "report.png"))
    return browser


def test_funnel_shown_is_the_manifests(published, page) -> None:
    _, manifest = published
    counts = manifest.counts
    shown = {e.get_attribute("data-funnel"): int(e.text.replace(",", ""))
             for e in page.find_elements("css selector", "[data-funnel]")}
    assert shown == {"read": counts["read"], "kept": counts["kept"], "duplicate": counts["duplicate"],
                     "rejected": counts["rejected"], "chunks": counts["chunks"]}
    assert counts["duplicate"] == 1 and counts["rejected"] == 2
    for outcome in ("kept", "duplicate", "rejected"):
        cells = page.find_elements("css selector", f'tr[data-format] td[data-count="{outcome}"]')
        assert sum(int(c.text.replace(",", "")) for c in cells) == counts[outcome]


def test_every_chart_is_drawn(page) -> None:
    charts = page.find_elements("css selector", "svg.chart")
    assert {c.get_attribute("id") for c in charts} >= {"chart-funnel", "chart-tokens", "chart-stages"}
    for chart in charts:
        box = page.execute_script("const r = arguments[0].getBoundingClientRect();"
                                  "return [r.width, r.height];", chart)
        assert box[0] > 0 and box[1] > 0, chart.get_attribute("id")
        assert chart.find_elements("css selector", "rect"), chart.get_attribute("id")


def test_sample_text_in_the_dom_is_the_documents_text(published, page) -> None:
    run_dir, manifest = published
    texts = {}
    for row in read_table(str(run_dir), manifest, "documents", ["doc_id", "text"]).to_pylist():
        texts[row["doc_id"]] = row["text"]
    samples = page.find_elements("css selector", "pre.doc")
    assert len(samples) >= 3  # markdown, text, jsonl
    for sample in samples:
        doc_id = sample.get_attribute("data-doc-id")
        assert page.execute_script("return arguments[0].textContent", sample) == texts[doc_id][:SAMPLE_CHARS]
        assert sample.find_elements("css selector", "span.seg.start")


def test_hostile_text_stays_text_and_the_console_is_clean(published, page) -> None:
    run_dir, _ = published
    assert page.title.startswith("chunkline run") and page.execute_script(
        "return document.scripts.length + document.images.length") == 0
    assert "Northwind Robotics GmbH" in page.find_element("id", "boilerplate").text
    errors = [entry for entry in page.get_log("browser") if entry["level"] in ("SEVERE", "WARNING")]
    assert errors == []
