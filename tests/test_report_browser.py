"""`benchbench report`'s site in a real headless Chromium: every page loads without a console error,
every link and asset resolves, a click on a column heading re-orders the rows, the filter hides
rows, the pages are not blank, and without JavaScript the tables are all there."""

from __future__ import annotations

import io
from pathlib import Path
from urllib.parse import unquote, urlsplit

import pytest

pytestmark = pytest.mark.browser
REPO = Path(__file__).resolve().parent.parent
PUBLISHED = REPO / "results" / "site"


@pytest.fixture
def tiny_site(report_runs, report_models, tmp_path):
    """The site of report_runs (runs of every kind)."""
    from benchbench.site.build import build_site

    build_site([report_runs.root, report_runs.nothing], tmp_path / "site", models=report_models)
    return tmp_path / "site"


def _errors(driver) -> list[dict]:
    return [e for e in driver.get_log("browser") if e["level"] == "SEVERE"]


def _local(url: str) -> Path | None:
    parts = urlsplit(url)
    return Path(unquote(parts.path)) if parts.scheme == "file" else None


def _crawl(driver, site: Path) -> set[str]:
    """Every page reachable from index.html by links, each checked; returns their names."""
    from selenium.webdriver.common.by import By

    todo, seen = ["index.html"], set()
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        driver.get((site / name).as_uri())
        assert driver.find_element(By.TAG_NAME, "h1").text, name
        assert _errors(driver) == [], name
        for tag, attr in (("a", "href"), ("link", "href"), ("script", "src"), ("img", "src")):
            for el in driver.find_elements(By.TAG_NAME, tag):
                url = el.get_property(attr)
                path = _local(url)
                assert path is not None or url.startswith("data:"), f"{name}: <{tag}> {url} leaves the site"
                if path is None:
                    continue
                assert path.is_file() and site.resolve() in path.resolve().parents, f"{name}: <{tag}> {url}"
                if tag == "a" and path.suffix == ".html":
                    todo.append(path.name)
        for img in driver.find_elements(By.TAG_NAME, "img"):
            assert driver.execute_script("return arguments[0].complete && arguments[0].naturalWidth > 0", img), name
    return seen


def _sites(tiny_site):
    return [tiny_site] + ([PUBLISHED] if PUBLISHED.is_dir() else [])


def test_every_page_loads_without_errors_and_every_link_resolves(browsers, tiny_site):
    driver = browsers.open()
    for site in _sites(tiny_site):
        assert _crawl(driver, site) == {p.name for p in site.glob("*.html")}, site


def _column(driver, table_id: str, header: str) -> list[str]:
    from selenium.webdriver.common.by import By

    table = driver.find_element(By.ID, table_id)
    headers = [th.text.rstrip(" ↕↑↓") for th in table.find_elements(By.CSS_SELECTOR, "thead th")]
    i = headers.index(header)
    return [row.find_elements(By.CSS_SELECTOR, "th, td")[i].text
            for row in table.find_elements(By.CSS_SELECTOR, "tbody tr") if row.is_displayed()]


def _number(text: str) -> float:
    return float(text.split()[0])


def test_clicking_a_heading_sorts_the_rows(browsers, tiny_site):
    from selenium.webdriver.common.by import By

    driver = browsers.open()
    driver.get((tiny_site / "run-tiny-20260101-000000.html").as_uri())
    before = _column(driver, "table-summary", "Top-1 (%)")
    assert before == ["80.00", "82.00", "85.00", "87.00", "70.00", "74.00"]  # record order
    heading = driver.find_element(By.XPATH, '//table[@id="table-summary"]//th[starts-with(normalize-space(), "Top-1")]')
    heading.find_element(By.TAG_NAME, "button").click()
    assert _column(driver, "table-summary", "Top-1 (%)") == sorted(before, key=_number)
    assert heading.get_attribute("aria-sort") == "ascending"
    heading.find_element(By.TAG_NAME, "button").click()
    assert _column(driver, "table-summary", "Top-1 (%)") == sorted(before, key=_number, reverse=True)
    # Text columns sort as text; the model names move with their rows.
    driver.find_element(By.XPATH, '//table[@id="table-summary"]//th[starts-with(normalize-space(), "Model")]'
                        ).find_element(By.TAG_NAME, "button").click()
    assert _column(driver, "table-summary", "Model") == sorted(_column(driver, "table-summary", "Model"))
    assert _errors(driver) == []


def test_the_filter_hides_rows(browsers, tiny_site):
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import Select

    driver = browsers.open()
    driver.get((tiny_site / "run-tiny-20260101-000000.html").as_uri())
    box = driver.find_element(By.CSS_SELECTOR, '.filter[data-table="table-cells"] input')
    assert len(_column(driver, "table-cells", "Model")) == 6
    box.send_keys("vit-a")
    assert _column(driver, "table-cells", "Model") == ["VIT-A", "VIT-A"]
    assert "showing 2 of 6 rows" in driver.find_element(By.CSS_SELECTOR, '.filter[data-table="table-cells"]').text
    box.clear()
    box.send_keys("bit 87")  # every word must match
    assert _column(driver, "table-cells", "Accuracy (%)") == ["87.00"]
    driver.get((tiny_site / "compare-tiny-20260101-000000--vs--tiny-20260102-000000.html").as_uri())
    rows = driver.find_elements(By.CSS_SELECTOR, "#table-comparison tbody tr")
    assert len(rows) > 1
    driver.find_element(By.CSS_SELECTOR, "input[data-filter-flagged]").click()  # only the regressions
    assert [r.get_attribute("class") for r in rows if r.is_displayed()] == ["flagged"]
    driver.get((tiny_site / "zoo.html").as_uri())
    Select(driver.find_element(By.CSS_SELECTOR, "select[data-filter-column]")).select_by_visible_text("bit")
    assert _column(driver, "table-zoo", "Family") == ["bit"]
    assert _errors(driver) == []


def test_pages_are_not_blank(browsers, tiny_site, tmp_path):
    from PIL import Image

    driver = browsers.open(height=1400)
    for site in _sites(tiny_site):
        for page in ("index.html", "zoo.html", *(p.name for p in site.glob("run-*.html"))):
            driver.get((site / page).as_uri())
            png = driver.get_screenshot_as_png()
            (tmp_path / f"{site.name}-{page}.png").write_bytes(png)
            colours = Image.open(io.BytesIO(png)).convert("RGB").getcolors(maxcolors=1 << 24)
            assert len(colours) >= 32, f"{page}: {len(colours)} colours: blank?"


def test_without_javascript_the_tables_read_as_tables(browsers, tiny_site):
    from selenium.webdriver.common.by import By

    driver = browsers.open(javascript=False)
    driver.get((tiny_site / "run-tiny-20260101-000000.html").as_uri())
    assert not any(f.is_displayed() for f in driver.find_elements(By.CSS_SELECTOR, ".filter"))
    assert driver.find_elements(By.CSS_SELECTOR, "button.sort") == []
    assert _column(driver, "table-summary", "Top-1 (%)") == ["80.00", "82.00", "85.00", "87.00", "70.00", "74.00"]
    # The figure that applies, inline (data-scaling is not drawn: every cell trained on 600 images).
    assert len(driver.find_elements(By.CSS_SELECTOR, "svg title")) == 1
