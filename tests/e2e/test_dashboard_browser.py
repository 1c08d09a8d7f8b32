"""The dashboard in a real headless browser: Debian's chromium driven through Debian's
chromium-driver by selenium (testenv/dashboard/install.sh installs them; nothing is
downloaded). Pages load, show the jobs squeue shows, a job's page shows its pending reason,
another user's job hides its script, and a new job appears without a reload. Screenshots go
to $CALDERA_ARTIFACTS/dashboard (default /tmp/caldera-artifacts/dashboard).
"""

from __future__ import annotations

import os
import shutil
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.dashboard_env import DashGateway, dash_gateway

__all__ = ["dash_gateway"]

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
DRIVER = shutil.which("chromedriver") or "/usr/bin/chromedriver"
SECRET = "browser-secret-of-tester2"
ARTIFACTS = Path(os.environ.get("CALDERA_ARTIFACTS", "/tmp/caldera-artifacts")) / "dashboard"


def _missing() -> str | None:
    try:
        import selenium  # noqa: F401
    except ImportError:
        return "selenium"
    for path in (CHROMIUM, DRIVER):
        if not os.access(path, os.X_OK):
            return path
    return None


@pytest.fixture
def browser() -> Iterator[Any]:
    """A headless chromium (the README's test command installs it: a missing browser is a
    failure, never a skip)."""
    missing = _missing()
    if missing is not None:
        pytest.fail(f"{missing} is not installed (testenv/dashboard/install.sh)")
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", "--window-size=1280,900"):
        options.add_argument(arg)
    options.add_argument("--disable-dev-shm-usage")
    driver = webdriver.Chrome(service=Service(executable_path=DRIVER), options=options)
    driver.set_page_load_timeout(30)
    try:
        yield driver
    finally:
        driver.quit()


def _until(what: str, check: Callable[[], Any], timeout: float = 15.0) -> Any:
    deadline = time.monotonic() + timeout
    last: Any = None
    while time.monotonic() < deadline:
        try:
            last = check()
        except Exception as exc:  # noqa: BLE001 - an element not there yet: try again
            last = exc
        else:
            if last:
                return last
        time.sleep(0.1)
    raise AssertionError(f"{what}: still {last!r} after {timeout}s")


def _shot(driver: Any, name: str) -> None:
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    driver.save_screenshot(str(ARTIFACTS / f"{name}.png"))


def _held(d: DashGateway, user: str, name: str, body: str) -> int:
    script = d.gw.workdir / f"{user}-{len(list(d.gw.workdir.iterdir()))}.sh"
    script.write_text(f"#!/bin/sh\n{body}\n")
    os.chmod(script, 0o644)
    return d.gw.sbatch("-H", "-J", name, str(script), user=user)


def _queue_ids(driver: Any) -> list[int]:
    from selenium.webdriver.common.by import By

    rows = driver.find_elements(By.CSS_SELECTOR, "#queue tbody tr")
    return [int(r.get_attribute("data-job-id")) for r in rows]


def test_the_dashboard_in_chromium(dash_gateway: DashGateway, browser: Any) -> None:
    from selenium.webdriver.common.by import By

    d = dash_gateway
    mine = _held(d, "tester", "mine", "echo tester-script")
    theirs = _held(d, "tester2", "<b>theirs</b>", f"echo {SECRET}")
    running = d.gw.sbatch("--wrap", "sleep 30", user="tester2")
    d.gw.wait(running, ("RUNNING",), timeout=30)
    token = d.token("tester")

    # the queue: the same jobs as squeue, names as text
    browser.get(f"{d.base}/ui/#token={token}")
    squeue = sorted(int(x) for x in d.gw.ok(["squeue", "-h", "-o", "%i"]).split())
    _until("queue rows", lambda: _queue_ids(browser) == squeue)
    assert "token=" not in browser.current_url  # taken out of the address bar
    assert browser.find_element(By.ID, "whoami").text.startswith("tester")
    names = [e.text for e in browser.find_elements(By.CSS_SELECTOR, "#queue tbody td:nth-child(3)")]
    assert "<b>theirs</b>" in names  # shown literally, never as markup
    assert not browser.find_elements(By.CSS_SELECTOR, "#queue tbody b")
    _until("chart", lambda: browser.find_elements(By.CSS_SELECTOR, "#chart svg polyline"))
    _shot(browser, "queue")

    # filter by user, then sort by id descending (server-side)
    from selenium.webdriver.support.ui import Select

    Select(browser.find_element(By.ID, "f-user")).select_by_value("tester2")
    _until("user filter", lambda: _queue_ids(browser) == sorted([theirs, running]))
    Select(browser.find_element(By.ID, "f-user")).select_by_value("")
    browser.find_element(By.CSS_SELECTOR, "th[data-sort=id]").click()
    _until("sorted desc", lambda: _queue_ids(browser) == sorted(squeue, reverse=True))
    browser.find_element(By.CSS_SELECTOR, "th[data-sort=id]").click()

    # one's own job: its pending reason and its script
    browser.get(f"{d.base}/ui/#/job/{mine}")
    _until("reason", lambda: browser.find_element(By.ID, "job-reason").text == "JobHeldUser")
    _until("own script", lambda: "tester-script" in browser.find_element(By.ID, "job-script").text)
    assert browser.find_elements(By.CSS_SELECTOR, "#job-why li")  # the shortfall's detail
    assert browser.find_element(By.ID, "job-events").text.count("submit") >= 1
    _shot(browser, "job-own")

    # another user's job: record yes, script no
    browser.get(f"{d.base}/ui/#/job/{theirs}")
    _until("their job", lambda: "theirs" in browser.find_element(By.ID, "job-title").text)
    _until("hidden note", lambda: browser.find_element(By.ID, "private-hidden").is_displayed())
    assert not browser.find_element(By.ID, "job-private").is_displayed()
    assert SECRET not in browser.page_source
    assert not browser.find_element(By.ID, "job-cancel").is_displayed()
    _shot(browser, "job-other-user")

    # live update: a job submitted now appears without reloading the page
    browser.get(f"{d.base}/ui/#/queue")
    _until("queue again", lambda: mine in _queue_ids(browser))
    browser.execute_script("window.__sameDocument = true;")
    late = _held(d, "tester", "late", "true")
    _until("live row", lambda: late in _queue_ids(browser), timeout=10)
    assert browser.execute_script("return window.__sameDocument === true;")
    _shot(browser, "queue-live")

    # clusters: the node with what runs on it
    browser.get(f"{d.base}/ui/#/clusters")
    _until("nodes", lambda: browser.find_elements(By.CSS_SELECTOR, "#clusters tr[data-node]"))
    assert "ALLOCATED" in browser.find_element(By.ID, "clusters").text or "MIXED" in (
        browser.find_element(By.ID, "clusters").text
    )
    _shot(browser, "clusters")

    # without a token the page asks for one and shows no job
    browser.execute_script("sessionStorage.clear();")
    browser.get(f"{d.base}/ui/?fresh#/queue")  # a new document, not a hash change
    _until("login", lambda: browser.find_element(By.ID, "login").is_displayed())
    assert not _queue_ids(browser)
    _shot(browser, "login")
