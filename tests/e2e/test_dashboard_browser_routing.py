"""The dashboard's routing decision log, fair-share tree and topology map in a real headless
chromium (the fixtures of test_dashboard_browser.py), over a gateway with a `[routing]`
table: even over one cluster the router records each decision as a `route` event with the
predicted starts it compared. A job named as markup stays text on every page."""

from __future__ import annotations

import os
import re
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.test_dashboard_browser import _shot, _until, browser
from tests.support.dashboard_env import DashGateway, free_port
from tests.support.gateway_env import discard_gateway, start_gateway

__all__ = ["browser", "routed_gateway"]

HOSTILE = '<img src=x onerror="document.title=1">r&d'


@pytest.fixture
def routed_gateway() -> Iterator[DashGateway]:
    """A gateway with the dashboard on a loopback port and a [routing] table."""
    base = Path(tempfile.mkdtemp(prefix="caldera-dash-route-", dir="/tmp"))
    port = free_port()
    config = (
        "time_scale = 0.016666\nkill_wait_s = 2\n"
        f'[dashboard]\nlisten = "127.0.0.1:{port}"\nsample_interval_s = 0.5\n'
        '[routing]\nmargin = "1m"\n'
    )
    gw = start_gateway(base, config)
    try:
        yield DashGateway(gw, port)
    finally:
        discard_gateway(gw, base)


def test_routing_decisions_fair_share_and_topology_in_chromium(
    routed_gateway: DashGateway, browser: Any
) -> None:
    from selenium.webdriver.common.by import By

    d = routed_gateway
    script = d.gw.workdir / "routed.sh"
    script.write_text("#!/bin/sh\nsleep 30\n")
    os.chmod(script, 0o644)
    job = d.gw.sbatch("-J", HOSTILE, str(script), user="tester")
    d.gw.wait(job, ("RUNNING",), timeout=30)
    shown = d.gw.ok(["scontrol", "show", "job", str(job)])
    assert "Routing=" in shown, shown  # the decision scontrol shows ...
    viable = re.search(r"FedViableSiblings=(\S+)", shown)
    assert viable is not None, shown

    # ... is in the decision log of its owner, with what it compared
    token = d.token("tester")
    browser.get(f"{d.base}/ui/#token={token}")
    browser.get(f"{d.base}/ui/#/decisions")
    rows = _until(
        "decision row",
        lambda: browser.find_elements(By.CSS_SELECTOR, f'#decisions tr[data-job-id="{job}"]'),
    )
    text = rows[0].text
    assert HOSTILE in text  # the name as text ...
    assert not browser.find_elements(By.CSS_SELECTOR, "#decisions img")  # ... never markup
    assert browser.title == "Caldera dashboard"
    cells = rows[0].find_elements(By.TAG_NAME, "td")
    assert cells[4].text == "route"
    target = cells[6].text
    assert target in viable.group(1).split(",")
    for name in viable.group(1).split(","):  # a predicted start for every viable cluster
        assert name in cells[7].text
    _shot(browser, "decisions")

    # the job's page has its routing history
    browser.get(f"{d.base}/ui/#/job/{job}")
    _until("routing table", lambda: browser.find_element(By.ID, "job-routing-box").is_displayed())
    history = browser.find_elements(By.CSS_SELECTOR, "#job-routing tbody tr")
    assert history
    assert target in history[0].text
    assert not browser.find_elements(By.CSS_SELECTOR, "#view-job img")
    _shot(browser, "job-routing")

    # another user sees none of tester's decisions
    browser.execute_script("sessionStorage.clear();")
    browser.get(f"{d.base}/ui/?other#token={d.token('tester2')}")
    browser.get(f"{d.base}/ui/?other#/decisions")
    _until("empty log", lambda: browser.find_element(By.ID, "view-decisions").is_displayed())
    _until("loaded", lambda: browser.execute_script("return document.body.dataset.loaded"))
    assert not browser.find_elements(By.CSS_SELECTOR, "#decisions tbody tr")

    # fair share: operators only; root is one
    browser.get(f"{d.base}/ui/?other#/fairshare")
    _until("refused", lambda: "denied" in browser.find_element(By.ID, "error").text)
    browser.execute_script("sessionStorage.clear();")
    browser.get(f"{d.base}/ui/?root#token={d.token(None)}")
    browser.get(f"{d.base}/ui/?root#/fairshare")
    tree = _until(
        "tree rows", lambda: browser.find_elements(By.CSS_SELECTOR, "#fairshare tbody tr")
    )
    sshare = d.gw.ok(["sshare", "-a", "-P", "-n"]).splitlines()
    assert len(tree) == len(sshare)
    assert tree[0].find_elements(By.TAG_NAME, "td")[0].text == "root"
    _shot(browser, "fairshare")

    # topology: every node squeue's cluster has, the busy one filled
    browser.get(f"{d.base}/ui/?root#/topology")
    tiles = _until("nodes", lambda: browser.find_elements(By.CSS_SELECTOR, "#topology [data-node]"))
    sinfo = set(d.gw.ok(["sinfo", "-h", "-N", "-o", "%N"]).split())
    assert {t.get_attribute("data-node") for t in tiles} == sinfo
    assert any("jobs 1" in (t.get_attribute("title") or "") for t in tiles)
    _shot(browser, "topology")
