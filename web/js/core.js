/*
 * core.js - what every page of the dashboard shares (docs/dashboard.md): the
 * session's state, DOM helpers (text only: everything the API says goes in
 * with textContent, never innerHTML; job names, reasons and node names come
 * from users), number and time formats, the API client, the charts (uPlot),
 * the time range in the URL, and the pages' router.
 *
 * The scripts are plain classic scripts, inlined in this order by
 * tools/embed_web.py: core.js, then one file per page (overview.js, job.js,
 * history.js, node.js), then main.js, which signs in and runs the refresh
 * cycle. They share one object, window.GPO: core.js fills it; each page file
 * registers its page with GPO.register({...}) (see below).
 *
 * For tests and the load benchmark: <html data-loaded="1"> once the first data
 * is painted (with a performance mark "gpuorch-loaded"), data-page names the
 * page shown, data-polls counts the refreshes, data-page-polls those of the
 * page shown since it was opened, and each chart's element carries
 * data-points (values drawn).
 */
'use strict';

(function () {
  const TOKEN_KEY = 'gpuorch.token';
  const params = new URLSearchParams(location.search);
  const POLL_MS = Math.min(60000, Math.max(1000, (Number(params.get('refresh')) || 3) * 1000));
  const MAX_ROWS = 200;
  const MAX_JOB_PAGES = 10;
  const PALETTE = ['#73bf69', '#5794f2', '#fade2a', '#ff9830', '#f2495c', '#b877d9',
    '#37872d', '#8ab8ff', '#ffcb7d', '#ff7383', '#ca95e5', '#96d98d'];

  const state = {
    token: null,
    timer: null,
    running: false,
    generation: 0, // bumped at sign-out: answers of an older session are dropped
    skewMs: 0, // server clock minus ours, from the Date header
    costBy: 'team',
    polls: 0,
    pagePolls: 0, // refreshes of the page shown, since it was opened
    routeGen: 0, // bumped at every change of page: answers for the one before are dropped
    charts: {}, // element id -> {plot, keys}
    lastOk: 0,
    svcHist: {t: [], byName: {}}, // each service's cost as the page saw it (the cost per hour)
    svcSeen: false, // the last answer of GET /v1/services listed services
  };
  window.gpuorchDash = state;
  window.GPO = {};

  const $ = (id) => document.getElementById(id);

  class AuthError extends Error {}
  class ApiError extends Error {
    constructor(status, message) {
      super(message);
      this.status = status;
    }
  }

  // -- Small DOM helpers: text only. ---------------------------------------------------

  function el(tag, cls, text) {
    const e = document.createElement(tag);
    if (cls) e.className = cls;
    if (text !== undefined && text !== null) e.textContent = String(text);
    return e;
  }

  function badge(text, color) {
    return el('span', 'badge b-' + color, text);
  }

  function msg(text, bad) {
    return el('div', bad ? 'msg bad' : 'msg', text);
  }

  // A table from column specs {h: header, num: right-aligned, cell: row -> string|Node}.
  function table(cols, rows, foot) {
    const t = el('table');
    const hr = el('tr');
    for (const c of cols) hr.appendChild(el('th', c.num ? 'num' : '', c.h));
    t.appendChild(el('thead')).appendChild(hr);
    const body = t.appendChild(el('tbody'));
    for (const r of rows.slice(0, MAX_ROWS)) {
      const tr = body.appendChild(el('tr'));
      for (const c of cols) {
        const td = tr.appendChild(el('td', (c.num ? 'num ' : '') + (c.cls || '')));
        if (c.h) td.dataset.label = c.h; // a narrow window's card layout names each value
        const v = c.cell(r);
        if (v instanceof Node) td.appendChild(v);
        else td.textContent = v === undefined || v === null ? '-' : String(v);
      }
    }
    if (foot) {
      const tr = t.appendChild(el('tfoot')).appendChild(el('tr'));
      for (const c of cols) {
        const v = foot(c);
        const td = tr.appendChild(el('td', c.num ? 'num' : '', v === undefined || v === null ? '' : v));
        if (c.h) td.dataset.label = c.h;
      }
    }
    if (rows.length <= MAX_ROWS) return t;
    const wrap = el('div');
    wrap.appendChild(t);
    wrap.appendChild(el('div', 'more', `and ${rows.length - MAX_ROWS} more`));
    return wrap;
  }

  // -- Formats. ------------------------------------------------------------------------

  const isNum = (v) => typeof v === 'number' && isFinite(v);
  const fmtPct = (v) => (isNum(v) ? v.toFixed(v < 10 && v > 0 ? 1 : 0) + '%' : '-');
  const fmtFrac = (v) => (isNum(v) ? (v * 100).toFixed(0) + '%' : '-');
  const fmtMoney = (v) => (isNum(v) ? v.toLocaleString('en-US', {minimumFractionDigits: 2,
    maximumFractionDigits: 2}) : '-');
  const fmtHours = (v) => (isNum(v) ? v.toLocaleString('en-US', {maximumFractionDigits: 1}) : '-');
  const fmtGiB = (mib) => (isNum(mib) ? (mib / 1024).toFixed(mib < 10240 ? 1 : 0) : '-');
  // GPUs counted in GPU shares, to the milli-GPU: "2", "0.25", "0.125", "1.5".
  const fmtShares = (v) => (isNum(v) ? String(Math.round(v * 1000) / 1000) : '-');

  function fmtDuration(ms) {
    if (!isNum(ms) || ms < 0) return '-';
    const s = Math.floor(ms / 1000);
    if (s < 60) return s + 's';
    const m = Math.floor(s / 60);
    if (m < 60) return m + 'm ' + (s % 60) + 's';
    const h = Math.floor(m / 60);
    if (h < 48) return h + 'h ' + (m % 60) + 'm';
    return Math.floor(h / 24) + 'd ' + (h % 24) + 'h';
  }

  function fmtTime(iso) {
    if (!iso) return '-';
    const d = new Date(iso);
    if (isNaN(d)) return '-';
    const now = new Date(Date.now() + state.skewMs);
    const t = d.toLocaleTimeString([], {hour: '2-digit', minute: '2-digit', second: '2-digit'});
    return d.toDateString() === now.toDateString() ? t : d.toLocaleDateString() + ' ' + t;
  }

  const serverNow = () => Date.now() + state.skewMs;
  const since = (iso) => Math.max(0, serverNow() - Date.parse(iso));

  // A running job's GPUs: the shares its attempt holds (0.25 for a 0.25 job, a
  // MIG instance's charge), else what its spec asks.
  function gpusHeld(j) {
    const a = j.current_attempt;
    return a && isNum(a.gpu_shares) ? fmtShares(a.gpu_shares) : gpusOf(j.spec);
  }

  // The class a job runs under: the server's answer (its spec's, else the
  // default class), its spec's from an older controller.
  const classOf = (j) => j.priority || (j.spec && j.spec.priority) || '-';

  function gpusOf(spec) {
    if (!spec) return '-';
    if (isNum(spec.gpus) && spec.gpus > 0) return String(spec.gpus);
    if (isNum(spec.gpu_mem_mib) && spec.gpu_mem_mib > 0) return fmtGiB(spec.gpu_mem_mib) + ' GiB';
    return '0';
  }

  function utilClass(v) {
    return v >= 50 ? 'bar' : v >= 10 ? 'bar mid' : 'bar low';
  }

  function bar(cls, pct) {
    const b = el('div', cls);
    const fill = b.appendChild(el('span'));
    fill.style.width = Math.max(0, Math.min(100, pct || 0)).toFixed(1) + '%';
    return b;
  }

  // -- The API. ------------------------------------------------------------------------

  // The Response of GET path with the token (a stream stays unread: the logs'
  // follow reads it), once it is known to be good: AuthError on 401, ApiError
  // with the API's message on any other failure. `signal` aborts it.
  async function apiRaw(path, signal, accept) {
    const gen = state.generation;
    const r = await fetch(path, {
      headers: {Authorization: 'Bearer ' + state.token, Accept: accept || 'application/json'},
      cache: 'no-store',
      credentials: 'omit',
      signal,
    });
    if (gen !== state.generation) throw new ApiError(0, 'signed out');
    const date = Date.parse(r.headers.get('Date') || '');
    // Date has whole seconds: only a skew well past that is the clocks' and worth correcting.
    if (isNum(date)) state.skewMs = Math.abs(date - Date.now()) > 2000 ? date - Date.now() : 0;
    if (r.status === 401) throw new AuthError('The server did not accept the token (401).');
    if (!r.ok) {
      let text = r.statusText || 'error';
      try {
        const b = await r.json();
        if (b && b.error && b.error.message) text = b.error.message;
      } catch (e) { /* not JSON: keep the status text */ }
      throw new ApiError(r.status, text);
    }
    return r;
  }

  async function api(path) {
    return (await apiRaw(path)).json();
  }

  // Every pending and running job, page by page (the API's limit is 1000 a page).
  async function fetchJobs() {
    let all = [];
    let after = null;
    for (let page = 0; page < MAX_JOB_PAGES; page++) {
      const q = 'state=PENDING,RUNNING&limit=1000' + (after !== null ? '&after=' + after : '');
      const b = await api('/v1/jobs?' + q);
      all = all.concat(b.jobs || []);
      if (b.next_after === null || b.next_after === undefined) break;
      after = encodeURIComponent(b.next_after);
    }
    return all;
  }

  // A panel's answer to a failed request; 401 is handled by the caller.
  function failure(err) {
    if (err instanceof ApiError && err.status === 404) return msg('not available (this controller has no such API)');
    if (err instanceof ApiError && err.status === 403) return msg('not allowed for this user');
    return msg('could not load: ' + (err && err.message ? err.message : String(err)), true);
  }

  function setPanel(id, node) {
    const box = $(id);
    if (box) box.replaceChildren(node);
  }

  // -- Charts (uPlot). -----------------------------------------------------------------

  function chartMessage(id, text, bad) {
    const c = state.charts[id];
    if (c) {
      c.plot.destroy();
      delete state.charts[id];
    }
    const box = $(id);
    box.dataset.points = '0';
    box.replaceChildren(msg(text, bad));
  }

  // colorOf(key, index) -> palette index and dashOf(key) -> dashed: optional.
  function chartOpts(box, keys, unit, yRange, colorOf, dashOf) {
    const axis = {
      stroke: '#8e9196',
      grid: {stroke: '#2a2f35', width: 1},
      ticks: {stroke: '#2a2f35', width: 1},
      font: '11px system-ui, sans-serif',
    };
    return {
      width: Math.max(200, box.clientWidth - 16),
      height: 200,
      cursor: {points: {size: 6}},
      legend: {live: true},
      scales: {x: {time: true}, y: yRange ? {range: yRange} : {auto: true}},
      axes: [
        Object.assign({}, axis),
        Object.assign({}, axis, {size: 44, values: (u, vals) => vals.map((v) => v + unit)}),
      ],
      series: [{}].concat(keys.map((k, i) => ({
        label: k,
        stroke: PALETTE[(colorOf ? colorOf(k, i) : i) % PALETTE.length],
        dash: dashOf && dashOf(k) ? [5, 4] : undefined,
        width: 1.5,
        spanGaps: false,
        points: {show: false},
        value: (u, v) => (v === null || v === undefined ? '-' : (+v).toFixed(1) + unit),
      }))),
    };
  }

  // A series' missing points: a run of nulls whose neighbours with values lie
  // at most maxGapS apart (steps the samples did not fill, a missed minute)
  // becomes undefined, which uPlot joins across; a longer one stays null, a
  // break in the line (no data: the team ran nothing then). New array.
  const JOIN_GAP_S = 60;
  function joinGaps(t, values, maxGapS) {
    const out = values.slice();
    let prev = -1; // index of the last value
    for (let i = 0; i < out.length; i++) {
      if (out[i] === null || out[i] === undefined) continue;
      if (prev >= 0 && i - prev > 1 && t[i] - t[prev] <= maxGapS) {
        for (let k = prev + 1; k < i; k++) out[k] = undefined;
      }
      prev = i;
    }
    return out;
  }

  function renderChart(id, body, unit, yRange, style) {
    const box = $(id);
    const t = body.t || [];
    const series = (body.series || []).slice().sort((a, b) => (a.key < b.key ? -1 : a.key > b.key ? 1 : 0));
    let points = 0;
    for (const s of series) for (const v of s.values || []) if (v !== null && v !== undefined) points++;
    if (!t.length || !series.length || !points) {
      chartMessage(id, 'no data yet');
      return;
    }
    // A young cluster has data only at the end of the window: start the chart at
    // the first time with a value rather than draw an empty quarter of an hour.
    let first = t.length;
    for (const s of series) {
      const i = (s.values || []).findIndex((v) => v !== null && v !== undefined);
      if (i >= 0 && i < first) first = i;
    }
    first = Math.max(0, Math.min(first, t.length - 2));
    const keys = series.map((s) => String(s.key));
    const ts = t.slice(first);
    const join = JOIN_GAP_S + (isNum(body.step_s) ? body.step_s : 0);
    const data = [ts].concat(series.map((s) => joinGaps(ts, (s.values || []).slice(first), join)));
    const old = state.charts[id];
    if (old && old.keys.join('\n') === keys.join('\n')) {
      old.plot.setData(data);
    } else {
      if (old) old.plot.destroy();
      box.replaceChildren();
      const st = style || {};
      state.charts[id] = {plot: new uPlot(chartOpts(box, keys, unit, yRange, st.colorOf, st.dashOf), data, box), keys};
    }
    box.dataset.points = String(points);
  }


  // Destroys the charts whose element is inside `root` or no longer in the page.
  function dropCharts(root) {
    for (const id of Object.keys(state.charts)) {
      const box = $(id);
      if (box && !(root && root.contains(box))) continue;
      state.charts[id].plot.destroy();
      delete state.charts[id];
    }
  }

  function resizeCharts() {
    for (const id of Object.keys(state.charts)) {
      const box = $(id);
      if (!box || !box.clientWidth) continue; // on a hidden page: sized when shown
      state.charts[id].plot.setSize({width: Math.max(200, box.clientWidth - 16), height: 200});
    }
  }


  // Seconds as people read a latency: "43 ms", "1.2 s".
  function fmtSeconds(s) {
    if (s < 1) return (s * 1000).toFixed(s < 0.01 ? 1 : 0) + ' ms';
    return s.toFixed(s < 10 ? 1 : 0) + ' s';
  }

  // The block shows only when there are services: none, or a controller without

  // The job states that are final, and one colour per state (attempt states too)
  // on every page: a state as a badge.
  const ENDED_STATES = ['COMPLETED', 'FAILED', 'CANCELLED', 'TIMEOUT', 'PREEMPTED', 'NODE_FAIL'];
  const STATE_COLOR = {PENDING: 'blue', REQUEUED: 'blue', ASSIGNED: 'blue', RUNNING: 'green', KILLING: 'red',
    COMPLETED: 'green', FAILED: 'red', OUT_OF_MEMORY: 'red', NODE_FAIL: 'red', TIMEOUT: 'orange',
    CANCELLED: 'muted', PREEMPTED: 'yellow'};
  const stateBadge = (s) => badge(s || '?', STATE_COLOR[s] || 'muted');

  // A time (ms) as <input type="datetime-local"> takes it: local, to the minute; '' for none.
  function localInput(ms) {
    if (!isNum(ms)) return '';
    const d = new Date(ms);
    const pad = (n) => String(n).padStart(2, '0');
    return `${d.getFullYear()}-${pad(d.getMonth() + 1)}-${pad(d.getDate())}T${pad(d.getHours())}:${pad(d.getMinutes())}`;
  }

  // A wait reason, "resources: no free GPU of type H100 in pool main": its code
  // as a badge, then the sentence (the queue's Reason column, a job's page).
  function reasonCell(text, cls) {
    const d = el('span', cls || '');
    if (!text) {
      d.appendChild(el('span', 'muted', 'waiting for the next pass'));
      return d;
    }
    const m = /^([a-z_]+): (.*)$/s.exec(text);
    if (!m) {
      d.textContent = text;
      return d;
    }
    const color = {quota: 'orange', resources: 'blue', reservation: 'purple', priority: 'yellow',
      dependency: 'muted', array_limit: 'muted', budget: 'red', hold: 'yellow', deferred: 'muted'}[m[1]] || 'muted';
    d.appendChild(badge(m[1], color));
    d.appendChild(document.createTextNode(m[2]));
    return d;
  }

  // -- Links between pages. --------------------------------------------------------------

  // A link to another page of the dashboard: a real <a href> (opens in a new tab
  // with a middle click), followed in place with a plain click.
  function link(href, text, cls) {
    const a = el('a', cls || '', text);
    a.href = href;
    a.addEventListener('click', (ev) => {
      if (ev.button !== 0 || ev.metaKey || ev.ctrlKey || ev.shiftKey || ev.altKey) return;
      ev.preventDefault();
      navigate(href);
    });
    return a;
  }

  const jobLink = (id, text) => link('/jobs/' + encodeURIComponent(id), text === undefined ? String(id) : text, 'mono');
  const nodeLink = (name) => link('/nodes/' + encodeURIComponent(name), name);

  // Nodes joined with ", ", each a link to its page; '-' for none.
  function nodeLinks(names) {
    const s = el('span');
    (names || []).forEach((n, i) => {
      if (i) s.appendChild(document.createTextNode(', '));
      s.appendChild(nodeLink(n));
    });
    if (!s.childNodes.length) s.textContent = '-';
    return s;
  }

  // Pages: {name, title, match(pathname) -> params object or null, mount(params)
  // (build the page's DOM in $('page-' + name)), refresh() -> Promise (read the
  // API and draw; called at mount and every POLL_MS), unmount(), range: true
  // when its charts follow the time range}. Registered in the order to try.
  const pages = [];
  function register(page) {
    pages.push(page);
  }

  // Set by main.js: goes to the page of location (pushState first).
  let onRoute = () => {};
  function navigate(href, replace) {
    if (replace) history.replaceState(null, '', href);
    else history.pushState(null, '', href);
    onRoute();
  }

  // -- The time range (every chart's; in the URL: ?range=6h, or ?from=...&to=...). -------

  const RANGES = [['15m', 900], ['1h', 3600], ['6h', 21600], ['24h', 86400], ['7d', 604800]];
  const STEPS = [5, 10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600, 7200, 21600, 86400];
  const MAX_POINTS = 180;

  // {key: '1h' | 'custom', label, span_s, step_s, since, until (the series API's
  // values), from_ms, to_ms (custom only)}. An unknown or bad range is the default.
  function currentRange() {
    const p = new URLSearchParams(location.search);
    const from = Date.parse(p.get('from') || '');
    const to = Date.parse(p.get('to') || '');
    let r;
    if (isNum(from) && isNum(to) && from < to) {
      r = {key: 'custom', span_s: Math.max(1, Math.round((to - from) / 1000)),
        since: new Date(from).toISOString(), until: new Date(to).toISOString(), from_ms: from, to_ms: to};
      r.label = fmtTime(r.since) + ' to ' + fmtTime(r.until);
    } else {
      const found = RANGES.find((x) => x[0] === p.get('range')) || RANGES[0];
      r = {key: found[0], span_s: found[1], since: '-' + found[0].replace('d', 'h').replace(/^7h$/, '168h'),
        until: 'now', label: 'last ' + found[0].replace('m', ' min').replace('h', ' h').replace('d', ' days')};
    }
    r.step_s = stepFor(r.span_s);
    return r;
  }

  // A step that gives at most MAX_POINTS points; a minute at least beyond the
  // raw hour (what is stored there is one-minute aggregates).
  function stepFor(span_s) {
    const want = Math.max(span_s > 3600 ? 60 : 5, Math.ceil(span_s / MAX_POINTS));
    return STEPS.find((s) => s >= want) || STEPS[STEPS.length - 1];
  }

  // "since=-1h&until=now&step=20s": the series API's window for range r.
  function rangeQuery(r) {
    return 'since=' + encodeURIComponent(r.since) + '&until=' + encodeURIComponent(r.until) + '&step=' + r.step_s + 's';
  }

  // The URL of this page with the range r (a key, or {from_ms, to_ms}); other parameters kept.
  function rangeHref(r) {
    const p = new URLSearchParams(location.search);
    p.delete('range');
    p.delete('from');
    p.delete('to');
    if (typeof r === 'string') {
      if (r !== RANGES[0][0]) p.set('range', r);
    } else {
      p.set('from', new Date(r.from_ms).toISOString());
      p.set('to', new Date(r.to_ms).toISOString());
    }
    const q = p.toString();
    return location.pathname + (q ? '?' + q : '');
  }

  // Promise.allSettled(reqs), or null when the answers came too late: the
  // user signed out or went to another page meanwhile (nothing to draw).
  async function settle(reqs) {
    const gen = state.generation;
    const route = state.routeGen;
    const res = await Promise.allSettled(reqs);
    return gen === state.generation && route === state.routeGen ? res : null;
  }

  Object.assign(window.GPO, {
    TOKEN_KEY, POLL_MS, MAX_ROWS, PALETTE, RANGES, state, $, AuthError, ApiError,
    el, badge, msg, table, link, jobLink, nodeLink, nodeLinks, reasonCell, ENDED_STATES, stateBadge,
    localInput,
    isNum, fmtPct, fmtFrac, fmtMoney, fmtHours, fmtGiB, fmtShares, fmtDuration, fmtTime,
    fmtSeconds, serverNow, since, gpusHeld, classOf, gpusOf, utilClass, bar,
    api, apiRaw, fetchJobs, failure, setPanel, settle, refreshNow: () => {},
    chartMessage, renderChart, resizeCharts, dropCharts,
    pages, register, navigate, setOnRoute: (fn) => { onRoute = fn; },
    currentRange, rangeQuery, rangeHref, stepFor,
  });
})();
