// SPDX-License-Identifier: Apache-2.0
// The page at `/`: a K-line chart of one code and period (TradingView lightweight-charts,
// served by the gateway from --web DIR), loaded from /v2/bars and updated live from /ws.
#include "http_server.hpp"

namespace md::gw {

const std::string& index_html() {
    static const std::string page = R"HTML(<!doctype html>
<html><head><meta charset="utf-8"><title>md-gateway K-line</title>
<link rel="stylesheet" href="/app.css"><link rel="icon" href="/favicon.svg" type="image/svg+xml">
<script src="/lightweight-charts.js"></script></head>
<body>
<form id="f">code <input id="code" value="600000.SH" size="10">
period <select id="period"><option>1m</option><option>5m</option><option>15m</option>
<option>30m</option><option>60m</option><option>1d</option></select>
<button>show</button> <span id="status">loading</span>
last close <b id="last">-</b> updates <b id="updates">0</b></form>
<div id="chart"></div>
<script src="/app.js"></script></body></html>
)HTML";
    return page;
}

// The page's script and style are files of their own: the page's Content-Security-Policy
// allows scripts and styles from this origin only (no inline code).
const std::string& app_js() {
    static const std::string js = R"JS('use strict';
// Bars are labelled by their end minute in exchange time (YYYYMMDDHHMM); shown as UTC.
function toTime(label) {
  const s = String(label);
  return Date.UTC(+s.slice(0, 4), +s.slice(4, 6) - 1, +s.slice(6, 8), +s.slice(8, 10),
                  +s.slice(10, 12)) / 1000;
}
function toPoint(b) {
  return {time: toTime(b.time), open: b.open, high: b.high, low: b.low, close: b.close};
}
window.md = {updates: 0, series: null, ws: null, points: 0};
const params = new URLSearchParams(location.search);
if (params.get('code')) document.getElementById('code').value = params.get('code');
if (params.get('period')) document.getElementById('period').value = params.get('period');
const chart = LightweightCharts.createChart(document.getElementById('chart'),
  {width: 900, height: 480, timeScale: {timeVisible: true}});
async function show() {
  const code = document.getElementById('code').value;
  const period = document.getElementById('period').value;
  if (md.series) chart.removeSeries(md.series);
  if (md.ws) md.ws.close();
  md.series = chart.addSeries(LightweightCharts.CandlestickSeries, {});
  const r = await fetch('/v2/bars?codes=' + encodeURIComponent(code) + '&period=' + period +
                        '&last=500');
  const body = await r.json();
  if (!r.ok) { document.getElementById('status').textContent = body.error; return; }
  const bars = body[code];
  md.series.setData(bars.map(toPoint));
  md.points = bars.length;
  if (bars.length) document.getElementById('last').textContent = bars[bars.length - 1].close;
  chart.timeScale().fitContent();
  document.getElementById('status').textContent = 'live';
  md.ws = new WebSocket((location.protocol === 'https:' ? 'wss://' : 'ws://') + location.host +
                        '/ws?code=' + encodeURIComponent(code) + '&period=' + period);
  md.ws.onmessage = (e) => {
    const m = JSON.parse(e.data);
    if (!m.bar) return;
    md.series.update(toPoint(m.bar));
    md.points = md.series.data().length;
    md.updates++;
    document.getElementById('updates').textContent = md.updates;
    document.getElementById('last').textContent = m.bar.close;
  };
}
document.getElementById('f').onsubmit = (e) => { e.preventDefault(); show(); };
show();
)JS";
    return js;
}

const std::string& app_css() {
    static const std::string css =
        "body{font:14px sans-serif;margin:12px}#chart{width:900px;height:480px}\n";
    return css;
}

const std::string& favicon_svg() {
    static const std::string svg =
        R"(<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 16 16">)"
        R"(<rect x="3" y="4" width="4" height="8" fill="#e53935"/><rect x="4.5" y="1" width="1" height="14" fill="#e53935"/>)"
        R"(<rect x="9" y="6" width="4" height="6" fill="#43a047"/><rect x="10.5" y="3" width="1" height="12" fill="#43a047"/></svg>)";
    return svg;
}

}  // namespace md::gw
