#!/usr/bin/env node
// range_test.mjs GPUORCH - the dashboard's time range, search and filters, in
// Debian's headless Chromium through playwright-core (tests/browser/harness.mjs):
// a real `gpuorch server` (one-minute aggregates every 2 s here,
// --metrics-minute-ms) and one real agent of 2 fake GPUs with scripted
// utilization, and jobs that wait (the node has too few GPUs for them).
//
// The controller is restarted (a clean stop writes the open minutes to the
// store; the new one's raw rings start empty), so every chart's values from
// before the restart can only come from the stored aggregates. Then: the
// overview at /?range=1h draws the utilization and queue charts with values
// from before the restart; choosing 6 h reloads them (a series request with
// since=-6h and a step of 2 minutes, the URL saying range=6h, the button on);
// a reload of that URL keeps 6 h; a custom range (from, to) narrows the
// charts to it and is in the URL; 15 min goes back to the default. Search:
// typing part of a job's name filters the queue to it (the URL has q=), the
// team and user filters narrow the tables, the id cells link to /jobs/ID (a
// click opens the job's page, pending with its reason), and Enter on a job id
// in the search box opens it too. Layout at 1,280 and 420 px with the toolbar
// (nothing overflows; screenshots range-1280.png, range-420.png). No CSP
// violation or script error. Prints TAP.

import * as H from './harness.mjs';

const {ok, diag, waitUntil} = H;
const cluster = new H.Cluster(process.argv[2], 'range');

// The chart in `id`: its x values and, per series, [t, value] of each value drawn.
function chartData(page, id) {
  return page.evaluate((cid) => {
    const c = window.gpuorchDash.charts[cid];
    if (!c) return null;
    const [t, ...series] = c.plot.data;
    return {keys: c.keys, t: Array.from(t), values: series.map((s) => Array.from(s).map((v, i) =>
      (v === null || v === undefined ? null : [t[i], v])).filter(Boolean))};
  }, id);
}

async function main() {
  await cluster.startServer(['--metrics-minute-ms', '2000']);
  await cluster.put('/v1/pools/main', {description: 'range test'});
  await cluster.put('/v1/teams/research', {quotas: [{pool: 'main', guaranteed: 8, borrow_limit: 0}]});
  await cluster.put('/v1/teams/product', {quotas: [{pool: 'main', guaranteed: 8, borrow_limit: 0}]});
  cluster.startAgent('gpu-r', 7, 2, [{utilization: 40, power_mw: 200000, temperature_c: 50},
    {utilization: 80, power_mw: 500000, temperature_c: 70}]);
  const nodes = await cluster.nodesUp(1);
  if (!ok(nodes, 'one agent of 2 fake GPUs registers and sends samples', cluster.logTail('gpu-r'))) {
    throw new Error('no agent');
  }
  // Jobs that wait: 4 GPUs each on a node of 2.
  const spec = (name, team) => ({name, team, gpus: 4, command: ['sleep', '60'], cpus: 1, mem_mib: 64});
  const ids = {
    alpha: await cluster.submit(spec('alpha-sweep', 'research')),
    beta: await cluster.submit(spec('beta-train', 'research')),
    gamma: await cluster.submit(spec('gamma-eval', 'product')),
  };
  // Samples and queue points for a few stored minutes (2 s each here).
  const before = await waitUntil(async () => {
    const r = await cluster.call('GET', '/v1/metrics/series?metric=queue_length&by=team&since=-1m&step=1s');
    const s = r.json && (r.json.series || []).find((x) => x.key === 'research');
    return s && s.values.filter((v) => v === 2).length >= 6 ? r.json : null;
  });
  ok(before, 'the queue length of team research reads 2 for a few seconds before the restart');
  await cluster.restartServer();
  const restartS = Date.now() / 1000;
  ok(await cluster.nodesUp(1), 'after a restart of the controller the agent is back');

  const page = await cluster.page();
  const seriesRequests = [];
  page.on('request', (r) => {
    if (r.url().includes('/v1/metrics/series')) seriesRequests.push(r.url());
  });
  const polls = () => page.evaluate(() => Number(document.documentElement.dataset.pagePolls || 0));

  // 1 h: the values from before the restart come from the stored minutes.
  await page.goto(cluster.url + '/?range=1h');
  await waitUntil(async () => (await polls()) >= 1);
  const stored = {};
  for (const id of ['chart-util-node', 'chart-queue']) {
    stored[id] = await waitUntil(async () => {
      const d = await chartData(page, id);
      const old = d ? d.values.flat().filter(([t]) => t < restartS - 2) : [];
      return old.length ? {d, old} : null;
    });
  }
  const util = stored['chart-util-node'];
  ok(util && util.d.keys.includes('gpu-r') && util.old.every(([, v]) => Math.abs(v - 60) < 0.6),
    'range 1 h: the utilization chart has the node\'s values (60 %, the mean of 40 and 80) from before ' +
    'the restart, read from the stored one-minute aggregates', JSON.stringify(util && util.old.slice(0, 5)));
  const queue = stored['chart-queue'];
  ok(queue && queue.d.keys.includes('research') && queue.old.some(([, v]) => v === 2),
    'range 1 h: the queue chart has team research\'s 2 waiting jobs from before the restart (stored minutes)',
    JSON.stringify(queue && queue.d.keys));
  const note = await page.evaluate(() =>
    document.getElementById('chart-util-node').parentNode.querySelector('.panel-note').textContent);
  ok(await page.evaluate(() => (document.querySelector('#range button.on') || {}).textContent) === '1h' &&
     note === '%, last 1 h', 'the 1h button is on and the chart\'s note says "%, last 1 h"', note);

  // 6 h, by its button: the charts reload with a step of 2 minutes.
  seriesRequests.length = 0;
  await page.click('#range button[data-range="6h"]');
  const six = await waitUntil(async () => {
    const d = await chartData(page, 'chart-util-node');
    return page.url().includes('range=6h') && d && d.t.length > 1 && d.t[1] - d.t[0] === 120 ? d : null;
  });
  ok(six, 'the 6h button: the URL says range=6h and the utilization chart redraws with 2-minute steps',
    page.url());
  ok(seriesRequests.some((u) => u.includes('since=-6h') && u.includes('step=120s') &&
    u.includes('metric=queue_length')), 'its series are read again for 6 h (since=-6h, step=120s)',
  seriesRequests.join('\n'));
  ok(six && six.values.flat().some(([t]) => t < restartS - 2), '... and still show the stored values before the restart');
  await page.reload();
  await waitUntil(async () => (await polls()) >= 1);
  ok(await page.evaluate(() => (document.querySelector('#range button.on') || {}).textContent) === '6h',
    'a reload of that URL (a shared view) keeps 6 h');

  // A custom range: from 10 minutes ago to 5 minutes from now.
  await page.click('#range-custom-btn');
  const localInput = (ms) => {
    const d = new Date(ms);
    const pad = (n) => String(n).padStart(2, '0');
    return `${d.getFullYear()}-${pad(d.getMonth() + 1)}-${pad(d.getDate())}T${pad(d.getHours())}:${pad(d.getMinutes())}`;
  };
  const from = Math.floor((Date.now() - 10 * 60000) / 60000) * 60000;
  const to = Math.floor((Date.now() + 5 * 60000) / 60000) * 60000;
  await page.fill('#range-from', localInput(from));
  await page.fill('#range-to', localInput(to));
  await page.click('#range-custom button[type="submit"]');
  const custom = await waitUntil(async () => {
    const d = await chartData(page, 'chart-util-node');
    const u = new URL(page.url());
    return u.searchParams.get('from') && d && d.t[0] >= from / 1000 - 10 && d.t[d.t.length - 1] <= to / 1000 &&
      d.values.flat().length ? d : null;
  });
  ok(custom, 'a custom range: from and to in the URL, the chart within them, with values',
    page.url() + ' ' + JSON.stringify(custom && custom.t.slice(0, 3)));
  ok(await page.evaluate(() => (document.querySelector('#range button.on') || {}).textContent) === 'custom',
    'the custom button is on');
  await page.fill('#range-to', localInput(from - 60000));
  await page.click('#range-custom button[type="submit"]');
  ok(await page.isVisible('#range-error') && (await page.textContent('#range-error')).includes('before'),
    'a custom range whose from is not before its to is refused with a message');
  await page.click('#range button[data-range="15m"]');
  await waitUntil(async () => !page.url().includes('from='));
  ok(!page.url().includes('range=') && !page.url().includes('from='), '15m goes back to the default (no range in the URL)',
    page.url());

  // Search and filters on the queue.
  const queueIds = () => page.evaluate(() => [...document.querySelectorAll('#queue tbody tr')]
    .map((tr) => Number(tr.cells[0].textContent)));
  await waitUntil(async () => (await queueIds()).length === 3);
  await page.fill('#search-q', 'SWEEP');
  const one = await waitUntil(async () => {
    const q = await queueIds();
    return q.length === 1 && q[0] === ids.alpha && page.url().includes('q=SWEEP') ? q : null;
  });
  ok(one, 'typing part of a job\'s name (any case) in the search box filters the queue to it; the URL has q=',
    JSON.stringify(await queueIds()) + ' ' + page.url());
  ok((await page.textContent('#queue-note')) === '1 of 3 waiting', 'the queue\'s note says 1 of 3 waiting',
    await page.textContent('#queue-note'));
  await page.fill('#search-q', '');
  await waitUntil(async () => (await queueIds()).length === 3);
  await page.selectOption('#f-team', 'product');
  const prod = await waitUntil(async () => {
    const q = await queueIds();
    return q.length === 1 && q[0] === ids.gamma && page.url().includes('team=product') ? q : null;
  });
  ok(prod, 'the team filter (product) narrows the queue to that team\'s job; the URL has team=product',
    JSON.stringify(await queueIds()));
  await page.click('#f-clear');
  ok(await waitUntil(async () => (await queueIds()).length === 3 && !page.url().includes('team=')),
    'Clear filters shows every waiting job again');

  // The id cell links to the job's page; Enter on an id opens it too.
  const href = await page.getAttribute(`#queue tbody tr a[href="/jobs/${ids.beta}"]`, 'href');
  ok(href === `/jobs/${ids.beta}`, 'each id in the queue links to its job\'s page', String(href));
  // A click on it opens the job's page in place: pending, and why it waits.
  await page.click(`#queue tbody tr a[href="/jobs/${ids.beta}"]`);
  const opened = await waitUntil(async () => {
    const st = await page.evaluate(() => {
      const p = document.getElementById('job-page');
      const r = document.getElementById('job-wait-reason');
      return p && r ? {state: p.dataset.jobState, reason: r.textContent} : null;
    });
    return st && st.state === 'PENDING' && st.reason.length > 10 ? st : null;
  });
  const jobApi = await cluster.call('GET', `/v1/jobs/${ids.beta}`);
  ok(opened && page.url().endsWith(`/jobs/${ids.beta}`) && jobApi.json.wait_reason &&
     opened.reason.endsWith(jobApi.json.wait_reason.replace(/^[a-z_]+: /, '')),
  'a click on the id opens the job\'s page in place: PENDING, with the reason the API gives',
  JSON.stringify(opened) + ' ' + (jobApi.json && jobApi.json.wait_reason));
  await page.goBack();
  await waitUntil(async () => (await queueIds()).length === 3);
  await page.fill('#search-q', String(ids.beta));
  await page.press('#search-q', 'Enter');
  ok(await waitUntil(async () => page.url().endsWith(`/jobs/${ids.beta}`) &&
    await page.evaluate(() => document.documentElement.dataset.page) === 'job'),
  'Enter on a job id in the search box opens /jobs/ID', page.url());
  await page.goBack();
  ok(await waitUntil(async () => await page.evaluate(() => document.documentElement.dataset.page) === 'overview'),
    'Back returns to the overview');

  // Layout with the toolbar and the custom range open.
  await page.click('#range-custom-btn');
  await H.layoutChecks(cluster, page, 'the overview with the toolbar and the custom range open', 'range', 10);
  const problems = await page.problems();
  ok(!problems.length, 'no CSP violation and no script error in the page', problems.join('\n'));
  diag(`restart at ${Math.round(restartS)}; series requests seen: ${seriesRequests.length}`);
}

try {
  await main();
  await cluster.finish();
} catch (e) {
  await cluster.finish(e);
}
