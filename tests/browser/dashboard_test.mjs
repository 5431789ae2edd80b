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
// form; a wrong token refused with a message; the admin's token accepted; a
// job submitted through the API appears (queue or running) without a reload;
// a chart draws data from /v1/metrics/series; a second job appears by the
// page's own polling (same document: no reload); a token the server no longer
// accepts sends the page back to the form with a message. No CSP violation and
// no script error along the way. A screenshot goes to
// $MESON_BUILD_ROOT/meson-logs/dashboard.png (else the temporary directory,
// kept then); its path is printed. Prints TAP. Children are stopped by PID;
// KEEP_TMP=1 keeps the temporary directory.

import {spawn} from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import {createRequire} from 'node:module';
import {fileURLToPath} from 'node:url';

const HERE = path.dirname(fileURLToPath(import.meta.url));
const ROOT = path.resolve(HERE, '..', '..');
const CHROMIUM = process.env.CHROMIUM || '/usr/bin/chromium';
const DEADLINE_MS = 30000;
const NODE_GPUS = 4;
const JOB_USER = 'gpuorch-test1';

let testNo = 0;
let failed = 0;
function ok(cond, name, detail) {
  testNo++;
  if (!cond) failed++;
  console.log(`${cond ? 'ok' : 'not ok'} ${testNo} - ${name}`);
  if (!cond && detail) for (const l of String(detail).split('\n').slice(0, 40)) console.log('# ' + l);
  return cond;
}
function skip(name, why) {
  testNo++;
  console.log(`ok ${testNo} - ${name} # SKIP ${why}`);
}
const diag = (text) => console.log('# ' + text);
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

// Polls fn (sync or async) until it returns something truthy or the deadline passes.
async function waitUntil(fn, timeoutMs = DEADLINE_MS, stepMs = 100) {
  const end = Date.now() + timeoutMs;
  for (;;) {
    let v;
    try {
      v = await fn();
    } catch (e) {
      v = null;
    }
    if (v) return v;
    if (Date.now() > end) return null;
    await sleep(stepMs);
  }
}

const BIN = process.argv[2] ? path.resolve(process.argv[2]) : null;
if (!BIN || !fs.existsSync(BIN)) {
  console.log('1..0 # SKIP usage: dashboard_test.mjs GPUORCH (the gpuorch binary)');
  process.exit(0);
}
if (!fs.existsSync(CHROMIUM)) {
  console.log(`1..0 # SKIP no ${CHROMIUM} (Debian package chromium; scripts/setup.sh)`);
  process.exit(0);
}
let chromium;
try {
  chromium = createRequire(path.join(ROOT, 'package.json'))('playwright-core').chromium;
} catch (e) {
  console.log('1..0 # SKIP playwright-core is not installed (scripts/setup.sh runs npm ci)');
  process.exit(0);
}
const FAKENVML = process.env.GPUORCH_FAKENVML ||
  path.join(path.dirname(BIN), 'tests', 'libnvidia-ml.so.1');

const TMP = fs.mkdtempSync(path.join(os.tmpdir(), 'gpuorch-dash-test-'));
const DATA = path.join(TMP, 'data');
const children = []; // {name, proc}
let port = null;
let admin = null;

function startChild(name, args, env) {
  const log = fs.openSync(path.join(TMP, name + '.log'), 'a');
  const proc = spawn(args[0], args.slice(1), {stdio: ['ignore', log, log], env: env || process.env});
  fs.closeSync(log);
  children.push({name, proc});
  return proc;
}

function logTail(name) {
  try {
    return fs.readFileSync(path.join(TMP, name + '.log'), 'utf8').slice(-2000);
  } catch (e) {
    return '';
  }
}

// Stops a child by its PID: SIGTERM, then SIGKILL after 20 s.
async function stopChild(c) {
  const p = c.proc;
  if (p.exitCode !== null || p.signalCode !== null) return;
  const done = new Promise((r) => p.once('exit', r));
  process.kill(p.pid, 'SIGTERM');
  const t = setTimeout(() => {
    try {
      process.kill(p.pid, 'SIGKILL');
    } catch (e) { /* gone */ }
  }, 20000);
  await done;
  clearTimeout(t);
}

async function call(method, p, body, token = admin) {
  const r = await fetch(`http://127.0.0.1:${port}${p}`, {
    method,
    headers: Object.assign({}, token ? {Authorization: 'Bearer ' + token} : {},
      body !== undefined ? {'Content-Type': 'application/json'} : {}),
    body: body !== undefined ? JSON.stringify(body) : undefined,
  });
  const text = await r.text();
  let json = null;
  try {
    json = text ? JSON.parse(text) : null;
  } catch (e) { /* not JSON */ }
  return {status: r.status, json, text, headers: r.headers};
}

async function put(p, body) {
  const r = await call('PUT', p, body);
  if (r.status !== 200 && r.status !== 201) throw new Error(`PUT ${p}: ${r.status} ${r.text}`);
  return r.json;
}

function gpuUuid(nodeNo, index) {
  // Unique per run: the fake NVML finds a GPU's processes by the UUIDs in their
  // environment, so a test running beside this one must not name the same GPUs.
  const pid = (process.pid & 0xffff).toString(16).padStart(4, '0');
  return `GPU-${nodeNo.toString(16).padStart(8, '0')}-${pid}-4dab-8000-${index.toString(16).padStart(12, '0')}`;
}

function startAgent(name, nodeNo, utils) {
  const gpuFile = path.join(TMP, name + '-gpus.json');
  fs.writeFileSync(gpuFile, JSON.stringify({gpus: utils.map((u, i) => ({
    uuid: gpuUuid(nodeNo, i), name: 'NVIDIA H100 80GB HBM3', utilization: u,
    memory_utilization: Math.round(u / 2), power_mw: 80000 + u * 5000, temperature_c: 30 + Math.round(u / 3),
    process_memory_mib: 20480,
  }))}));
  startChild(name, [BIN, 'agent', '--server', `http://127.0.0.1:${port}`, '--join-token',
    path.join(DATA, 'join.token'), '--name', name, '--pool', 'main', '--state-dir',
    path.join(TMP, name), '--nvml', FAKENVML, '--addr', '127.0.0.1', '--log-listen', '127.0.0.1:0',
    '--kill-grace', '2', '--sample-interval', '500', '--poll-wait', '5', '--dirty-wait', '2',
    '--cpus', '32', '--mem-mib', '65536'], Object.assign({}, process.env, {FAKENVML_CONFIG: gpuFile}));
}

async function startServer() {
  const portFile = path.join(TMP, 'port');
  const proc = startChild('server', [BIN, 'server', '--data', DATA, '--listen', '127.0.0.1:0',
    '--port-file', portFile, '--pass-interval', '1']);
  const text = await waitUntil(() => {
    if (proc.exitCode !== null) throw new Error('server exited: ' + logTail('server'));
    const t = fs.existsSync(portFile) ? fs.readFileSync(portFile, 'utf8') : '';
    return t.endsWith('\n') ? t : null;
  });
  if (!text) throw new Error('the server did not start: ' + logTail('server'));
  port = Number(text);
  admin = fs.readFileSync(path.join(DATA, 'admin.token'), 'utf8').trim();
}

function userExists(name) {
  try {
    return fs.readFileSync('/etc/passwd', 'utf8').split('\n').some((l) => l.startsWith(name + ':'));
  } catch (e) {
    return false;
  }
}

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
  // A price, where this controller has them (issue 7's cost API), so the cost panel has rows.
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
  const first = [await submit({name: 'train-llm', gpus: 2, project: 'llm', model: 'llama-8b'}),
    await submit({name: 'eval-sweep', gpus: 1, project: 'eval'})];
  await submit({name: 'big-pretrain', gpus: 8, project: 'llm', model: 'llama-70b'});

  const browser = await chromium.launch({executablePath: CHROMIUM, headless: true,
    args: ['--no-sandbox', '--disable-gpu', '--disable-dev-shm-usage']});
  try {
    await browserChecks(browser, first, submit);
  } finally {
    await browser.close();
  }
}

async function browserChecks(browser, first, submit) {
  const page = await browser.newPage({viewport: {width: 1680, height: 1050}, deviceScaleFactor: 1});
  const errors = [];
  page.on('pageerror', (e) => errors.push('pageerror: ' + e.message));
  page.on('console', (m) => {
    // A 404 of an API this build lacks, or the 401 of the wrong token, is the
    // browser's own network note, not the page's error.
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
  ok(refused && refused.includes('401') && !(await page.isVisible('#dash')),
    'a wrong token is refused with a message on the form', refused);

  await page.fill('#token', admin);
  await page.click('#login-submit');
  const loaded = await waitUntil(() => page.evaluate(() => document.documentElement.dataset.loaded === '1'));
  const who = loaded ? await page.textContent('#who') : '';
  ok(loaded && await page.isVisible('#dash') && who.includes('admin') &&
     await page.evaluate(() => sessionStorage.getItem('gpuorch.token') !== null),
  'the admin token signs in: the dashboard shows, the user named, the token in sessionStorage', who);
  await page.evaluate(() => {
    window.__sameDocument = 'yes'; // a reload would lose it
  });

  const rowOf = (id) => page.evaluate((jid) => {
    for (const panel of ['queue', 'running']) {
      for (const tr of document.querySelectorAll(`#${panel} tbody tr`)) {
        if (tr.cells[0] && tr.cells[0].textContent === String(jid)) return panel + ': ' + tr.textContent;
      }
    }
    return null;
  }, id);
  const seen = await waitUntil(async () => (await rowOf(first[0])) && (await rowOf(first[1])));
  ok(seen, 'the jobs submitted through the API appear in the page (queue or running)',
    await page.textContent('#dash'));
  diag('job ' + first[0] + ' -> ' + (await rowOf(first[0])));
  const nodesText = await page.textContent('#nodes');
  ok(nodesText.includes('gpu-a') && nodesText.includes('gpu-b') &&
     (await page.locator('#nodes .gpu').count()) === 2 * NODE_GPUS && nodesText.includes('92%'),
  'the nodes panel shows both nodes, their 8 GPUs and their sampled utilization', nodesText.slice(0, 600));
  const queueText = await waitUntil(async () => {
    const r = await page.$$eval('#queue tbody td.reason', (tds) => tds.map((td) =>
      [td.querySelector('.badge') ? td.querySelector('.badge').textContent : '', td.textContent]));
    return r.length && r.every(([code, text]) => /^[a-z_]+$/.test(code) && text.length > code.length + 5)
      ? r : null;
  });
  ok(queueText, 'the queue shows the waiting job with its wait reason (code and sentence)',
    await page.textContent('#queue'));
  if (queueText) diag('reason: ' + queueText[0][1]);

  // The charts: data from /v1/metrics/series, drawn by uPlot on a canvas.
  const series = await call('GET', '/v1/metrics/series?metric=gpu_util&by=node&since=-15m');
  if (series.status === 404) {
    skip('a chart draws data from /v1/metrics/series', 'this build has no /v1/metrics/series yet');
    const shown = await page.textContent('#chart-util-node');
    ok(/not available/.test(shown), "without the series API the chart says 'not available'", shown);
    // The page's chart code all the same, on an answer of the contracted shape.
    const now = Math.floor(Date.now() / 1000);
    const t = Array.from({length: 30}, (_, i) => now - 290 + 10 * i);
    await page.route('**/v1/metrics/series?*', (route) => route.fulfill({json: {
      metric: 'gpu_util', by: 'node', step_s: 10, t,
      series: [{key: 'gpu-a', values: t.map((_, i) => (i === 3 ? null : 50 + (i % 7)))},
        {key: 'gpu-b', values: t.map((_, i) => 40 + (i % 5))}]}}));
    const drawn = await waitUntil(() => page.evaluate(() => {
      const box = document.getElementById('chart-util-node');
      return box.querySelector('canvas') && Number(box.dataset.points) === 59 ? 1 : null;
    }), 15000);
    await page.unroute('**/v1/metrics/series?*');
    ok(drawn, 'the chart code draws a series answer with uPlot (59 points; the answer given by ' +
      'the test, this build having no series API)', await page.textContent('#chart-util-node'));
  } else {
    const drawn = await waitUntil(() => page.evaluate(() => {
      const box = document.getElementById('chart-util-node');
      const plot = window.gpuorchDash.charts['chart-util-node'];
      return Number(box.dataset.points) > 0 && box.querySelector('canvas') && plot &&
        plot.plot.data[0].length > 0 ? box.dataset.points : null;
    }), 45000);
    ok(drawn, 'a chart draws data: GPU utilization by node, a uPlot canvas with points',
      `series: ${series.status} ${series.text.slice(0, 300)}`);
    diag(`utilization by node: ${drawn} points`);
  }

  // Live: a second job shows up by the page's polling, in the same document.
  const polls = await page.evaluate(() => Number(document.documentElement.dataset.polls));
  const second = await submit({name: 'finetune-sft', gpus: 1, project: 'chat', model: 'llama-8b'});
  const live = await waitUntil(() => rowOf(second), 20000);
  ok(live && await page.evaluate(() => window.__sameDocument === 'yes' &&
      Number(document.documentElement.dataset.polls)) > polls,
  'a job submitted later appears without a reload (live polling)', live);

  // Let the charts gather a few points for the picture (no check depends on it):
  // up to 8 s, or DASHBOARD_SETTLE_MS exactly (the picture in docs/ had 90 s).
  if (Number(process.env.DASHBOARD_SETTLE_MS) > 0) await sleep(Number(process.env.DASHBOARD_SETTLE_MS));
  else {
    await waitUntil(() => page.evaluate(() =>
      (Number(document.getElementById('chart-util-node').dataset.points) > 6 ? 1 : null)), 8000);
  }
  const shot = screenshotPath();
  fs.mkdirSync(path.dirname(shot), {recursive: true});
  await page.screenshot({path: shot, fullPage: true});
  ok(fs.statSync(shot).size > 10000, 'a screenshot of the dashboard is saved', shot);
  diag('screenshot: ' + shot);

  const csp = await page.evaluate(() => window.__csp);
  ok(csp.length === 0 && errors.length === 0, 'no CSP violation and no script error in the page',
    csp.concat(errors).join('\n'));

  // A token the server stops accepting: back to the form, with a message.
  await page.evaluate(() => sessionStorage.setItem('gpuorch.token', 'gpo_' + 'y'.repeat(43)));
  await page.reload();
  const ended = await waitUntil(async () => (await page.isVisible('#login-error')) &&
    (await page.textContent('#login-error')));
  ok(ended && /401/.test(ended) && !(await page.isVisible('#dash')) &&
     await page.evaluate(() => sessionStorage.getItem('gpuorch.token') === null),
  'a token that gets 401 sends the page back to the form with a message, and is forgotten', ended);
}

async function cleanup() {
  if (port && admin) {
    try {
      const r = await call('GET', '/v1/jobs?state=PENDING,RUNNING&limit=1000');
      for (const j of (r.json && r.json.jobs) || []) await call('POST', `/v1/jobs/${j.id}/cancel`);
      await waitUntil(async () => {
        const l = await call('GET', '/v1/jobs?state=RUNNING&limit=1000');
        return l.json && (l.json.jobs || []).length === 0;
      }, 20000);
    } catch (e) {
      diag('cleanup: ' + e.message);
    }
  }
  for (const c of children.slice().reverse()) await stopChild(c);
  if (process.env.KEEP_TMP) diag('kept ' + TMP);
  else fs.rmSync(TMP, {recursive: true, force: true});
}

try {
  await main();
} catch (e) {
  ok(false, 'the test ran to its end', (e && e.stack) || String(e));
  for (const n of ['server', 'gpu-a', 'gpu-b']) diag(n + ': ' + logTail(n).slice(-800));
} finally {
  await cleanup();
  console.log(`1..${testNo}`);
}
process.exit(failed ? 1 : 0);
