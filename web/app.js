/*
 * gpuorch dashboard (docs/dashboard.md). Plain JS, no framework: it asks for an
 * API token, keeps it in sessionStorage, and polls the API every few seconds
 * with it. Everything the API says is put in the page with textContent (never
 * innerHTML): job names, reasons and node names come from users.
 *
 * Each panel draws from its own request, so one API that fails or is not there
 * (404: an older controller) leaves the others working. A 401 from any of
 * them means the token is no longer good: back to the sign-in form.
 *
 * For tests and the load benchmark: <html data-loaded="1"> once the first data
 * is painted (with a performance mark "gpuorch-loaded"), data-polls counts the
 * refreshes, and each chart's element carries data-points (values drawn).
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
    charts: {}, // element id -> {plot, keys}
    lastOk: 0,
    svcHist: {t: [], byName: {}}, // what the services did while this page was open
  };
  window.gpuorchDash = state;

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

  async function api(path) {
    const gen = state.generation;
    const r = await fetch(path, {
      headers: {Authorization: 'Bearer ' + state.token, Accept: 'application/json'},
      cache: 'no-store',
      credentials: 'omit',
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
    return r.json();
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
    $(id).replaceChildren(node);
  }

  // -- Panels. -------------------------------------------------------------------------

  function renderTiles(nodes, jobs, cost) {
    if (nodes) {
      const up = nodes.filter((n) => n.state === 'up').length;
      setTile('t-nodes', String(up), '/ ' + nodes.length);
      let total = 0;
      let sum = 0;
      let count = 0;
      for (const n of nodes) {
        total += (n.gpus || []).length;
        for (const g of n.gpu_samples || []) {
          if (isNum(g.utilization_pct)) {
            sum += g.utilization_pct;
            count++;
          }
        }
      }
      // GPUs in use in GPU shares (a GPU holding only a 0.25 job is 0.25), as the
      // server counts them for everyone (docs/monitoring.md); a member's jobs list
      // has its own team's only, so the jobs' shares are only a fallback.
      const counted = nodes.every((n) => isNum(n.gpus_in_use));
      const busy = counted ? nodes.reduce((s, n) => s + n.gpus_in_use, 0)
        : jobs ? jobs.reduce((s, j) => s + ((j.current_attempt && j.current_attempt.gpu_shares) || 0), 0)
          : null;
      setTile('t-gpus', fmtShares(busy), '/ ' + total);
      setTile('t-util', count ? fmtPct(sum / count) : '-');
    }
    if (jobs) {
      setTile('t-running', String(jobs.filter((j) => j.state === 'RUNNING').length));
      setTile('t-pending', String(jobs.filter((j) => j.state === 'PENDING').length));
      setTile('t-idle', String(jobs.filter((j) => j.idle).length));
    }
    setTile('t-rate', cost && isNum(cost.rate_per_hour) ? fmtMoney(cost.rate_per_hour) : '-');
  }

  function setTile(id, value, of) {
    const t = $(id);
    t.replaceChildren(document.createTextNode(value));
    if (of) t.appendChild(el('span', 'of', ' ' + of));
  }

  // uuid -> [job, ...] from the running jobs' current attempts.
  function busyGpus(jobs) {
    const m = new Map();
    for (const j of jobs) {
      const a = j.current_attempt;
      if (!a) continue;
      for (const u of a.gpus || []) {
        if (!m.has(u)) m.set(u, []);
        m.get(u).push(j);
      }
    }
    return m;
  }

  function nodeState(s) {
    const color = {up: 'green', draining: 'yellow', drained: 'yellow', down: 'red'}[s] || 'muted';
    return badge(s || '?', color);
  }

  // A MIG GPU's instances, one line each: PROFILE@SLOT and its job (or free).
  function migList(g, mode) {
    const box = el('div', 'gpu-mig');
    const pending = !!g.mig_pending !== !!g.mig_enabled;
    box.appendChild(el('div', 'muted', 'MIG ' + (mode || 'off') +
      (pending ? (g.mig_pending ? ', on after a reset' : ', off after a reset') : '') +
      (g.mig_planning ? ', repartitioning' : '')));
    for (const m of g.mig_enabled ? g.mig || [] : []) {
      const who = isNum(m.job) ? 'job ' + m.job : m.in_use ? 'in use' : m.uuid ? 'free' : 'no device';
      box.appendChild(el('div', isNum(m.job) || m.in_use ? 'gpu-job' : 'gpu-free',
        (m.profile || 'profile ' + m.profile_id) + '@' + m.start + ' ' + who));
    }
    return box;
  }

  function gpuCard(g, sample, jobsOn, dirty, migMode) {
    const card = el('div', 'gpu' + (jobsOn.length || g.in_use ? ' busy' : '') + (dirty ? ' dirty' : ''));
    const top = card.appendChild(el('div', 'gpu-top'));
    top.appendChild(el('span', '', 'GPU ' + g.index));
    top.appendChild(el('span', 'gpu-type', g.gpu_type));
    const util = sample ? sample.utilization_pct : null;
    const used = sample ? sample.memory_used_mib : null;
    const totalMem = sample && isNum(sample.memory_total_mib) ? sample.memory_total_mib : g.mem_mib;
    card.appendChild(bar(utilClass(util), util));
    card.appendChild(bar('bar mem', isNum(used) && totalMem ? (100 * used) / totalMem : 0));
    const fig = card.appendChild(el('div', 'gpu-top'));
    fig.appendChild(el('span', '', fmtPct(util)));
    fig.appendChild(el('span', 'muted', fmtGiB(used) + ' / ' + fmtGiB(totalMem) + ' GiB'));
    if (g.mig_enabled || g.mig_pending) {
      card.appendChild(migList(g, migMode));
    } else if (jobsOn.length) {
      card.appendChild(el('div', 'gpu-job', jobsOn.map((j) => 'job ' + j.id + ' ' +
        (j.spec && j.spec.name ? j.spec.name : '')).join(', ')));
      // A GPU shared by fractions: how much of it is in use (the tile counts that).
      if (isNum(g.share_in_use) && g.share_in_use < 1) {
        card.appendChild(el('div', 'muted gpu-share', fmtShares(g.share_in_use) + ' of the GPU in use'));
      }
    } else if (g.in_use) {
      // Held by a job this token may not see (another team's, while private_data keeps jobs).
      card.appendChild(el('div', 'gpu-job', 'in use'));
    } else {
      card.appendChild(el('div', 'gpu-free', dirty ? 'held: stray processes' : 'free'));
    }
    card.title = g.uuid || '';
    return card;
  }

  function renderNodes(nodes, jobs) {
    if (!nodes.length) {
      setPanel('nodes', msg('no nodes have joined yet'));
      $('nodes-note').textContent = '';
      return;
    }
    const busy = jobs ? busyGpus(jobs) : new Map();
    const rows = nodes.slice().sort((a, b) => (a.name < b.name ? -1 : a.name > b.name ? 1 : 0));
    const t = table([
      {h: 'Node', cls: 'node-name', cell: (n) => {
        const d = el('div');
        d.appendChild(el('div', '', n.name));
        d.appendChild(el('div', 'muted', n.pool || ''));
        return d;
      }},
      {h: 'State', cell: (n) => nodeState(n.state)},
      {h: 'GPUs', cell: (n) => {
        const samples = new Map((n.gpu_samples || []).map((s) => [s.uuid, s]));
        const dirty = new Set(n.dirty_gpus || []);
        const box = el('div', 'gpus');
        for (const g of (n.gpus || []).slice().sort((a, b) => a.index - b.index))
          box.appendChild(gpuCard(g, samples.get(g.uuid), busy.get(g.uuid) || [], dirty.has(g.uuid),
            n.mig_mode));
        if (!(n.gpus || []).length) box.appendChild(el('span', 'muted', 'no GPUs'));
        return box;
      }},
      {h: 'Heartbeat', cls: 'muted', cell: (n) => (n.last_heartbeat ? fmtDuration(since(n.last_heartbeat)) + ' ago' : '-')},
    ], rows);
    setPanel('nodes', t);
    const gpus = nodes.reduce((s, n) => s + (n.gpus || []).length, 0);
    $('nodes-note').textContent = `${nodes.length} nodes, ${gpus} GPUs`;
  }

  // "resources: no free GPU of type H100 in pool main" -> a badge and the sentence.
  function reasonCell(text) {
    const d = el('span');
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
      dependency: 'muted', array_limit: 'muted', budget: 'red'}[m[1]] || 'muted';
    d.appendChild(badge(m[1], color));
    d.appendChild(document.createTextNode(m[2]));
    return d;
  }

  function specName(j) {
    return j.spec && j.spec.name ? j.spec.name : '';
  }

  function renderQueue(jobs) {
    const pending = jobs.filter((j) => j.state === 'PENDING')
      .sort((a, b) => Date.parse(a.submitted_at) - Date.parse(b.submitted_at) || a.id - b.id);
    $('queue-note').textContent = pending.length ? pending.length + ' waiting' : '';
    if (!pending.length) {
      setPanel('queue', msg('no job is waiting'));
      return;
    }
    setPanel('queue', table([
      {h: 'ID', num: true, cls: 'mono', cell: (j) => j.id},
      {h: 'Name', cell: specName},
      {h: 'Team', cell: (j) => j.team},
      {h: 'User', cell: (j) => j.user},
      {h: 'Priority', cell: classOf},
      {h: 'GPUs', num: true, cell: (j) => gpusOf(j.spec)},
      {h: 'Waiting', num: true, cell: (j) => fmtDuration(since(j.submitted_at))},
      {h: 'Reason', cls: 'reason', cell: (j) => reasonCell(j.wait_reason)},
      {h: 'Est. start', num: true, cell: (j) => fmtTime(j.estimated_start)},
    ], pending));
  }

  function idleCell(j) {
    if (!j.idle) return el('span', 'muted', '-');
    return badge('IDLE', 'orange');
  }

  function renderRunning(jobs) {
    const running = jobs.filter((j) => j.state === 'RUNNING').sort((a, b) => a.id - b.id);
    $('running-note').textContent = running.length ? running.length + ' running' : '';
    if (!running.length) {
      setPanel('running', msg('no job is running'));
      return;
    }
    setPanel('running', table([
      {h: 'ID', num: true, cls: 'mono', cell: (j) => j.id},
      {h: 'Name', cell: specName},
      {h: 'Team', cell: (j) => j.team},
      {h: 'User', cell: (j) => j.user},
      {h: 'Project', cell: (j) => (j.spec && j.spec.project) || '-'},
      {h: 'Model', cell: (j) => (j.spec && j.spec.model) || '-'},
      {h: 'State', cell: (j) => {
        const s = j.current_attempt ? j.current_attempt.state : j.state;
        return badge(s, s === 'RUNNING' ? 'green' : s === 'KILLING' ? 'red' : 'blue');
      }},
      {h: 'GPUs', num: true, cell: gpusHeld},
      {h: 'Nodes', cell: (j) => (j.current_attempt ? (j.current_attempt.nodes || []).join(', ') : '-')},
      {h: 'GPU util', num: true, cell: (j) => fmtPct(j.gpu_utilization_pct)},
      {h: 'GPU mem', num: true, cell: (j) => (isNum(j.gpu_memory_used_mib) ? fmtGiB(j.gpu_memory_used_mib) + ' GiB' : '-')},
      {h: 'Cost', num: true, cell: (j) => fmtMoney(j.cost)},
      {h: 'Idle', cell: idleCell},
    ], running));
  }

  function renderIdle(jobs) {
    const idle = jobs.filter((j) => j.state === 'RUNNING' && j.idle);
    if (!idle.length) {
      setPanel('idle', msg('no job holds idle GPUs'));
      return;
    }
    setPanel('idle', table([
      {h: 'ID', num: true, cls: 'mono', cell: (j) => j.id},
      {h: 'Name', cell: specName},
      {h: 'Team', cell: (j) => j.team},
      {h: 'User', cell: (j) => j.user},
      {h: 'GPUs', num: true, cell: gpusHeld},
      {h: 'GPU util', num: true, cell: (j) => fmtPct(j.gpu_utilization_pct)},
      {h: 'Idle for', num: true, cell: (j) => (j.idle.since ? fmtDuration(since(j.idle.since)) : '-')},
      {h: 'Action', cell: (j) => {
        const a = j.idle.action || 'report';
        return badge(a, a === 'report' ? 'muted' : 'red');
      }},
      {h: 'Action at', num: true, cell: (j) => fmtTime(j.idle.action_at)},
    ], idle));
  }

  function renderCost(cost) {
    const rows = (cost.rows || []).slice().sort((a, b) => (b.cost || 0) - (a.cost || 0));
    if (!rows.length) {
      setPanel('cost', msg('nothing charged in this period'));
      return;
    }
    const total = cost.total || {};
    const cols = [
      {h: cost.by || state.costBy, key: 'key', cell: (r) => (r.key === null || r.key === '' ? '(none)' : r.key)},
      {h: 'GPU-hours', num: true, key: 'gpu_hours', f: fmtHours, cell: (r) => fmtHours(r.gpu_hours)},
      {h: 'Cost', num: true, key: 'cost', f: fmtMoney, cell: (r) => fmtMoney(r.cost)},
      {h: 'Util', num: true, key: 'utilization_pct', f: fmtPct, cell: (r) => fmtPct(r.utilization_pct)},
      {h: 'Idle share', num: true, key: 'idle_pct', f: fmtPct, cell: (r) => fmtPct(r.idle_pct)},
      {h: 'Waste', num: true, key: 'waste_cost', f: fmtMoney, cell: (r) => fmtMoney(r.waste_cost)},
      {h: 'Failed', num: true, key: 'failed_cost', f: fmtMoney, cell: (r) => fmtMoney(r.failed_cost)},
    ];
    setPanel('cost', table(cols, rows, (c) => (c.key === 'key' ? 'total' : c.f(total[c.key]))));
  }

  function renderBudgets(budgets) {
    const list = Array.isArray(budgets) ? budgets : budgets.budgets || [];
    if (!list.length) {
      setPanel('budgets', msg('no team has a budget'));
      return;
    }
    setPanel('budgets', table([
      {h: 'Team', cell: (b) => b.team},
      {h: 'Month', cell: (b) => b.month},
      {h: 'Spent', num: true, cell: (b) => fmtMoney(b.spent)},
      {h: 'Budget', num: true, cell: (b) => fmtMoney(b.monthly)},
      {h: 'Used', cell: (b) => {
        const d = el('span');
        const m = d.appendChild(el('span', 'meter' + (b.over ? ' over' : b.alert ? ' warn' : '')));
        m.appendChild(el('span')).style.width = Math.min(100, 100 * (b.fraction || 0)).toFixed(1) + '%';
        d.appendChild(document.createTextNode(fmtFrac(b.fraction)));
        return d;
      }},
      {h: '', cell: (b) => (b.over ? badge('over', 'red') : b.alert ? badge('alert', 'orange') : '')},
    ], list));
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

  const CHARTS = [
    {id: 'chart-util-node', path: '/v1/metrics/series?metric=gpu_util&by=node&since=-15m&step=5s', unit: '%', range: [0, 100]},
    {id: 'chart-util-team', path: '/v1/metrics/series?metric=gpu_util&by=team&since=-15m&step=5s', unit: '%', range: [0, 100]},
    {id: 'chart-queue', path: '/v1/metrics/series?metric=queue_length&by=team&since=-15m&step=5s', unit: '', range: null},
  ];

  function resizeCharts() {
    for (const id of Object.keys(state.charts)) {
      const box = $(id);
      state.charts[id].plot.setSize({width: Math.max(200, box.clientWidth - 16), height: 200});
    }
  }


  // -- Services (docs/dashboard.md): GET /v1/services each refresh. ------------------

  const SVC_HISTORY_MS = 15 * 60 * 1000;
  const SVC_RATE_MIN_MS = 5000; // cost per hour: from the cost's growth over at least this
  const SVC_RATE_MAX_MS = 60000; // ... and at most this

  // The history the page keeps of each service, one point a refresh: t in seconds (uPlot's).
  function recordServices(services) {
    const h = state.svcHist;
    const now = serverNow();
    h.t.push(now / 1000);
    const n = h.t.length;
    for (const s of services) {
      const st = s.status || {};
      let e = h.byName[s.name];
      if (!e) {
        e = h.byName[s.name] = {ready: [], desired: [], rps: [], p50: [], p99: [], cost: []};
        for (const k of Object.keys(e)) e[k] = new Array(n - 1).fill(null);
      }
      const obs = st.observed || {};
      e.ready.push(isNum(st.ready) ? st.ready : null);
      e.desired.push(isNum(st.desired) ? st.desired : null);
      e.rps.push(isNum(obs.rps) ? obs.rps : null);
      const lat = obs.latency || {};
      e.p50.push(isNum(lat.p50_s) ? lat.p50_s : null);
      e.p99.push(isNum(lat.p99_s) ? lat.p99_s : null);
      e.cost.push(st.cost && isNum(st.cost.cost) ? st.cost.cost : null);
    }
    for (const e of Object.values(h.byName)) {
      for (const k of Object.keys(e)) while (e[k].length < n) e[k].push(null);
    }
    // Forget what is older than the window, and services gone from all of it.
    let drop = 0;
    while (drop < h.t.length - 1 && now / 1000 - h.t[drop] > SVC_HISTORY_MS / 1000) drop++;
    if (drop) {
      h.t.splice(0, drop);
      for (const e of Object.values(h.byName)) for (const k of Object.keys(e)) e[k].splice(0, drop);
    }
    for (const [name, e] of Object.entries(h.byName)) {
      if (e.ready.every((v) => v === null) && e.rps.every((v) => v === null) &&
          e.p99.every((v) => v === null)) delete h.byName[name];
    }
  }

  function clearServiceHistory() {
    state.svcHist = {t: [], byName: {}};
  }

  // Cost per hour from how the service's cost grew over the last minute; null until known.
  function costRate(name) {
    const h = state.svcHist;
    const e = h.byName[name];
    if (!e) return null;
    const last = h.t.length - 1;
    if (last < 1 || e.cost[last] === null) return null;
    let from = -1;
    for (let i = last - 1; i >= 0; i--) {
      const dt = (h.t[last] - h.t[i]) * 1000;
      if (dt > SVC_RATE_MAX_MS) break;
      if (e.cost[i] !== null && dt >= SVC_RATE_MIN_MS) from = i;
    }
    if (from < 0) return null;
    const hours = (h.t[last] - h.t[from]) / 3600;
    return Math.max(0, (e.cost[last] - e.cost[from]) / hours);
  }

  function replicaCell(st) {
    const d = el('span');
    const counts = {};
    for (const r of st.replicas || []) counts[r.state] = (counts[r.state] || 0) + 1;
    const colors = {ready: 'green', starting: 'blue', draining: 'yellow', failed: 'red'};
    for (const k of ['ready', 'starting', 'draining', 'failed']) {
      if (counts[k]) d.appendChild(badge(counts[k] + ' ' + k, colors[k]));
    }
    // A replica that cannot start yet says why, as a waiting job does.
    const waiting = (st.replicas || []).find((r) => r.state === 'starting' && r.reason);
    if (waiting) d.appendChild(el('div', 'muted', waiting.reason));
    if (!d.childNodes.length) d.appendChild(el('span', 'muted', 'none'));
    return d;
  }

  function decisionCell(st) {
    const d = el('span');
    if (st.backoff) {
      d.appendChild(badge('backoff', 'red'));
      d.appendChild(document.createTextNode(st.backoff.reason || 'crash loop'));
      return d;
    }
    if (st.blocked) {
      d.appendChild(badge('blocked', 'red'));
      d.appendChild(document.createTextNode(st.blocked));
      return d;
    }
    const dec = st.decision;
    if (!dec || !dec.reason) {
      d.appendChild(el('span', 'muted', 'none yet'));
      return d;
    }
    if (dec.panic) d.appendChild(badge('panic', 'orange'));
    d.appendChild(document.createTextNode(dec.reason));
    if (isNum(dec.at_ms) && dec.at_ms > 0) {
      d.appendChild(el('span', 'muted', ' (' + fmtDuration(serverNow() - dec.at_ms) + ' ago)'));
    }
    return d;
  }

  function inflightOf(st) {
    if (!Array.isArray(st.replicas)) return null;
    return st.replicas.reduce((sum, r) => sum + (isNum(r.inflight) ? r.inflight : 0), 0);
  }

  function renderServices(services) {
    const rows = services.slice().sort((a, b) => (a.name < b.name ? -1 : a.name > b.name ? 1 : 0));
    const ready = rows.reduce((n, s) => n + ((s.status && s.status.ready) || 0), 0);
    const desired = rows.reduce((n, s) => n + ((s.status && s.status.desired) || 0), 0);
    $('services-note').textContent = `${rows.length} services, ${ready} of ${desired} replicas ready`;
    setPanel('services', table([
      {h: 'Service', cell: (s) => s.name},
      {h: 'Model', cell: (s) => s.model || '-'},
      {h: 'Team', cell: (s) => s.team || '-'},
      {h: 'Ready', num: true, cell: (s) => {
        const st = s.status || {};
        return (isNum(st.ready) ? st.ready : '-') + ' / ' + (isNum(st.desired) ? st.desired : '-');
      }},
      {h: 'Min-max', num: true, cell: (s) => (isNum(s.min) ? s.min : 0) + '-' + (isNum(s.max) ? s.max : '-')},
      {h: 'Replicas', cell: (s) => replicaCell(s.status || {})},
      {h: 'In flight', num: true, cell: (s) => {
        const st = s.status || {};
        const n = inflightOf(st);
        const q = st.observed && isNum(st.observed.queued) ? st.observed.queued : 0;
        return n === null ? '-' : q > 0 ? `${n} (+${q} queued)` : String(n);
      }},
      {h: 'Req/s', num: true, cell: (s) => {
        const o = (s.status || {}).observed || {};
        return isNum(o.rps) ? o.rps.toFixed(o.rps < 10 ? 1 : 0) : '-';
      }},
      {h: 'p50 / p99', num: true, cell: (s) => {
        const lat = ((s.status || {}).observed || {}).latency;
        return lat && isNum(lat.p50_s) && isNum(lat.p99_s)
          ? fmtSeconds(lat.p50_s) + ' / ' + fmtSeconds(lat.p99_s) : '-';
      }},
      {h: 'Cost / hour', num: true, cell: (s) => fmtMoney(costRate(s.name))},
      {h: 'Last decision', cls: 'decision', cell: (s) => decisionCell(s.status || {})},
    ], rows));
  }

  // Chart bodies, as /v1/metrics/series gives them, from the page's history.
  function serviceCharts() {
    const h = state.svcHist;
    const names = Object.keys(h.byName).sort();
    const replicas = [];
    for (const n of names) {
      replicas.push({key: n, values: h.byName[n].ready});
      replicas.push({key: n + ' desired', values: h.byName[n].desired});
    }
    const rps = names.map((n) => ({key: n, values: h.byName[n].rps}));
    // One colour per service on both charts; its desired count dashed, in the same colour.
    const colorOf = (k) => Math.max(0, names.indexOf(k.replace(/ desired$/, '')));
    renderChart('chart-svc-replicas', {t: h.t, series: replicas}, '', null,
      {colorOf, dashOf: (k) => / desired$/.test(k)});
    renderChart('chart-svc-rps', {t: h.t, series: rps}, '', null, {colorOf});
    const latency = [];
    for (const n of names) {
      latency.push({key: n + ' p50', values: h.byName[n].p50});
      latency.push({key: n + ' p99', values: h.byName[n].p99});
    }
    const latColor = (k) => Math.max(0, names.indexOf(k.replace(/ p(50|99)$/, '')));
    renderChart('chart-svc-latency', {t: h.t, series: latency}, '', null,
      {colorOf: latColor, dashOf: (k) => / p99$/.test(k)});
  }

  // Seconds as people read a latency: "43 ms", "1.2 s".
  function fmtSeconds(s) {
    if (s < 1) return (s * 1000).toFixed(s < 0.01 ? 1 : 0) + ' ms';
    return s.toFixed(s < 10 ? 1 : 0) + ' s';
  }

  // The block shows only when there are services: none, or a controller without
  // the API (404), hides it; another failure shows in it when it was shown.
  function showServices(r) {
    const block = $('services-block');
    const list = r.status === 'fulfilled' ? (r.value && r.value.services) || [] : null;
    if (list && list.length) {
      recordServices(list);
      block.hidden = false;
      renderServices(list);
      serviceCharts();
      return;
    }
    if (list || (r.reason instanceof ApiError && r.reason.status === 404) || block.hidden) {
      block.hidden = true;
      clearServiceHistory();
      for (const id of ['chart-svc-replicas', 'chart-svc-rps', 'chart-svc-latency']) chartMessage(id, 'no data yet');
      return;
    }
    setPanel('services', failure(r.reason));
  }

  // -- The refresh cycle. --------------------------------------------------------------

  async function refresh() {
    const gen = state.generation;
    const costBy = state.costBy;
    const reqs = [
      api('/v1/nodes'),
      fetchJobs(),
      api('/v1/cost?by=' + encodeURIComponent(costBy)),
      api('/v1/budgets'),
      api('/v1/services'),
    ].concat(CHARTS.map((c) => api(c.path)));
    const res = await Promise.allSettled(reqs);
    if (gen !== state.generation) return;
    if (res.some((r) => r.status === 'rejected' && r.reason instanceof AuthError)) {
      signOut('Your session ended: the server no longer accepts this token (401). Sign in again.');
      return;
    }
    const val = (r) => (r.status === 'fulfilled' ? r.value : null);
    const [nodesR, jobsR, costR, budgetsR, servicesR] = res;
    const nodes = val(nodesR) ? val(nodesR).nodes || [] : null;
    const jobs = val(jobsR);

    if (nodes) renderNodes(nodes, jobs);
    else setPanel('nodes', failure(nodesR.reason));
    if (jobs) {
      renderQueue(jobs);
      renderRunning(jobs);
      renderIdle(jobs);
    } else {
      for (const id of ['queue', 'running', 'idle']) setPanel(id, failure(jobsR.reason));
    }
    if (val(costR)) renderCost(val(costR));
    else setPanel('cost', failure(costR.reason));
    if (val(budgetsR)) renderBudgets(val(budgetsR));
    else setPanel('budgets', failure(budgetsR.reason));
    renderTiles(nodes, jobs, val(costR));
    showServices(servicesR);

    CHARTS.forEach((c, i) => {
      const r = res[5 + i];
      if (r.status === 'fulfilled') renderChart(c.id, r.value, c.unit, c.range);
      else if (r.reason instanceof ApiError && r.reason.status === 404) chartMessage(c.id, 'not available');
      else chartMessage(c.id, 'could not load: ' + (r.reason && r.reason.message), true);
    });

    const allFailed = res.every((r) => r.status === 'rejected');
    if (!allFailed) state.lastOk = Date.now();
    state.polls++;
    document.documentElement.dataset.polls = String(state.polls);
    showStatus(allFailed);
    if (!document.documentElement.dataset.loaded) {
      document.documentElement.dataset.loaded = '1';
      performance.mark('gpuorch-loaded');
    }
  }

  function showStatus(failed) {
    const s = $('status');
    s.hidden = false;
    const stale = failed || Date.now() - state.lastOk > 3 * POLL_MS;
    s.className = stale ? 'status stale' : 'status';
    s.textContent = stale ? 'cannot reach the server' : 'live';
    const u = $('updated');
    u.hidden = !state.lastOk;
    if (state.lastOk) u.textContent = 'updated ' + new Date(state.lastOk).toLocaleTimeString();
  }

  function schedule() {
    clearTimeout(state.timer);
    state.timer = setTimeout(tick, POLL_MS);
  }

  async function tick() {
    if (!state.token || state.running) return;
    if (document.hidden) {
      schedule(); // no point polling for a tab nobody looks at
      return;
    }
    state.running = true;
    try {
      await refresh();
    } catch (e) {
      showStatus(true);
    } finally {
      state.running = false;
      if (state.token) schedule();
    }
  }

  // -- Sign in and out. ----------------------------------------------------------------

  function showLogin(message) {
    $('dash').hidden = true;
    $('logout').hidden = true;
    $('who').hidden = true;
    $('status').hidden = true;
    $('updated').hidden = true;
    $('login').hidden = false;
    const e = $('login-error');
    e.hidden = !message;
    e.textContent = message || '';
    $('token').value = '';
    $('token').focus();
  }

  function signOut(message) {
    state.generation++;
    state.token = null;
    clearTimeout(state.timer);
    try {
      sessionStorage.removeItem(TOKEN_KEY);
    } catch (e) { /* storage disabled: nothing kept */ }
    for (const id of Object.keys(state.charts)) chartMessage(id, 'no data yet');
    clearServiceHistory();
    $('services-block').hidden = true;
    showLogin(message);
  }

  async function signIn(token, fromStorage) {
    state.generation++;
    state.token = token;
    let me;
    try {
      me = await api('/v1/whoami');
    } catch (e) {
      state.token = null;
      if (e instanceof AuthError) {
        try {
          sessionStorage.removeItem(TOKEN_KEY);
        } catch (x) { /* nothing kept */ }
        showLogin(fromStorage ? 'Your session ended: the server no longer accepts this token (401). Sign in again.'
          : 'The server did not accept this token (401). Check it and try again.');
      } else {
        showLogin('Could not reach the server: ' + (e && e.message ? e.message : String(e)));
      }
      return;
    }
    try {
      sessionStorage.setItem(TOKEN_KEY, token);
    } catch (e) { /* storage disabled: the token lives until a reload */ }
    const who = $('who');
    who.replaceChildren(document.createTextNode(me.name || '?'));
    who.appendChild(el('span', 'role', me.role === 'admin' ? '(admin)' : me.team ? '(' + me.team + ')' : ''));
    who.hidden = false;
    $('logout').hidden = false;
    $('login').hidden = true;
    $('dash').hidden = false;
    await tick();
  }

  function init() {
    $('login-form').addEventListener('submit', (ev) => {
      ev.preventDefault();
      const token = $('token').value.trim();
      if (!token) {
        showLogin('Enter an API token.');
        return;
      }
      const btn = $('login-submit');
      btn.disabled = true;
      signIn(token, false).finally(() => {
        btn.disabled = false;
      });
    });
    $('logout').addEventListener('click', () => signOut(''));
    $('cost-by').addEventListener('click', (ev) => {
      const by = ev.target && ev.target.dataset ? ev.target.dataset.by : null;
      if (!by || by === state.costBy) return;
      state.costBy = by;
      for (const b of $('cost-by').querySelectorAll('button')) b.classList.toggle('on', b.dataset.by === by);
      setPanel('cost', msg('loading...'));
      tick();
    });
    document.addEventListener('visibilitychange', () => {
      if (!document.hidden && state.token) tick();
    });
    if (typeof ResizeObserver === 'function') new ResizeObserver(resizeCharts).observe($('dash'));
    else window.addEventListener('resize', resizeCharts);

    let saved = null;
    try {
      saved = sessionStorage.getItem(TOKEN_KEY);
    } catch (e) { /* storage disabled */ }
    if (saved) signIn(saved, true);
    else showLogin('');
  }

  init();
})();
