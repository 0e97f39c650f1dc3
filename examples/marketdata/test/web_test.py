#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""The chart page in a real headless browser (Debian's chromium + chromium-driver +
python3-selenium): the K-line chart renders the day's bars with their volumes in a 1000x640
window, asks for no more than --max-bars, uses A-share colours, shows the OHLC/volume legend
under the mouse and the feed's state, changes with bars pushed over the WebSocket, reconnects
after a gateway restart, and logs no console error; screenshots in $MD_WEB_ARTEFACTS.
  web_test.py BIN_DIR WEB_DIR   (WEB_DIR: scripts/fetch-web-assets.sh's output)"""
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

from selenium import webdriver
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.action_chains import ActionChains
from selenium.webdriver.common.by import By

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import mdref  # noqa: E402

BIN, WEB = sys.argv[1], sys.argv[2]
FEED = os.path.join(BIN, "md-feed")
URI = mdref.group_uri(6)
JS = os.path.join(WEB, "lightweight-charts.standalone.production.js")
if not os.path.exists(JS):
    sys.exit("web_test: no %s: run scripts/fetch-web-assets.sh" % JS)

# What the chart's canvases show, as a checksum of their pixels (0 when blank).
PIXELS = """
let sum = 0, inked = 0;
for (const c of document.querySelectorAll('#chart canvas')) {
  if (!c.width || !c.height) continue;
  const d = c.getContext('2d').getImageData(0, 0, c.width, c.height).data;
  for (let i = 0; i < d.length; i += 4) {
    if (d[i + 3] && (d[i] !== 255 || d[i + 1] !== 255 || d[i + 2] !== 255)) {
      inked++; sum = (sum * 31 + d[i] * 7 + d[i + 1] * 3 + d[i + 2] + i) % 1000000007;
    }
  }
}
return [inked, sum];
"""


def wait_for(driver, script, what, timeout=30):
    deadline = time.time() + timeout
    while True:
        v = driver.execute_script(script)
        if v:
            return v
        assert time.time() < deadline, "page never had " + what
        time.sleep(0.1)


def console_errors(driver, allowed=()):
    """SEVERE messages of the page's console, but those containing any of `allowed`."""
    return [e for e in driver.get_log("browser")
            if e["level"] == "SEVERE" and not any(a in e["message"] for a in allowed)]


def main():
    work = tempfile.mkdtemp(prefix="md-web-")
    artefacts = os.environ.get("MD_WEB_ARTEFACTS", os.path.join(work, "artefacts"))
    os.makedirs(artefacts, exist_ok=True)
    store = os.path.join(work, "store")
    extra = ["--max-bars", "300"]  # the page must ask for no more (it asked for 500)
    gw = mdref.Gateway(os.path.join(BIN, "md-gateway"), URI, web=WEB, store=store, extra=extra)
    driver = None
    try:
        mdref.run_feed(FEED, URI, "--symbols", "40", "--day-ticks", "30000", "--seed", "11",
                       "--rate", "60000")
        opts = webdriver.ChromeOptions()
        opts.binary_location = "/usr/bin/chromium"
        for a in ("--headless=new", "--no-sandbox", "--disable-gpu", "--window-size=1000,640",
                  "--user-data-dir=" + os.path.join(work, "profile")):
            opts.add_argument(a)
        opts.set_capability("goog:loggingPrefs", {"browser": "ALL"})
        driver = webdriver.Chrome(service=Service("/usr/bin/chromedriver"), options=opts)
        driver.get("http://127.0.0.1:%d/?code=600000.SH&period=1m" % gw.port)
        bars = len(json.loads(mdref.get(gw.port, "/getStockData?code=600000.SH&period=1m"
                                        "&start=202308180000&end=202308182359")[2]))
        assert 200 < bars <= 300
        wait_for(driver, "return window.md && md.points === %d && md.volume.data().length === %d"
                 " && ['live', 'stale'].includes(md.state)" % (bars, bars),
                 "%d bars, their volumes and the feed's state" % bars)
        assert driver.execute_script("return document.getElementById('status').textContent") \
            == "", "the page shows an error"
        inked, before = wait_for(driver, "const r = (() => {%s})(); return r[0] > 1000 && r;"
                                 % PIXELS, "a drawn chart")
        # A-share colours by default; gap-flagged bars drawn grey; the chart (and its time
        # axis) inside a 1000x640 window.
        assert driver.execute_script("return md.series.options().upColor") == "#e53935"
        assert driver.execute_script("return md.series.options().downColor") == "#26a69a"
        assert driver.execute_script(
            "return toPoint({time: 202308180931, open: 1, high: 2, low: 1, close: 2, "
            "volume: 100, gap: true}).color") == "#9e9e9e"
        assert driver.execute_script(
            "const r = document.getElementById('chart').getBoundingClientRect();"
            "return r.bottom <= innerHeight && r.right <= innerWidth && r.height > 300")
        # The OHLC / volume legend follows the mouse.
        chart = driver.find_element(By.ID, "chart")
        ActionChains(driver).move_to_element_with_offset(chart, 0, -40).perform()
        text = wait_for(driver, "const t = document.getElementById('legend').textContent;"
                        "return t.includes(' O ') && t.includes(' V ') && t;", "a legend")
        assert "600000.SH 20230818" in text, text
        driver.save_screenshot(os.path.join(artefacts, "chart.png"))
        errors = console_errors(driver)  # (reading the log empties it)
        assert not errors, errors
        last_before = driver.execute_script("return document.getElementById('last').textContent")
        # The next day, live: pushed bars reach the page and change the chart.
        mdref.run_feed(FEED, URI, "--symbols", "40", "--day-ticks", "30000", "--seed", "12",
                       "--date", "20230821", "--rate", "30000")
        wait_for(driver, "return md.updates > 10 && md.points > %d" % bars, "pushed updates")
        time.sleep(0.5)  # a frame to draw them
        after = driver.execute_script("return (() => {%s})();" % PIXELS)[1]
        assert after != before, "the chart's pixels did not change"
        driver.save_screenshot(os.path.join(artefacts, "live.png"))
        points = driver.execute_script("return md.points")
        # The gateway restarts: the page says so, reconnects with back-off, reloads its bars.
        port = gw.port
        gw.stop()
        gw = None
        wait_for(driver, "return md.state === 'reconnecting'", "the reconnecting badge", 10)
        gw = mdref.Gateway(os.path.join(BIN, "md-gateway"), URI, web=WEB, store=store,
                           extra=extra, port=port)
        wait_for(driver, "return md.connects >= 2 && md.state !== 'reconnecting'",
                 "a reconnection", 40)
        mdref.run_feed(FEED, URI, "--symbols", "40", "--day-ticks", "10000", "--seed", "13",
                       "--date", "20230822", "--rate", "30000")
        wait_for(driver, "return md.points > %d" % points, "updates after the restart")
        driver.save_screenshot(os.path.join(artefacts, "after-restart.png"))
        errors = console_errors(driver, allowed=("WebSocket connection",))
        assert not errors, errors
        print("web: chart drew %d inked pixels for %d bars, then %d bars after %d pushed "
              "updates; reconnected after a gateway restart (%d connections), %d bars; last "
              "close %s -> %s; screenshots in %s" % (
                  inked, bars, points, driver.execute_script("return md.updates"),
                  driver.execute_script("return md.connects"),
                  driver.execute_script("return md.points"), last_before,
                  driver.execute_script("return document.getElementById('last').textContent"),
                  artefacts))
    finally:
        if driver:
            driver.quit()
        if gw:
            gw.stop()
        shutil.rmtree(work, ignore_errors=True)


main()
