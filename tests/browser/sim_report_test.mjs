#!/usr/bin/env node
// sim_report_test.mjs GPUORCH DATA_DIR - the simulator's HTML reports in
// Debian's headless Chromium (/usr/bin/chromium) driven by playwright-core:
// the job replay's page (tests/sim/three_jobs.csv under fifo and sjf) and the
// serving replay's (tests/sim/serve_requests.csv on serve_chat.yaml under the
// five serving policies), each opened from a file with the network cut off.
// Each page must run its script without an error and draw every chart (one
// uPlot canvas per chart element, a legend entry per policy); the serving
// page's summary rows are the --json figures. Prints TAP.

import {spawnSync} from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import {createRequire} from 'node:module';
import {fileURLToPath} from 'node:url';

const HERE = path.dirname(fileURLToPath(import.meta.url));
const ROOT = path.resolve(HERE, '..', '..');
const CHROMIUM = process.env.CHROMIUM || '/usr/bin/chromium';

let testNo = 0;
let failed = 0;
function ok(cond, name, detail) {
  testNo++;
  if (!cond) failed++;
  console.log(`${cond ? 'ok' : 'not ok'} ${testNo} - ${name}`);
  if (!cond && detail) for (const l of String(detail).split('\n').slice(0, 40)) console.log('# ' + l);
  return cond;
}

const BIN = process.argv[2] ? path.resolve(process.argv[2]) : null;
const DATA = process.argv[3] ? path.resolve(process.argv[3]) : null;
if (!BIN || !fs.existsSync(BIN) || !DATA) {
  console.log('1..0 # SKIP usage: sim_report_test.mjs GPUORCH DATA_DIR');
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

const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'sim-report-'));
function sim(args) {
  const r = spawnSync(BIN, ['sim', ...args], {encoding: 'utf8'});
  return {rc: r.status, out: r.stdout, err: r.stderr};
}

const SERVE_POLICIES = ['default', 'knative', 'rayserve', 'static-peak', 'static-mean'];
const jobsHtml = path.join(tmp, 'jobs.html');
const serveHtml = path.join(tmp, 'serve.html');
const serveArgs = ['--serve', path.join(DATA, 'serve_requests.csv'), '--service',
  path.join(DATA, 'serve_chat.yaml'), '--policy', SERVE_POLICIES.join(',')];
let r = sim(['--trace', path.join(DATA, 'three_jobs.csv'), '--policy', 'fifo,sjf', '--report',
  jobsHtml]);
ok(r.rc === 0, 'the job replay writes its report', r.err);
r = sim([...serveArgs, '--report', serveHtml]);
ok(r.rc === 0, 'the serving replay writes its report', r.err);
const json = sim([...serveArgs, '--json']);
const runs = JSON.parse(json.out);

// Opens a page offline; returns what it drew and the errors it met.
async function open(browser, file) {
  const ctx = await browser.newContext({offline: true, viewport: {width: 1280, height: 900}});
  const page = await ctx.newPage();
  const errors = [];
  page.on('pageerror', (e) => errors.push(String(e)));
  page.on('console', (m) => m.type() === 'error' && errors.push(m.text()));
  await page.goto('file://' + file);
  await page.waitForLoadState('load');
  const drawn = await page.evaluate(() => [...document.querySelectorAll('.chart')].map((el) => ({
    id: el.id,
    canvases: el.querySelectorAll('canvas').length,
    legend: [...el.querySelectorAll('.u-legend .u-series th .u-label')].map((x) => x.textContent),
    note: el.textContent.trim(),
  })));
  const rows = await page.evaluate(() => [...document.querySelectorAll('table tr')].map((tr) =>
    [...tr.querySelectorAll('td,th')].map((c) => c.textContent)));
  await ctx.close();
  return {errors, drawn, rows};
}

const browser = await chromium.launch({executablePath: CHROMIUM, headless: true,
  args: ['--no-sandbox', '--disable-gpu', '--disable-dev-shm-usage']});
try {
  const j = await open(browser, jobsHtml);
  ok(j.errors.length === 0, 'the job report runs without a script error', j.errors.join('\n'));
  ok(j.drawn.length === 4 && j.drawn.every((c) => c.canvases === 1),
    'the job report draws its four charts', JSON.stringify(j.drawn));
  ok(j.drawn.filter((c) => c.id !== 'chart-wait').every((c) =>
    c.legend.includes('fifo') && c.legend.includes('sjf')),
  'each job chart has a series per policy', JSON.stringify(j.drawn.map((c) => c.legend)));
  ok(j.rows.some((row) => row[0] === 'restart penalty' && row[1] === '0 s'),
    'the job report states its parameters');

  const s = await open(browser, serveHtml);
  ok(s.errors.length === 0, 'the serving report runs without a script error', s.errors.join('\n'));
  const ids = s.drawn.map((c) => c.id).sort();
  ok(JSON.stringify(ids) === JSON.stringify(['svc-0-e2e', 'svc-0-rate', 'svc-0-replicas',
    'svc-0-ttft']), 'the serving report has its four charts', JSON.stringify(ids));
  ok(s.drawn.every((c) => c.canvases === 1), 'each serving chart is drawn',
    JSON.stringify(s.drawn));
  for (const id of ['svc-0-replicas', 'svc-0-ttft', 'svc-0-e2e']) {
    const c = s.drawn.find((x) => x.id === id);
    ok(c && SERVE_POLICIES.every((p) => c.legend.includes(p)), `${id} has a series per policy`,
      JSON.stringify(c && c.legend));
  }
  for (const run of runs) {
    const row = s.rows.find((x) => x[0] === run.policy && x.length > 10);
    ok(row && row[1] === String(run.requests) &&
       row[2] === (run.slo_attainment * 100).toFixed(2) + '%' &&
       row[11] === run.gpu_hours.toFixed(2),
    `the serving report's ${run.policy} row has the --json figures`, JSON.stringify(row));
  }
} finally {
  await browser.close();
  fs.rmSync(tmp, {recursive: true, force: true});
}
console.log(`1..${testNo}`);
process.exit(failed ? 1 : 0);
