// SPDX-License-Identifier: Apache-2.0
// The page at `/`: a K-line chart of one code and period (TradingView lightweight-charts,
// served by the gateway from --web DIR), loaded from /v2/bars and updated live from /ws.
#include "http_server.hpp"

namespace md::gw {

const std::string& index_html() {
    static const std::string page = R"HTML(<!doctype html>
<html><head><meta charset="utf-8"><title>md-gateway K-line</title>
<style>body{font:14px sans-serif;margin:12px}#chart{width:900px;height:480px}</style>
<script src="/lightweight-charts.js"></script></head>
<body>
<form id="f">code <input id="code" value="600000.SH" size="10">
period <select id="period"><option>1m</option><option>5m</option><option>15m</option>
<option>30m</option><option>60m</option><option>1d</option></select>
<button>show</button> <span id="status">loading</span>
last close <b id="last">-</b> updates <b id="updates">0</b></form>
<div id="chart"></div>
<script>
'use strict';
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
</script></body></html>
)HTML";
    return page;
}

}  // namespace md::gw
