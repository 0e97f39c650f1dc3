#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""The chart page in a real headless browser (Debian's chromium + chromium-driver +
python3-selenium): the K-line chart renders the day's bars with their volumes in a 1000x640
window, asks for no more than --max-bars, uses A-share colours, shows the OHLC/volume legend
under the mouse and the feed's state, changes with bars pushed over the WebSocket, reconnects
after a gateway restart, draws grey (and names in the legend) exactly the bars the gateway
flagged after real holes in the feed, and logs no console error; screenshots in
$MD_WEB_ARTEFACTS.
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


def feed_with_holes(gw, work):
    """The next day with real holes: every other tick message between 10:00 and 10:45 never
    reaches the gateway (an unrecoverable loss), so the channel sequence jumps there. Returns
    md_feed_gaps_total before it; waits until the gateway has applied what was published."""
    gaps_before = gw.metric("md_feed_gaps_total")
    rec, holed = os.path.join(work, "day3.rec"), os.path.join(work, "day3-holed.rec")
    mdref.run_feed(FEED, "mem://md:1", "--symbols", "40", "--day-ticks", "30000", "--seed",
                   "13", "--date", "20230822", "--rate", "0", "--record", rec)
    mdref.drop_messages(rec, holed, lambda i, ticks: i % 2 == 1 and all(
        10 * 3600000 <= t[4] < 10 * 3600000 + 45 * 60000 for t in ticks))
    ticks = gw.health()["ticks"]
    gw.wait_ticks(ticks + mdref.run_feed(FEED, URI, "--replay", holed, "--rate", "30000"))
    return gaps_before


GREY = """
let n = 0;
for (const c of document.querySelectorAll('#chart canvas')) {
  if (!c.width || !c.height) continue;
  const d = c.getContext('2d').getImageData(0, 0, c.width, c.height).data;
  for (let i = 0; i < d.length; i += 4) {
    if (d[i] === 0x9e && d[i + 1] === 0x9e && d[i + 2] === 0x9e && d[i + 3] === 255) n++;
  }
}
return n;
"""


def check_real_gaps(driver, gw, gaps_before, grey_before, artefacts):
    """The gateway marked the holes of the feed; the reloaded page draws exactly those bars
    grey and says so under the mouse."""
    deadline = time.time() + 10
    while gw.metric("md_feed_gaps_total") <= gaps_before:
        assert time.time() < deadline, "the holes in the feed marked no gap"
        time.sleep(0.1)
    bars = json.loads(mdref.get(gw.port, "/v2/bars?codes=600000.SH&period=1m&last=300")[2])
    bars = bars["600000.SH"]
    flagged = [b["time"] for b in bars if b.get("gap")]
    # Only bars around the holes (10:00 to 10:45 of 2023-08-22, give or take the bar that held
    # the last tick before the first hole and the one after the last) carry the flag.
    assert len(flagged) >= 10, flagged
    assert all(202308220959 <= t <= 202308221047 for t in flagged), flagged
    driver.refresh()  # the page's first load: the bars as the gateway now serves them
    wait_for(driver, "return window.md && md.points === %d && md.series.data().length === %d"
             % (len(bars), len(bars)), "the reloaded bars")
    time.sleep(0.5)  # a frame to draw them
    drawn = driver.execute_script(
        "return md.series.data().filter((p) => p.color === GAP).map((p) => md.bars.get(p.time)"
        ".time);")
    assert drawn == flagged, (drawn, flagged)
    grey = driver.execute_script(GREY)
    driver.save_screenshot(os.path.join(artefacts, "gaps.png"))
    # Grey ink: more than the chart had before any gap, a few pixels for each flagged bar.
    assert grey >= grey_before + 5 * len(flagged), (grey, grey_before, len(flagged))
    # Under the mouse, a gap bar's legend says that ticks may be missing.
    middle = flagged[len(flagged) // 2]
    x, width = driver.execute_script(
        "return [chart.timeScale().timeToCoordinate(toTime(%d)),"
        " document.getElementById('chart').clientWidth];" % middle)
    ActionChains(driver).move_to_element_with_offset(
        driver.find_element(By.ID, "chart"), int(x - width / 2), -40).perform()
    text = wait_for(driver, "const t = document.getElementById('legend').textContent;"
                    "return t.includes('gap') && t;", "a gap bar's legend")
    assert "ticks may be missing" in text, text
    driver.save_screenshot(os.path.join(artefacts, "gap-legend.png"))
    print("web: %d bars of 600000.SH 1m flagged from the feed's holes (%d..%d), drawn grey "
          "(%d grey pixels, %d before any gap); legend: %s" % (
              len(flagged), flagged[0], flagged[-1], grey, grey_before, text))


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
        grey_before = driver.execute_script(GREY)  # no gap yet: the chart's own grey ink
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
        gaps_before = feed_with_holes(gw, work)
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
        check_real_gaps(driver, gw, gaps_before, grey_before, artefacts)
        errors = console_errors(driver)
        assert not errors, errors
    finally:
        if driver:
            driver.quit()
        if gw:
            gw.stop()
        shutil.rmtree(work, ignore_errors=True)


main()
