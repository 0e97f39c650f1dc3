#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""The chart page in a real headless browser (Debian's chromium + chromium-driver +
python3-selenium): the K-line chart renders the day's bars, and bars pushed over the
WebSocket change it.
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


def main():
    work = tempfile.mkdtemp(prefix="md-web-")
    gw = mdref.Gateway(os.path.join(BIN, "md-gateway"), URI, web=WEB)
    driver = None
    try:
        mdref.run_feed(FEED, URI, "--symbols", "40", "--day-ticks", "30000", "--seed", "11",
                       "--rate", "60000")
        opts = webdriver.ChromeOptions()
        opts.binary_location = "/usr/bin/chromium"
        for a in ("--headless=new", "--no-sandbox", "--disable-gpu", "--window-size=1000,700",
                  "--user-data-dir=" + os.path.join(work, "profile")):
            opts.add_argument(a)
        driver = webdriver.Chrome(service=Service("/usr/bin/chromedriver"), options=opts)
        driver.get("http://127.0.0.1:%d/?code=600000.SH&period=1m" % gw.port)
        bars = len(json.loads(mdref.get(gw.port, "/getStockData?code=600000.SH&period=1m"
                                        "&start=202308180000&end=202308182359")[2]))
        assert bars > 200
        wait_for(driver, "return window.md && md.points === %d && "
                 "document.getElementById('status').textContent === 'live'" % bars,
                 "%d bars" % bars)
        inked, before = wait_for(driver, "const r = (() => {%s})(); return r[0] > 1000 && r;"
                                 % PIXELS, "a drawn chart")
        # The page says 'live' before its WebSocket is open: its snapshot says it is.
        wait_for(driver, "return md.updates >= 1", "the WebSocket's snapshot")
        last_before = driver.execute_script("return document.getElementById('last').textContent")
        # The next day, live: pushed bars reach the page and change the chart.
        mdref.run_feed(FEED, URI, "--symbols", "40", "--day-ticks", "30000", "--seed", "12",
                       "--date", "20230821", "--rate", "30000")
        wait_for(driver, "return md.updates > 10 && md.points > %d" % bars, "pushed updates")
        time.sleep(0.5)  # a frame to draw them
        after = driver.execute_script("return (() => {%s})();" % PIXELS)[1]
        assert after != before, "the chart's pixels did not change"
        points = driver.execute_script("return md.points")
        print("web: chart drew %d inked pixels for %d bars, then %d bars after %d pushed "
              "updates; last close %s -> %s" % (
                  inked, bars, points, driver.execute_script("return md.updates"), last_before,
                  driver.execute_script("return document.getElementById('last').textContent")))
    finally:
        if driver:
            driver.quit()
        gw.stop()
        shutil.rmtree(work, ignore_errors=True)


main()
