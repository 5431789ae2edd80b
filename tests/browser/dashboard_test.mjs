#!/usr/bin/env node
// dashboard_test.mjs GPUORCH - the dashboard end to end, in Debian's headless
// Chromium (/usr/bin/chromium) driven by playwright-core: a real `gpuorch server`
// (temporary data directory, an ephemeral port on 127.0.0.1), two real
// `gpuorch agent`s on the fake NVML ($GPUORCH_FAKENVML, else
// BUILD/tests/libnvidia-ml.so.1), a team and a member whose jobs really run
// (`sleep`, as gpuorch-test1: needs root and that account, else the jobs only
// wait in the queue, which the test checks instead).
//
// The page: served without a token with its security headers; the sign-in
// form; a wrong token refused with the page's message; the admin's token
// accepted (the user named, status live). Then what the page shows, read from
// its DOM and compared with the API: each job's row (id, name, team, user,
// state, GPUs, nodes, utilization; a waiting job's reason badge and sentence);
// both nodes with their 4 GPU cards, the fake NVML's scripted utilization and
// the job on each busy GPU; the tiles (nodes up, GPUs in use, mean
// utilization, running, pending, idle, cost rate), GPUs in use counted in GPU
// shares (jobs of 2, 1 and 0.25 GPUs: 3.25, as the nodes' gpus_in_use and
// /metrics say); the default priority class shown by name in the queue; the cost panel's teams; the
// utilization chart's series per node, whose latest points are the nodes'
// scripted means, and the queue chart's. A second job gets its row by the
// page's own polling (same document: no reload). The Services panel: hidden
// while the controller has no service (or no such route); with a stand-in answer
// to the page's GET /v1/services (page.route, the contract's JSON, figures that
// grow with each answer) its rows, note, cost per hour and two charts; nothing
// cut off at 1,280 and 420 px; hidden again when the services go. The whole
// dashboard's layout at 1,280 and 420 px, measured in the page: nothing
// overflows its panel, no panel scrolls sideways, each wait reason at most two
// lines tall at 1,280 px (screenshots dashboard-1280.png and dashboard-420.png
// beside the full one); the utilization-by-team line unbroken across steps
// without a value. A token the server no longer
// accepts sends the page back to the form with the session-ended message. No
// CSP violation and no script error along the way. A full-page screenshot goes
// to $MESON_BUILD_ROOT/meson-logs/dashboard.png (else the temporary directory,
// kept then); its path is printed. Prints TAP. Children are stopped by PID;
// KEEP_TMP=1 keeps the temporary directory.

import fs from 'node:fs';
import path from 'node:path';
import * as H from './harness.mjs';

const NODE_GPUS = 4;
const JOB_USER = 'gpuorch-test1';

const {ok, diag, sleep, waitUntil} = H; // TAP and polling (a 30 s deadline)

// The cluster (harness.mjs): it prints a TAP skip and exits without the binary,
// Chromium or playwright-core.
const cluster = new H.Cluster(process.argv[2], 'dash');
const {chromium} = cluster;
const BIN = cluster.bin;
const TMP = cluster.tmp;
let port = null;
let admin = null;
const logTail = (name) => cluster.logTail(name);
const call = (method, p, body, token = admin) => cluster.call(method, p, body, token);
const put = (p, body) => cluster.put(p, body);
const gpuUuid = (nodeNo, index) => cluster.gpuUuid(nodeNo, index);

// uuid -> the utilization the fake NVML reports for it; node name -> its GPUs' mean.
const SCRIPTED_UTIL = {};
const NODE_MEAN_UTIL = {};
const meanOf = (node) => NODE_MEAN_UTIL[node];

function startAgent(name, nodeNo, utils) {
  utils.forEach((u, i) => {
    SCRIPTED_UTIL[gpuUuid(nodeNo, i)] = u;
  });
  NODE_MEAN_UTIL[name] = utils.reduce((a, b) => a + b, 0) / utils.length;
  cluster.startAgent(name, nodeNo, utils.length, utils.map((u) => ({utilization: u,
    memory_utilization: Math.round(u / 2), power_mw: 80000 + u * 5000, temperature_c: 30 + Math.round(u / 3),
    process_memory_mib: 20480})));
}

async function startServer() {
  await cluster.startServer();
  port = cluster.port;
  admin = cluster.admin;
}

const userExists = H.userExists;

// Where the screenshot goes: $DASHBOARD_SCREENSHOT; else the build's meson-logs
// ($MESON_BUILD_ROOT, or the directory of the binary when it has meson-logs);
// else the temporary directory, which is then kept.
function screenshotPath() {
  if (process.env.DASHBOARD_SCREENSHOT) return path.resolve(process.env.DASHBOARD_SCREENSHOT);
  for (const dir of [process.env.MESON_BUILD_ROOT, path.dirname(BIN)]) {
    if (dir && fs.existsSync(path.join(dir, 'meson-logs'))) return path.join(dir, 'meson-logs', 'dashboard.png');
  }
  process.env.KEEP_TMP = '1';
  return path.join(TMP, 'dashboard.png');
}

// -- The checks. -----------------------------------------------------------------------

async function checkServedPage() {
  const r = await fetch(`http://127.0.0.1:${port}/`);
  const body = await r.text();
  const csp = r.headers.get('content-security-policy') || '';
  ok(r.status === 200 && (r.headers.get('content-type') || '').startsWith('text/html') &&
     body.includes('id="login-form"') && body.includes('uPlot') && !/<script[^>]*src=/.test(body),
  'GET / without a token: 200, text/html, one page with uPlot and the app inlined',
  `${r.status} ${r.headers.get('content-type')} ${body.length} bytes`);
  ok(/script-src 'sha256-[^']+'/.test(csp) && !csp.includes('unsafe') &&
     csp.includes("default-src 'none'") && csp.includes("connect-src 'self'") &&
     r.headers.get('x-content-type-options') === 'nosniff' &&
     (r.headers.get('cache-control') || '').includes('no-cache') && r.headers.get('etag'),
  'the page has a strict CSP (hashes, no unsafe-inline), nosniff, no-cache and an ETag',
  `CSP: ${csp}\nnosniff: ${r.headers.get('x-content-type-options')}`);
  const again = await fetch(`http://127.0.0.1:${port}/`, {headers: {'If-None-Match': r.headers.get('etag')}});
  ok(again.status === 304 && (await again.text()) === '', 'a reload with If-None-Match gets 304 and no body',
    String(again.status));
  const fav = await fetch(`http://127.0.0.1:${port}/favicon.ico`);
  ok(fav.status === 204, 'GET /favicon.ico: 204 (no 404 in the console)', String(fav.status));
  const api = await fetch(`http://127.0.0.1:${port}/v1/jobs`);
  ok(api.status === 401, 'the API behind it still needs a token (401 without)', String(api.status));
}

async function main() {
  const runsJobs = process.geteuid && process.geteuid() === 0 && userExists(JOB_USER);
  if (!runsJobs) diag(`not root or no ${JOB_USER}: jobs will wait in the queue instead of running`);
  await startServer();
  await put('/v1/pools/main', {description: 'H100 nodes'});
  await put('/v1/teams/research', {quotas: [{pool: 'main', guaranteed: 6, borrow_limit: 2}]});
  await put('/v1/teams/product', {quotas: [{pool: 'main', guaranteed: 2, borrow_limit: 0}]});
  await put('/v1/users/alice', {unix_user: JOB_USER, team: 'research', role: 'member'});
  const alice = (await call('POST', '/v1/users/alice/tokens?label=test')).json.token;
  startAgent('gpu-a', 1, [92, 71, 38, 5]);
  startAgent('gpu-b', 2, [64, 0, 17, 88]);
  const up = await waitUntil(async () => {
    const r = await call('GET', '/v1/nodes');
    const nodes = (r.json && r.json.nodes) || [];
    return nodes.length === 2 && nodes.every((n) => n.state === 'up' && (n.gpus || []).length === NODE_GPUS &&
      (n.gpu_samples || []).length === NODE_GPUS) ? nodes : null;
  });
  if (!ok(up, 'two agents on the fake NVML register (4 GPUs each) and send samples',
    logTail('server') + logTail('gpu-a'))) throw new Error('no agents');
  // A price, where this controller has them, so the cost panel has rows.
  const gpuType = up[0].gpus[0].gpu_type;
  const price = await call('PUT', '/v1/prices/' + encodeURIComponent(gpuType), {per_gpu_hour: 2.49});
  diag(`PUT /v1/prices/${gpuType}: ${price.status}`);
  await checkServedPage();

  const submit = async (spec) => {
    const body = Object.assign({team: 'research', command: ['sleep', '600'], cpus: 1, mem_mib: 256}, spec);
    const r = await call('POST', '/v1/jobs', body, runsJobs ? alice : admin);
    if (r.status !== 201) throw new Error(`submit: ${r.status} ${r.text}`);
    return r.json.id;
  };
  // Jobs that run (or wait, without root), and one that cannot fit: the queue has a reason.
  // A quarter of a GPU: a quarter of a GPU in use (tiles, top, /metrics).
  const first = [await submit({name: 'train-llm', gpus: 2, project: 'llm', model: 'llama-8b'}),
    await submit({name: 'eval-sweep', gpus: 1, project: 'eval'}),
    await submit({name: 'notebook', gpus: 0.25, project: 'eval'})];
  const big = await submit({name: 'big-pretrain', gpus: 8, project: 'llm', model: 'llama-70b'});
  // Over team product's quota (2 GPUs, no borrowing): it waits with a reason
  // longer than big-pretrain's, for the queue's Reason column.
  const over = await call('POST', '/v1/jobs', {team: 'product', name: 'product-train', gpus: 3,
    command: ['sleep', '600'], cpus: 1, mem_mib: 256});
  if (over.status !== 201) throw new Error(`submit: ${over.status} ${over.text}`);

  const browser = await chromium.launch({executablePath: H.CHROMIUM, headless: true,
    args: ['--no-sandbox', '--disable-gpu', '--disable-dev-shm-usage']});
  try {
    await browserChecks(browser, first, big, submit, runsJobs);
  } finally {
    await browser.close();
  }
}

// -- What the page shows, read from its DOM, and what it should show, from the API. ---------

// The page's number formats (web/js/core.js): what a user reads for a value.
const fmtPct = (v) => (typeof v === 'number' ? v.toFixed(v < 10 && v > 0 ? 1 : 0) + '%' : '-');
const fmtGiB = (mib) => (typeof mib === 'number' ? (mib / 1024).toFixed(mib < 10240 ? 1 : 0) : '-');
const fmtMoney = (v) => (typeof v === 'number'
  ? v.toLocaleString('en-US', {minimumFractionDigits: 2, maximumFractionDigits: 2}) : '-');

const tableRows = H.tableRows;

// The nodes panel: per node its name, pool, state badge, heartbeat and GPU cards.
function nodeRows(page) {
  return page.evaluate(() => [...document.querySelectorAll('#nodes tbody tr')].map((tr) => ({
    name: tr.cells[0].firstChild.firstChild.textContent,
    pool: tr.cells[0].querySelector('.muted').textContent,
    state: tr.cells[1].textContent,
    heartbeat: tr.cells[3].textContent,
    gpus: [...tr.querySelectorAll('.gpu')].map((g) => ({
      uuid: g.title,
      label: g.querySelector('.gpu-top span').textContent,
      type: g.querySelector('.gpu-type').textContent,
      util: g.querySelectorAll('.gpu-top')[1].firstChild.textContent,
      job: (g.querySelector('.gpu-job') || g.querySelector('.gpu-free')).textContent,
    })),
  })));
}

// The text of each summary tile.
function tiles(page) {
  return page.evaluate(() => Object.fromEntries([...document.querySelectorAll('.tile-value')]
    .map((t) => [t.id, t.textContent])));
}

// What uPlot holds for chart ID: the legend's series labels, the keys and values per series
// (data[1..]) and data-points.
function chartOf(page, id) {
  return page.evaluate((cid) => {
    const box = document.getElementById(cid);
    const c = window.gpuorchDash.charts[cid];
    if (!c || !box.querySelector('canvas')) return null;
    return {
      points: Number(box.dataset.points),
      legend: [...box.querySelectorAll('.u-legend .u-series .u-label')].map((l) => l.textContent),
      keys: c.keys,
      values: c.plot.data.slice(1).map((v) => Array.from(v)),
    };
  }, id);
}

const lastValue = (vals) => {
  const v = (vals || []).filter((x) => x !== null && x !== undefined);
  return v.length ? v[v.length - 1] : null;
};

// Compares the fields of WANT with GOT; the differences as text ('' when none).
function differences(want, got) {
  if (!got) return 'not shown';
  return Object.keys(want).filter((k) => want[k] !== got[k])
    .map((k) => `${k}: shows ${JSON.stringify(got[k])}, want ${JSON.stringify(want[k])}`).join('; ');
}

// What the row of job J should read in the running or queue table.
function jobRow(j) {
  const spec = j.spec || {};
  const held = (j.current_attempt || {}).gpu_shares;
  const row = {ID: String(j.id), Name: spec.name || '', Team: j.team, User: j.user,
    GPUs: String(typeof held === 'number' ? held : spec.gpus)};
  if (j.state === 'PENDING') {
    const m = /^([a-z_]+): (.*)$/s.exec(j.wait_reason || '');
    return Object.assign(row, {Priority: j.priority},
      m ? {'Reason.badge': m[1], Reason: m[1] + m[2]} : {});
  }
  const a = j.current_attempt || {};
  return Object.assign(row, {Project: spec.project || '-', Model: spec.model || '-',
    State: a.state, 'State.badge': a.state, Nodes: (a.nodes || []).join(', '),
    'GPU util': fmtPct(j.gpu_utilization_pct),
    'GPU mem': typeof j.gpu_memory_used_mib === 'number' ? fmtGiB(j.gpu_memory_used_mib) + ' GiB' : '-'});
}

// Polls until the page's row of job ID matches the API's job, read afresh each
// time (the page is at most a poll behind); [panel, row, differences].
async function rowMatches(page, id) {
  let last = ['', null, 'not read'];
  await waitUntil(async () => {
    const j = (await call('GET', `/v1/jobs/${id}`)).json;
    const panel = j.state === 'PENDING' ? 'queue' : 'running';
    const got = ((await tableRows(page, panel)) || []).find((r) => r.ID === String(id));
    last = [panel, got, differences(jobRow(j), got)];
    return !last[2];
  });
  return last;
}

// -- The Services panel, against canned GET /v1/services answers. ----------------------

// The contract's services (docs/api.md): "chat" scales 1 -> 3 as the answers go on
// (a replica waits with a reason until the third), "embed" has no status yet.
// Answer n (from 1) of the stand-in.
function cannedServices(n) {
  const ready = Math.min(n, 3);
  const replicas = [];
  for (let i = 1; i <= 3; i++) {
    replicas.push(i <= ready
      ? {replica: i, job: 40 + i, attempt: 1, generation: 1, state: 'ready', node: 'gpu-a',
        gpus: [], addr: '127.0.0.1', port: 41230 + i, inflight: 2, started_ms: 0, ready_ms: 0, reason: null}
      : {replica: i, job: 40 + i, attempt: 0, generation: 1, state: 'starting', node: null, gpus: [],
        inflight: 0, reason: 'resources: no free GPU of type H100-80GB in pool main'});
  }
  return {services: [
    {name: 'embed', team: 'research', project: 'search', model: 'bge-large', min: 1, max: 2,
      command: ['python3', 'server.py'], generation: 1, user: 'admin'},
    {name: 'chat', team: 'research', project: 'assistant', model: 'llama-3-8b', min: 0, max: 8,
      command: ['python3', 'server.py'], generation: 1, user: 'admin',
      status: {desired: 3, ready, replicas,
        decision: {at_ms: Date.now() - 4000, from: 1, to: 3, panic: true,
          reason: '1 -> 3: concurrency 5.0 over target 2 for 6 s'},
        observed: {concurrency: 5, rps: 2 * n, metric: null, queued: 1,
          latency: {window_s: 60, requests: 10 * n, p50_s: 0.043, p99_s: [0.26, 0.27, 0.28, 0.29, 0.3][Math.min(n, 5) - 1]}},
        backoff: null, cost: {gpu_hours: n / 100, cost: 0.05 * n}}},
  ]};
}

// A stand-in answer of GET /v1/metrics/series for a service's METRIC after n
// answers of cannedServices: chat's history up to its n-th figures, one point
// each 5 s; embed has none (it has no status).
function cannedServiceSeries(metric, n) {
  const k = Math.min(n, 20);
  const now = Math.floor(Date.now() / 5000) * 5;
  const t = Array.from({length: k}, (_, i) => now - 5 * (k - 1 - i));
  const at = (i) => n - k + 1 + i; // the answer each point stands for
  const fig = {
    replicas: (m) => Math.min(m, 3), desired_replicas: () => 3, rps: (m) => 2 * m,
    latency_p50: () => 0.043, latency_p99: (m) => [0.26, 0.27, 0.28, 0.29, 0.3][Math.min(m, 5) - 1],
  }[metric];
  return {metric, by: 'service', step_s: 5, t, series: fig ? [{key: 'chat', values: t.map((_, i) => fig(at(i)))}] : []};
}

// What the services table shows, row by row (tableRows), and where its cells and
// charts lie against the panel and the window: anything cut off is listed.
function servicesLayout(page) {
  return page.evaluate(() => {
    const block = document.getElementById('services-block');
    const box = block.getBoundingClientRect();
    const vw = document.documentElement.clientWidth;
    const cut = [];
    const inside = (what, r, outer) => {
      if (r.width === 0) return;
      if (r.left < outer.left - 1 || r.right > outer.right + 1) cut.push(`${what}: ${Math.round(r.left)}-${Math.round(r.right)} outside ${Math.round(outer.left)}-${Math.round(outer.right)}`);
    };
    inside('the block', box, {left: 0, right: vw});
    if (document.documentElement.scrollWidth > vw + 1) {
      const wide = [...document.querySelectorAll('body *')].filter((e) => e.getBoundingClientRect().right > vw + 1)
        .slice(0, 5).map((e) => e.tagName.toLowerCase() + (e.id ? '#' + e.id : ''));
      cut.push(`the page is ${document.documentElement.scrollWidth} px wide in a ${vw} px window: ${wide.join(', ')}`);
    }
    const body = document.getElementById('services');
    const bodyBox = body.getBoundingClientRect();
    if (body.scrollWidth > body.clientWidth + 1) cut.push(`the table scrolls: ${body.scrollWidth} > ${body.clientWidth}`);
    for (const td of body.querySelectorAll('td')) inside('cell ' + td.dataset.label, td.getBoundingClientRect(), bodyBox);
    for (const c of block.querySelectorAll('.chart')) {
      const cb = c.getBoundingClientRect();
      inside(c.id, cb, box);
      for (const cv of c.querySelectorAll('canvas')) inside(c.id + ' canvas', cv.getBoundingClientRect(), cb);
    }
    return {visible: !block.hidden && box.width > 0, cut};
  });
}

async function servicesChecks(page) {
  const visible = () => page.evaluate(() => !document.getElementById('services-block').hidden);
  const polls = () => page.evaluate(() => Number(document.documentElement.dataset.polls));
  const afterPolls = async (k) => {
    const p0 = await polls();
    return waitUntil(async () => (await polls()) >= p0 + k);
  };
  const real = await call('GET', '/v1/services');
  diag(`GET /v1/services on this controller: ${real.status}`);
  await afterPolls(1);
  ok(!(await visible()) && (real.status === 404 || (real.json && (real.json.services || []).length === 0)),
    `with no service (the controller answers ${real.status}) the Services panel is hidden`);

  // A controller with the services API: a real service (min 0: no replica runs) gets
  // its row, with the status this controller gives (none yet: dashes), and goes.
  if (real.status === 200) {
    const spec = {name: 'web-demo', team: 'research', model: 'demo-model', command: ['sleep', '600'],
      resources: {gpus: 1, pool: 'main'}, min: 0, max: 2};
    const putR = await call('PUT', '/v1/services/web-demo', spec);
    let row = null;
    const seen = (putR.status === 200 || putR.status === 201) && await waitUntil(async () => {
      row = ((await tableRows(page, 'services')) || []).find((r) => r.Service === 'web-demo');
      return (await visible()) && row ? row : null;
    });
    const st = ((await call('GET', '/v1/services')).json.services || [])
      .find((x) => x.name === 'web-demo') || {};
    const stt = st.status || {};
    const want = {Model: 'demo-model', Team: 'research', 'Min-max': '0-2',
      Ready: `${typeof stt.ready === 'number' ? stt.ready : '-'} / ${typeof stt.desired === 'number' ? stt.desired : '-'}`};
    const d = differences(want, row);
    ok(seen && !d, 'a service PUT on this controller gets its row: model, team, min-max, ready / desired as its status says',
      `PUT: ${putR.status} ${putR.text.slice(0, 300)}\n${d}\n${JSON.stringify(row)}`);
    const del = await call('DELETE', '/v1/services/web-demo');
    const hidden = await waitUntil(async () => !(await visible()), 20000);
    ok(hidden && del.status === 204, 'deleted, the service leaves the panel, which hides', `DELETE: ${del.status}`);
  }

  // A stand-in answer for the page's GET /v1/services (the API's token check stays the page's).
  let n = 0;
  let canned = true;
  await page.route('**/v1/services', (route) => {
    const auth = route.request().headers().authorization || '';
    if (!auth.startsWith('Bearer gpo_')) return route.fulfill({status: 401, contentType: 'application/json', body: '{}'});
    const body = canned ? cannedServices(++n) : {services: []};
    return route.fulfill({status: 200, contentType: 'application/json', body: JSON.stringify(body)});
  });
  // ... and for the series of the services' charts (the others go to the server).
  await page.route('**/v1/metrics/series?*', (route) => {
    const q = new URL(route.request().url()).searchParams;
    if (q.get('by') !== 'service') return route.continue();
    return route.fulfill({status: 200, contentType: 'application/json',
      body: JSON.stringify(cannedServiceSeries(q.get('metric'), Math.max(n, 1)))});
  });
  let rows = null;
  const shown = await waitUntil(async () => {
    rows = await tableRows(page, 'services');
    const chat = (rows || []).find((r) => r.Service === 'chat');
    return (await visible()) && chat && chat.Ready === '3 / 3' && chat['p50 / p99'] === '43 ms / 300 ms' ? rows : null;
  });
  const chat = (rows || []).find((r) => r.Service === 'chat') || null;
  const embed = (rows || []).find((r) => r.Service === 'embed') || null;
  const wantChat = {Service: 'chat', Model: 'llama-3-8b', Team: 'research', Ready: '3 / 3', 'Min-max': '0-8',
    Replicas: '3 ready', 'In flight': '6 (+1 queued)', 'p50 / p99': '43 ms / 300 ms',
    'Last decision.badge': 'panic'};
  const chatDiff = differences(wantChat, chat);
  ok(shown && !chatDiff && rows.map((r) => r.Service).join(',') === 'chat,embed' &&
     /^\d+(\.\d)?$/.test(chat['Req/s']) && Number(chat['Req/s']) % 2 === 0 && Number(chat['Req/s']) >= 6 &&
     chat['Last decision'].startsWith('panic1 -> 3: concurrency 5.0 over target 2 for 6 s') &&
     / ago\)$/.test(chat['Last decision']),
  'with services the panel shows a row per service, by name: model, team, ready/desired, min-max, ' +
    'replicas by state, in flight with the queue, requests per second, p50 / p99 latency, the last decision with its panic badge',
  `${chatDiff}\n${JSON.stringify(rows)}`);
  ok(embed && embed.Ready === '- / -' && embed['Min-max'] === '1-2' && embed.Replicas === 'none' &&
     embed['In flight'] === '-' && embed['p50 / p99'] === '-' && embed['Last decision'] === 'none yet',
  'a service without status yet shows dashes, not zeros', JSON.stringify(embed));
  const note = await page.textContent('#services-note');
  ok(note === '2 services, 3 of 3 replicas ready', 'the panel note counts services and ready replicas', note);

  // A starting replica's wait reason, while chat was still scaling (answer 1 or 2),
  // is gone now; the cost per hour needs two answers 5 s apart: wait for it.
  let cost = null;
  await waitUntil(async () => {
    const r = ((await tableRows(page, 'services')) || []).find((x) => x.Service === 'chat');
    cost = r ? r['Cost / hour'] : null;
    return cost && cost !== '-';
  }, 20000);
  ok(/^\d[\d,]*\.\d\d$/.test(cost || ''), 'the cost per hour is read from how the service\'s cost grows', cost);

  let replicas = null;
  let rps = null;
  const charted = await waitUntil(async () => {
    replicas = await chartOf(page, 'chart-svc-replicas');
    rps = await chartOf(page, 'chart-svc-rps');
    if (!replicas || !rps) return null;
    const ci = replicas.keys.indexOf('chat');
    const ri = rps.keys.indexOf('chat');
    const readyVals = ci >= 0 ? replicas.values[ci].filter((v) => v !== null) : [];
    const rpsVals = ri >= 0 ? rps.values[ri].filter((v) => v !== null) : [];
    return JSON.stringify(replicas.keys) === '["chat","chat desired"]' &&
      JSON.stringify(rps.keys) === '["chat"]' && readyVals.length >= 3 &&
      lastValue(replicas.values[ci]) === 3 && lastValue(replicas.values[ci + 1]) === 3 &&
      readyVals.every((v, i) => i === 0 || v >= readyVals[i - 1]) &&
      rpsVals.length >= 3 && lastValue(rps.values[ri]) > rpsVals[0] ? true : null;
  });
  let latency = null;
  const latCharted = await waitUntil(async () => {
    latency = await chartOf(page, 'chart-svc-latency');
    if (!latency || JSON.stringify(latency.keys) !== '["chat p50","chat p99"]') return null;
    const p50 = latency.values[0].filter((v) => v !== null);
    const p99 = latency.values[1].filter((v) => v !== null);
    return p50.length >= 3 && p50.every((v) => v === 0.043) && lastValue(latency.values[1]) === 0.3 &&
      p99.every((v, i) => i === 0 || v >= p99[i - 1]) ? true : null;
  });
  ok(latCharted, 'the latency chart draws each service\'s p50 and p99 over time, from GET /v1/metrics/series by service',
    JSON.stringify(latency).slice(0, 800));
  ok(charted, 'the replicas chart draws each service\'s ready and desired counts over time (chat rising to 3), ' +
    'the requests-per-second chart each service\'s rate, from GET /v1/metrics/series by service (embed, with no figures, not at all)',
  JSON.stringify({replicas, rps}).slice(0, 800));

  // The layout at 1,280 px and at 420 px: nothing cut off.
  for (const width of [1280, 420]) {
    await page.setViewportSize({width, height: 1000});
    await afterPolls(1);
    const lay = await waitUntil(async () => {
      const l = await servicesLayout(page);
      return l.visible && !l.cut.length ? l : null;
    }, 5000) || await servicesLayout(page);
    ok(lay.visible && !lay.cut.length, `at ${width} px the page is no wider than the window and the Services panel and its charts fit: no cell or chart cut off`,
      lay.cut.join('\n'));
    if (process.env.DASHBOARD_SCREENSHOT_DIR) {
      await page.screenshot({path: path.join(process.env.DASHBOARD_SCREENSHOT_DIR, `services-${width}.png`), fullPage: true});
    }
  }
  await page.setViewportSize({width: 1680, height: 1050});

  // The services go: the panel hides again, its history forgotten.
  canned = false;
  const gone = await waitUntil(async () => !(await visible()));
  const kept = await page.evaluate(() => Object.keys(window.gpuorchDash.svcHist.byName).length);
  ok(gone && kept === 0, 'when the last service is gone the panel hides again and the page forgets its history',
    `hidden: ${gone}, services kept: ${kept}`);
  await page.unroute('**/v1/services');
  await page.unroute('**/v1/metrics/series?*');
}

// The whole dashboard's layout, measured in the page: the page no wider than
// the window; every visible panel and tile inside the window; no panel body
// that scrolls sideways (scrollWidth over clientWidth: something cut off); every
// element of a panel inside the panel's box; and each cell of the Queue's
// Reason column at most two lines tall (its content height over its line
// height). Returns {cut: [...], reasons: [{id, lines}], panels}.
async function dashboardLayout(page) {
  const lay = await H.layout(page);
  const reasons = await page.evaluate(() => [...document.querySelectorAll('#queue td.reason')].map((td) => {
    const st = getComputedStyle(td);
    const content = td.clientHeight - parseFloat(st.paddingTop) - parseFloat(st.paddingBottom);
    const line = parseFloat(st.lineHeight);
    return {id: td.parentElement.cells[0].textContent, lines: Math.round(content / line * 10) / 10,
      width: Math.round(td.getBoundingClientRect().width)};
  }));
  return {cut: lay.cut, reasons, panels: lay.panels};
}

// The page's layout at 1,280 and 420 px (harness.mjs), and at 1,280 px its wait reasons.
async function layoutChecks(page) {
  await H.layoutChecks(cluster, page, 'the dashboard', 'dashboard', 10, {
    measure: dashboardLayout,
    shot: (width) => path.join(path.dirname(screenshotPath()), `dashboard-${width}.png`),
    each: (lay, width) => {
      if (width !== 1280) return;
      ok(lay.reasons.length >= 2 && lay.reasons.every((r) => r.lines <= 2.3),
        'at 1280 px each wait reason in the Queue reads on at most two lines',
        JSON.stringify(lay.reasons));
      diag('reason cells at 1280 px: ' + JSON.stringify(lay.reasons));
    },
  });
  await page.setViewportSize({width: 1680, height: 1050});
}

// The utilization-by-team chart's line: a null between two values at most a
// minute and a step apart is joined (uPlot spans undefined, breaks at null), so
// steps the samples did not fill do not cut the line into segments.
async function teamChartChecks(page) {
  let got = null;
  const joined = await waitUntil(async () => {
    got = await page.evaluate(() => {
      const c = window.gpuorchDash.charts['chart-util-team'];
      if (!c) return null;
      const [t, ...series] = c.plot.data;
      const breaks = [];
      let values = 0;
      series.forEach((vals, s) => {
        let prev = -1;
        for (let i = 0; i < vals.length; i++) {
          if (vals[i] === undefined) continue;
          if (vals[i] === null) {
            continue;
          }
          values++;
          const nulls = vals.slice(prev + 1, i).some((v) => v === null);
          if (prev >= 0 && nulls && t[i] - t[prev] <= 65) breaks.push(`${c.keys[s]}: ${t[prev]}-${t[i]}`);
          prev = i;
        }
      });
      return {keys: c.keys, values, breaks};
    });
    return got && got.keys.includes('research') && got.values >= 3 && !got.breaks.length ? got : null;
  }, 30000);
  ok(joined, 'the utilization-by-team chart draws team research\'s line unbroken: no null between values ' +
    'a minute and a step apart or closer', JSON.stringify(got).slice(0, 600));
}

// A MIG GPU's card, from a stand-in GET /v1/nodes: the node's MIG mode, a
// plan in flight, and one line per instance with its job or "free"; a GPU
// whose MIG mode waits for a reset says so.
async function migChecks(page) {
  const mig = {name: 'mig-1', pool: 'main', state: 'up', mig_mode: 'dynamic',
    last_heartbeat: new Date().toISOString(), gpus_in_use: 1, gpu_samples: [], dirty_gpus: [],
    gpus: [{index: 0, uuid: 'GPU-m0', gpu_type: 'H100-80GB', mem_mib: 81559, mig_slices: 7,
      mig_enabled: true, mig_pending: true, mig_planning: true, in_use: true, mig: [
        {profile_id: 19, profile: '1g.10gb', start: 6, gi_id: 1, ci_id: 0, uuid: 'MIG-a', in_use: true, job: 12},
        {profile_id: 9, profile: '3g.40gb', start: 0, gi_id: 2, ci_id: 0, uuid: 'MIG-b', in_use: false, job: null}]},
    {index: 1, uuid: 'GPU-m1', gpu_type: 'H100-80GB', mem_mib: 81559, mig_slices: 7,
      mig_enabled: false, mig_pending: true, mig_planning: false, in_use: false}]};
  await page.route('**/v1/nodes', (route) => route.fulfill({status: 200,
    contentType: 'application/json', body: JSON.stringify({nodes: [mig]})}));
  let cards = null;
  const shown = await waitUntil(async () => {
    cards = await page.evaluate(() => [...document.querySelectorAll('#nodes .gpu')].map((g) =>
      [...g.querySelectorAll('.gpu-mig > div')].map((d) => d.textContent)));
    return cards.length === 2 && cards[0].length === 3 ? cards : null;
  });
  ok(shown && JSON.stringify(cards[0]) === JSON.stringify(
    ['MIG dynamic, repartitioning', '1g.10gb@6 job 12', '3g.40gb@0 free']) &&
    JSON.stringify(cards[1]) === JSON.stringify(['MIG dynamic, on after a reset']),
  'a MIG GPU\'s card lists its instances (profile@slot, the job or free) under the node\'s MIG mode ' +
    'and a plan in flight; a GPU whose MIG mode waits for a reset says so', JSON.stringify(cards));
  await page.unroute('**/v1/nodes');
  // The real nodes again, by the next poll, before the screenshot.
  await waitUntil(async () => ((await nodeRows(page)).length === 2 ? 1 : null));
}

async function browserChecks(browser, first, big, submit, runsJobs) {
  const page = await browser.newPage({viewport: {width: 1680, height: 1050}, deviceScaleFactor: 1});
  const errors = [];
  page.on('pageerror', (e) => errors.push('pageerror: ' + e.message));
  page.on('console', (m) => {
    // The 401 of the wrong token is the browser's own network note, not the page's error.
    if (m.type() === 'error' && !/^Failed to load resource/.test(m.text())) errors.push('console: ' + m.text());
  });
  await page.addInitScript(() => {
    window.__csp = [];
    document.addEventListener('securitypolicyviolation',
      (e) => window.__csp.push(e.violatedDirective + ' ' + e.blockedURI));
  });
  const url = `http://127.0.0.1:${port}/`;
  await page.goto(url);
  ok(await page.isVisible('#login-form') && await page.isVisible('#token') && !(await page.isVisible('#dash')),
    'the page opens on the sign-in form, the dashboard hidden');

  await page.fill('#token', 'gpo_' + 'x'.repeat(43));
  await page.click('#login-submit');
  const refused = await waitUntil(async () => (await page.isVisible('#login-error')) &&
    (await page.textContent('#login-error')));
  ok(refused === 'The server did not accept this token (401). Check it and try again.' &&
     !(await page.isVisible('#dash')) && await page.isVisible('#login-form') &&
     (await page.inputValue('#token')) === '',
  'a wrong token is refused: the form says the server did not accept it (401), the field is cleared',
  refused);

  await page.fill('#token', admin);
  await page.click('#login-submit');
  const loaded = await waitUntil(() => page.evaluate(() => document.documentElement.dataset.loaded === '1'));
  const who = loaded ? await page.evaluate(() => [document.getElementById('who').firstChild.textContent,
    document.querySelector('#who .role').textContent]) : null;
  ok(loaded && await page.isVisible('#dash') && who && who[0] === 'admin' && who[1] === '(admin)' &&
     await page.isVisible('#logout') && (await page.textContent('#status')) === 'live' &&
     await page.evaluate(() => sessionStorage.getItem('gpuorch.token') !== null),
  'the admin token signs in: the dashboard shows "admin (admin)", Sign out, status live, the token in sessionStorage',
  JSON.stringify(who));
  await page.evaluate(() => {
    window.__sameDocument = 'yes'; // a reload would lose it
  });

  // The jobs: each row reads what the API says of the job.
  for (const id of first) {
    const [panel, row, diff] = await rowMatches(page, id);
    const j = (await call('GET', `/v1/jobs/${id}`)).json;
    ok(!diff, `job ${id} (${j.spec.name}) has its row in the ${panel} table: id, name, team, user, ` +
      (panel === 'running' ? 'project, model, state, GPUs, nodes, GPU util and memory' : 'GPUs'),
    `${diff}\n${JSON.stringify(row)}`);
    diag(`job ${id} -> ${panel}: ${JSON.stringify(row)}`);
  }
  const [qpanel, qrow, qdiff] = await rowMatches(page, big);
  ok(!qdiff && qpanel === 'queue' && /^[a-z_]+$/.test(qrow['Reason.badge']) &&
     qrow.Reason.length > qrow['Reason.badge'].length + 5,
  'the job that fits no node waits in the queue table with its wait reason (code badge and sentence)',
  `${qpanel}: ${qdiff}\n${JSON.stringify(qrow)}`);
  if (qrow) diag(`reason: ${qrow['Reason.badge']} / ${qrow.Reason}`);

  // The class a job runs under, by name: big-pretrain's spec names none, so the
  // cluster's default class ("normal", else the first by name), never "-".
  const classes = ((await call('GET', '/v1/priority-classes')).json || {});
  const names = (Object.values(classes).find(Array.isArray) || []).map((c) => c.name).sort();
  const dflt = names.includes('normal') ? 'normal' : names[0];
  const bigJob = (await call('GET', `/v1/jobs/${big}`)).json;
  ok(dflt && !bigJob.spec.priority && bigJob.priority === dflt && qrow && qrow.Priority === dflt,
    `a job whose spec names no class shows the class it runs under, the default "${dflt}", in the API and the queue`,
    `classes ${JSON.stringify(names)}; API priority ${JSON.stringify(bigJob.priority)}; row ${JSON.stringify(qrow)}`);

  // The nodes: both, each with its 4 GPU cards, their scripted utilization and
  // the job on each busy GPU.
  let nodeDiff = 'not read';
  const shownNodes = await waitUntil(async () => {
    const nodes = (await call('GET', '/v1/nodes')).json.nodes;
    const jobs = (await call('GET', '/v1/jobs?state=RUNNING&limit=1000')).json.jobs;
    const onGpu = new Map();
    for (const j of jobs) for (const u of (j.current_attempt || {}).gpus || []) onGpu.set(u, j);
    const got = await nodeRows(page);
    const want = nodes.slice().sort((a, b) => (a.name < b.name ? -1 : 1)).map((n) => ({
      name: n.name, pool: n.pool, state: n.state,
      gpus: n.gpus.slice().sort((a, b) => a.index - b.index).map((g) => {
        const j = onGpu.get(g.uuid);
        return {uuid: g.uuid, label: 'GPU ' + g.index, type: g.gpu_type,
          util: fmtPct(SCRIPTED_UTIL[g.uuid]), job: j ? `job ${j.id} ${j.spec.name}` : 'free'};
      }),
    }));
    const strip = (rows) => JSON.stringify(rows.map((r) =>
      ({name: r.name, pool: r.pool, state: r.state, gpus: r.gpus})));
    nodeDiff = `shows ${strip(got)}\nwant  ${strip(want)}`;
    return strip(got) === strip(want) && got.every((r) => /^\d+s ago$/.test(r.heartbeat)) ? got : null;
  });
  ok(shownNodes && shownNodes.length === 2 && shownNodes.every((n) => n.gpus.length === NODE_GPUS),
    'the nodes panel shows gpu-a and gpu-b (pool main, up, a recent heartbeat), 4 GPU cards each ' +
    'with type, the scripted utilization and the job on each busy GPU', nodeDiff);
  const note = await page.textContent('#nodes-note');
  ok(note === `2 nodes, ${2 * NODE_GPUS} GPUs`, 'the nodes panel note counts 2 nodes and 8 GPUs', note);

  // The summary tiles against the API.
  let tileDiff = 'not read';
  const tileOk = await waitUntil(async () => {
    const jobs = (await call('GET', '/v1/jobs?state=PENDING,RUNNING&limit=1000')).json.jobs;
    const cost = (await call('GET', '/v1/cost?by=team')).json;
    const running = jobs.filter((j) => j.state === 'RUNNING');
    // GPUs in use in GPU shares: each GPU the share its jobs hold, at most one.
    const onGpu = new Map();
    for (const j of running) {
      const a = j.current_attempt || {};
      for (const u of a.gpus || []) onGpu.set(u, (onGpu.get(u) || 0) + a.gpu_shares / a.gpus.length);
    }
    const busy = [...onGpu.values()].reduce((x, v) => x + Math.min(1, v), 0);
    const utils = Object.values(SCRIPTED_UTIL);
    const want = {
      't-nodes': '2 / 2', 't-gpus': `${Math.round(busy * 1000) / 1000} / ${2 * NODE_GPUS}`,
      't-util': fmtPct(utils.reduce((a, b) => a + b, 0) / utils.length),
      't-running': String(running.length), 't-pending': String(jobs.length - running.length),
      't-idle': '0', 't-rate': fmtMoney(cost.rate_per_hour),
    };
    tileDiff = differences(want, await tiles(page));
    return !tileDiff;
  });
  ok(tileOk, 'the tiles show nodes up, GPUs in use, the mean utilization, running, pending and ' +
    'idle jobs and the cost rate the API gives', tileDiff);
  if (runsJobs) {
    // 2 + 1 + 0.25 GPUs: the 0.25 job is a quarter of a GPU, in the tile, the
    // nodes' gpus_in_use and /metrics' gpuorch_gpus{state="allocated"} alike.
    const m = await call('GET', '/metrics');
    const alloc = /^gpuorch_gpus\{state="allocated"\} (\S+)$/m.exec(m.text || '');
    const inUse = (await call('GET', '/v1/nodes')).json.nodes.reduce((x, n) => x + n.gpus_in_use, 0);
    const tile = (await tiles(page))['t-gpus'];
    ok(tile === `3.25 / ${2 * NODE_GPUS}` && alloc && Number(alloc[1]) === 3.25 && inUse === 3.25,
      'GPUs in use count GPU shares: with jobs of 2, 1 and 0.25 GPUs the tile reads 3.25 / 8, as the ' +
      'nodes\' gpus_in_use and gpuorch_gpus{state="allocated"} do',
      `tile ${tile}; metrics ${alloc && alloc[1]}; nodes ${inUse}`);
  }

  // The cost panel (by team) and the panels with nothing to show.
  let costKeys = [];
  const costShown = await waitUntil(async () => {
    const api = (await call('GET', '/v1/cost?by=team')).json;
    costKeys = (api.rows || []).map((r) => (r.key === null || r.key === '' ? '(none)' : r.key)).sort();
    if (!costKeys.length) return (await page.textContent('#cost')) === 'nothing charged in this period';
    const rows = await tableRows(page, 'cost');
    const foot = await page.evaluate(() => {
      const f = document.querySelector('#cost tfoot tr');
      return f ? f.cells[0].textContent : null;
    });
    return rows && JSON.stringify(rows.map((r) => r.team).sort()) === JSON.stringify(costKeys) &&
      rows.every((r) => /^\d[\d,]*\.\d\d$/.test(r.Cost)) && foot === 'total';
  });
  ok(costShown, `the cost panel has a row per team the API charges (${costKeys.join(', ') || 'none'}), ` +
    'with its cost, and a total row', await page.textContent('#cost'));
  const budgets = await page.textContent('#budgets');
  const idle = await page.textContent('#idle');
  ok(budgets === 'no team has a budget' && idle === 'no job holds idle GPUs',
    'the budgets and idle panels say there is nothing to show', `${budgets} / ${idle}`);

  // The charts: data from /v1/metrics/series, drawn by uPlot.
  const series = await call('GET', '/v1/metrics/series?metric=gpu_util&by=node&since=-15m');
  ok(series.status === 200, 'GET /v1/metrics/series answers the charts\' query',
    `${series.status} ${series.text.slice(0, 300)}`);
  const wantNode = {'gpu-a': meanOf('gpu-a'), 'gpu-b': meanOf('gpu-b')};
  let nodeChart = null;
  const drawn = await waitUntil(async () => {
    nodeChart = await chartOf(page, 'chart-util-node');
    if (!nodeChart) return null;
    const nonNull = nodeChart.values.flat().filter((v) => v !== null && v !== undefined).length;
    const last = Object.fromEntries(nodeChart.keys.map((k, i) => [k, lastValue(nodeChart.values[i])]));
    return nodeChart.points > 0 && nodeChart.points === nonNull &&
      JSON.stringify(nodeChart.keys) === '["gpu-a","gpu-b"]' &&
      ['gpu-a', 'gpu-b'].every((k) => nodeChart.legend.includes(k)) &&
      Object.keys(wantNode).every((k) => last[k] !== null && Math.abs(last[k] - wantNode[k]) < 0.5)
      ? nodeChart : null;
  }, 45000);
  ok(drawn, 'the utilization-by-node chart draws a series per node (legend gpu-a, gpu-b) whose ' +
    `latest points are the nodes' mean scripted utilization (${wantNode['gpu-a']}, ${wantNode['gpu-b']})`,
  JSON.stringify(nodeChart).slice(0, 600));
  if (drawn) diag(`utilization by node: ${drawn.points} points`);
  let queueChart = null;
  const queued = await waitUntil(async () => {
    queueChart = await chartOf(page, 'chart-queue');
    const i = queueChart ? queueChart.keys.indexOf('research') : -1;
    return i >= 0 && queueChart.points > 0 && queueChart.legend.includes('research') &&
      lastValue(queueChart.values[i]) >= 1 ? queueChart : null;
  }, 30000);
  ok(queued, 'the queue-length chart has team research\'s series, its latest point at least the 1 waiting job',
    JSON.stringify(queueChart).slice(0, 600));

  // Live: a second job shows up by the page's polling, in the same document.
  const polls = await page.evaluate(() => Number(document.documentElement.dataset.polls));
  const second = await submit({name: 'finetune-sft', gpus: 1, project: 'chat', model: 'llama-8b'});
  const [lpanel, lrow, ldiff] = await rowMatches(page, second);
  ok(!ldiff && await page.evaluate(() => window.__sameDocument === 'yes' &&
      Number(document.documentElement.dataset.polls)) > polls,
  'a job submitted later gets its row without a reload (live polling)', `${lpanel}: ${ldiff}\n${JSON.stringify(lrow)}`);

  await servicesChecks(page);
  await migChecks(page);
  await layoutChecks(page);
  if (runsJobs) await teamChartChecks(page);

  // Let the charts gather a few points for the picture (no check depends on it):
  // up to 8 s, or DASHBOARD_SETTLE_MS exactly (the picture in docs/ had 90 s).
  if (Number(process.env.DASHBOARD_SETTLE_MS) > 0) await sleep(Number(process.env.DASHBOARD_SETTLE_MS));
  else {
    await waitUntil(() => page.evaluate(() =>
      (Number(document.getElementById('chart-util-node').dataset.points) > 6 ? 1 : null)), 8000);
  }
  const shot = screenshotPath();
  fs.mkdirSync(path.dirname(shot), {recursive: true});
  const height = await page.evaluate(() => document.documentElement.scrollHeight);
  await page.screenshot({path: shot, fullPage: true});
  const png = fs.readFileSync(shot);
  const size = png.subarray(0, 8).equals(Buffer.from([0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a]))
    ? [png.readUInt32BE(16), png.readUInt32BE(20)] : null;
  ok(size && size[0] === 1680 && Math.abs(size[1] - height) <= 2,
    'a screenshot of the whole dashboard is saved (a PNG as wide as the window, as tall as the page)',
    `${shot}: ${JSON.stringify(size)}, page ${height} px`);
  diag('screenshot: ' + shot);

  const csp = await page.evaluate(() => window.__csp);
  ok(csp.length === 0 && errors.length === 0, 'no CSP violation and no script error in the page',
    csp.concat(errors).join('\n'));

  // A token the server stops accepting: back to the form, with a message.
  await page.evaluate(() => sessionStorage.setItem('gpuorch.token', 'gpo_' + 'y'.repeat(43)));
  await page.reload();
  const ended = await waitUntil(async () => (await page.isVisible('#login-error')) &&
    (await page.textContent('#login-error')));
  ok(ended === 'Your session ended: the server no longer accepts this token (401). Sign in again.' &&
     !(await page.isVisible('#dash')) && !(await page.isVisible('#who')) &&
     await page.evaluate(() => sessionStorage.getItem('gpuorch.token') === null),
  'a token that gets 401 sends the page back to the form saying the session ended, and is forgotten', ended);
}

try {
  await main();
  await cluster.finish();
} catch (e) {
  await cluster.finish(e);
}
