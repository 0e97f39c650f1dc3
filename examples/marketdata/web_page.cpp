// SPDX-License-Identifier: Apache-2.0
// The page at `/`: a K-line chart of one code and period (TradingView lightweight-charts,
// served by the gateway from --web DIR), loaded from /v2/bars and updated live from /ws.
#include <string_view>

#include "http_server.hpp"

namespace md::gw {

const std::string& index_html() {
    static const std::string page = R"HTML(<!doctype html>
<html><head><meta charset="utf-8"><meta name="viewport" content="width=device-width">
<title>md-gateway K-line</title>
<link rel="stylesheet" href="/app.css"><link rel="icon" href="/favicon.svg" type="image/svg+xml">
<script src="/lightweight-charts.js"></script></head>
<body>
<form id="f">code <input id="code" value="600000.SH" size="10">
period <select id="period"><option>1m</option><option>5m</option><option>15m</option>
<option>30m</option><option>60m</option><option>1d</option></select>
colours <select id="colors"><option value="red-up">red up</option>
<option value="green-up">green up</option></select>
<button>show</button> <span id="state" class="badge">connecting</span>
<span id="status"></span> last close <b id="last">-</b> updates <b id="updates">0</b></form>
<div id="legend">&nbsp;</div>
<div id="chart"></div>
<script src="/app.js"></script></body></html>
)HTML";
    return page;
}

// The page's script and style are files of their own: the page's Content-Security-Policy
// allows scripts and styles from this origin only (no inline code).
namespace {

/// The page's script (a constant of its own: the function returning it stays short).
constexpr std::string_view kAppJs = R"JS('use strict';
// Bars are labelled by their end minute in exchange time (YYYYMMDDHHMM); shown as UTC.
function toTime(label) {
  const s = String(label);
  return Date.UTC(+s.slice(0, 4), +s.slice(4, 6) - 1, +s.slice(6, 8), +s.slice(8, 10),
                  +s.slice(10, 12)) / 1000;
}
const params = new URLSearchParams(location.search);
const $ = (id) => document.getElementById(id);
if (params.get('code')) $('code').value = params.get('code');
if (params.get('period')) $('period').value = params.get('period');
if (params.get('colors')) $('colors').value = params.get('colors');
// A-shares: red up, green down by default (?colors=green-up for the other convention).
const RED = '#e53935', GREEN = '#26a69a', GAP = '#9e9e9e';
function palette() {
  return $('colors').value === 'green-up' ? {up: GREEN, down: RED} : {up: RED, down: GREEN};
}
window.md = {updates: 0, series: null, volume: null, ws: null, points: 0, state: 'connecting',
             connects: 0, backoff: 500, maxBars: 500, bars: new Map(), gen: 0};
const chart = LightweightCharts.createChart($('chart'),
  {autoSize: true, timeScale: {timeVisible: true}, layout: {panes: {separatorColor: '#ddd'}}});
function toPoint(b) {
  const p = {time: toTime(b.time), open: b.open, high: b.high, low: b.low, close: b.close};
  if (b.gap) { p.color = GAP; p.borderColor = GAP; p.wickColor = GAP; }
  return p;
}
function toVolume(b) {
  const c = palette();
  return {time: toTime(b.time), value: b.volume,
          color: b.gap ? GAP : (b.close >= b.open ? c.up : c.down) + '80'};
}
function setState(s) {
  md.state = s;
  const el = $('state');
  el.textContent = s.replace('_', ' ');
  el.className = 'badge ' + s;
}
function legend(b) {
  if (!b) { $('legend').textContent = '\u00a0'; return; }
  $('legend').textContent = $('code').value + ' ' + b.time + '  O ' + b.open.toFixed(2) +
    '  H ' + b.high.toFixed(2) + '  L ' + b.low.toFixed(2) + '  C ' + b.close.toFixed(2) +
    '  V ' + b.volume + (b.gap ? '  (gap: ticks may be missing)' : '');
}
chart.subscribeCrosshairMove((p) => {
  legend(p && p.time !== undefined ? md.bars.get(p.time) : null);
});
function apply(b) {
  md.bars.set(toTime(b.time), b);
  md.series.update(toPoint(b));
  md.volume.update(toVolume(b));
  md.points = md.series.data().length;
  $('last').textContent = b.close.toFixed(2);
}
async function load(code, period) {
  const r = await fetch('/v2/bars?codes=' + encodeURIComponent(code) + '&period=' + period +
                        '&last=' + Math.min(500, md.maxBars));
  const body = await r.json();
  if (!r.ok) { $('status').textContent = body.error; return false; }
  const bars = body[code];
  md.bars = new Map(bars.map((b) => [toTime(b.time), b]));
  md.series.setData(bars.map(toPoint));
  md.volume.setData(bars.map(toVolume));
  md.points = bars.length;
  $('status').textContent = '';
  if (bars.length) { $('last').textContent = bars[bars.length - 1].close.toFixed(2); }
  return true;
}
// The live stream, with reconnection: 0.5 s, 1 s, 2 s, ... 30 s between attempts; after each
// (re)connection the bars are fetched again, so what was missed meanwhile is drawn.
function connect(code, period, gen) {
  if (gen !== md.gen) return;
  const ws = new WebSocket((location.protocol === 'https:' ? 'wss://' : 'ws://') + location.host +
                           '/ws?code=' + encodeURIComponent(code) + '&period=' + period);
  md.ws = ws;
  ws.onopen = async () => {
    md.connects++;
    md.backoff = 500;
    await load(code, period);
  };
  ws.onmessage = (e) => {
    const m = JSON.parse(e.data);
    if (m.type === 'state' || m.type === 'heartbeat') { setState(m.state); return; }
    if (!m.bar) return;
    apply(m.bar);
    md.updates++;
    $('updates').textContent = md.updates;
  };
  ws.onclose = () => {
    if (gen !== md.gen) return;
    setState('reconnecting');
    setTimeout(() => connect(code, period, gen), md.backoff);
    md.backoff = Math.min(md.backoff * 2, 30000);
  };
}
async function show() {
  const code = $('code').value;
  const period = $('period').value;
  const gen = ++md.gen;
  if (md.ws) md.ws.close();
  if (md.series) { chart.removeSeries(md.series); chart.removeSeries(md.volume); }
  const c = palette();
  md.series = chart.addSeries(LightweightCharts.CandlestickSeries,
    {upColor: c.up, downColor: c.down, borderUpColor: c.up, borderDownColor: c.down,
     wickUpColor: c.up, wickDownColor: c.down});
  md.volume = chart.addSeries(LightweightCharts.HistogramSeries,
    {priceFormat: {type: 'volume'}, priceLineVisible: false, lastValueVisible: false}, 1);
  chart.panes()[1].setHeight(Math.round($('chart').clientHeight * 0.25));
  try {  // --max-bars: the most one request may ask for
    const h = await (await fetch('/healthz')).json();
    if (h.max_bars) md.maxBars = h.max_bars;
  } catch (e) { /* keep 500 */ }
  if (await load(code, period)) chart.timeScale().fitContent();
  connect(code, period, gen);
}
$('f').onsubmit = (e) => { e.preventDefault(); show(); };
show();
)JS";

}  // namespace

const std::string& app_js() {
    static const std::string js(kAppJs);
    return js;
}

const std::string& app_css() {
    static const std::string css =
        "html,body{height:100%;margin:0}body{font:14px sans-serif;display:flex;"
        "flex-direction:column;padding:8px;box-sizing:border-box}"
        "#chart{flex:1;min-height:200px;width:100%}#legend{font:13px monospace;margin:4px 0}"
        ".badge{padding:1px 6px;border-radius:8px;background:#bbb;color:#fff}"
        ".badge.live{background:#43a047}.badge.stale{background:#fb8c00}"
        ".badge.down,.badge.reconnecting{background:#e53935}.badge.catching_up{background:#1e88e5}"
        "\n";
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
