#!/usr/bin/env node
// history_test.mjs GPUORCH - the dashboard's history page (/history) and a
// node's page (/nodes/NAME) in Debian's headless Chromium, driven by
// playwright-core against a real controller and one agent of 4 fake GPUs
// whose figures are scripted (tests/fakenvml/README.md), so that the node's
// charts have known values. Prints TAP.
//
// The member's jobs end COMPLETED, FAILED (exit 3 and 5) and CANCELLED; the
// history must list them as GET /v1/accounting/jobs does (state, exit code),
// narrow to a state filter kept in the URL, page with ?limit=3 (Next,
// Previous), find a job by part of its name from the toolbar's search, show the
// same rows after a reload of a filtered URL and after a controller restart
// (the jobs read back from the store). The node's page must show its 4 GPUs
// (index, UUID, the last sample's figures, the job holding one) and four charts
// with one series per GPU, "GPU 0" to "GPU 3", at the scripted values. Both
// pages at 1,280 and 420 px: nothing overflows. No CSP violation, no script error.
//
// Without root and the account gpuorch-test1 the member's jobs cannot run:
// then the admin submits them, those still waiting are cancelled, and the
// checks that need the member's run are skipped (a TAP diag says so).

import * as H from './harness.mjs';

const {ok, diag, waitUntil} = H;
const NODE = 'gpu-h';
// GPU i's scripted figures: utilization %, power mW, temperature C, memory used MiB.
const SCRIPT = [
  {utilization: 91, power_mw: 310000, temperature_c: 71, memory_used_mib: 40960},
  {utilization: 62, power_mw: 240000, temperature_c: 63, memory_used_mib: 20480},
  {utilization: 33, power_mw: 170000, temperature_c: 52, memory_used_mib: 10240},
  {utilization: 4, power_mw: 90000, temperature_c: 38, memory_used_mib: 2048},
];
const ENDED = ['COMPLETED', 'FAILED', 'CANCELLED', 'TIMEOUT', 'PREEMPTED', 'NODE_FAIL'];

// The page's number formats (web/js/core.js): what a user reads for a value.
const fmtPct = (v) => v.toFixed(v < 10 && v > 0 ? 1 : 0) + '%';
const fmtGiB = (mib) => (mib / 1024).toFixed(mib < 10240 ? 1 : 0);

const cluster = new H.Cluster(process.argv[2], 'history');

// The rows of the history's table: one object per row keyed by column header (cell text).
function historyRows(page) {
  return page.evaluate(() => {
    const t = document.querySelector('#hist-jobs table');
    // No table: no rows when the page says nothing matches, else nothing read yet.
    if (!t) return /^no job matches/.test(document.getElementById('hist-jobs').textContent) ? [] : null;
    const heads = [...t.querySelectorAll('thead th')].map((th) => th.textContent);
    return [...t.querySelectorAll('tbody tr')].map((tr) => {
      const row = {};
      [...tr.cells].forEach((td, i) => {
        row[heads[i]] = td.textContent;
      });
      return row;
    });
  });
}

// What the history's row of job j should read, from the API's answer.
function expectedRow(j) {
  const atts = j.attempts || [];
  const a = atts.length ? atts[atts.length - 1] : {};
  const num = (v) => (typeof v === 'number' ? v : 0);
  return {'Job ID': String(j.id), Name: (j.spec && j.spec.name) || '-', User: j.user, Team: j.team,
    State: j.state, Exit: num(a.exit_code) + ':' + num(a.signal), Nodes: (a.nodes || []).join(', ') || '-'};
}

function rowsDiffer(want, got) {
  if (!got) return 'no table';
  if (got.length !== want.length) {
    return `${got.length} rows shown, ${want.length} wanted: ` + JSON.stringify(got.map((r) => r['Job ID']));
  }
  const out = [];
  want.forEach((w, i) => {
    for (const k of Object.keys(w)) {
      if (w[k] !== got[i][k]) {
        out.push(`row ${i} ${k}: shows ${JSON.stringify(got[i][k])}, want ${JSON.stringify(w[k])}`);
      }
    }
  });
  return out.join('\n');
}

// The API's history for query q (admin's token), as rows.
async function apiRows(q) {
  const r = await cluster.call('GET', '/v1/accounting/jobs?' + q);
  if (r.status !== 200) throw new Error(`GET /v1/accounting/jobs?${q}: ${r.status} ${r.text}`);
  return {rows: r.json.jobs.map(expectedRow), next: r.json.next_after};
}

// Polls until the page's table reads as the API's answer to q; the last difference ('' when equal).
async function tableMatches(page, q) {
  let diff = 'not read';
  await waitUntil(async () => {
    diff = rowsDiffer((await apiRows(q)).rows, await historyRows(page));
    return !diff;
  }, 15000);
  return diff;
}

const search = (page) => page.evaluate(() => location.pathname + location.search);
// The URL's query as a sorted object: {after: '3', limit: '3'}.
const queryOf = (page) => page.evaluate(() => JSON.stringify(Object.fromEntries(
  [...new URLSearchParams(location.search)].sort())));

async function main() {
  const runs = H.runsJobs();
  if (!runs) {
    diag(`not root or no ${H.JOB_USER}: the admin's jobs instead, cancelled while they wait; ` +
      'the checks of the member\'s runs (exit codes, the GPU holder) skipped');
  }
  await cluster.startServer();
  await cluster.put('/v1/pools/main', {description: 'H100 nodes'});
  await cluster.put('/v1/teams/research', {quotas: [{pool: 'main', guaranteed: 4, borrow_limit: 0}]});
  await cluster.put('/v1/teams/product', {quotas: [{pool: 'main', guaranteed: 1, borrow_limit: 0}]});
  await cluster.put('/v1/users/alice', {unix_user: H.JOB_USER, team: 'research', role: 'member'});
  const alice = (await cluster.call('POST', '/v1/users/alice/tokens?label=test')).json.token;
  cluster.startAgent(NODE, 1, 4, SCRIPT);
  const nodes = await cluster.nodesUp(1);
  if (!ok(nodes, 'one agent of 4 scripted fake GPUs registers and sends samples', cluster.logTail(NODE))) {
    throw new Error('no agent');
  }
  const node = nodes[0];

  const submit = (name, command, gpus = 1) => cluster.submit({team: 'research', name, command, cpus: 1,
    mem_mib: 64, gpus}, runs ? alice : cluster.admin);
  // A job that holds a GPU while the node's page is checked, cancelled after.
  const hold = await submit('hist-hold', ['sleep', '600']);
  const ids = [];
  ids.push(await submit('hist-ok-a', ['true']));
  ids.push(await submit('hist-fail-a', ['sh', '-c', 'exit 3']));
  ids.push(await submit('lr-sweep-b', ['true'], 0));
  ids.push(await submit('hist-ok-c', ['true'], 0));
  ids.push(await submit('hist-fail-b', ['sh', '-c', 'exit 5'], 0));
  ids.push(await submit('hist-ok-d', ['true'], 0));

  // -- The node's page. ------------------------------------------------------------------
  const held = runs ? await waitUntil(async () => {
    const j = (await cluster.call('GET', `/v1/jobs/${hold}`)).json;
    return j && j.state === 'RUNNING' && j.current_attempt && (j.current_attempt.gpus || []).length ? j : null;
  }) : null;
  if (runs) ok(held, 'the job hist-hold runs on a GPU of the node');
  await nodePage(node, held);

  // -- The jobs end. ---------------------------------------------------------------------
  await cluster.call('POST', `/v1/jobs/${hold}/cancel`);
  if (!runs) for (const id of ids) await cluster.call('POST', `/v1/jobs/${id}/cancel`);
  const all = [hold].concat(ids);
  const ended = await waitUntil(async () => {
    const r = await cluster.call('GET', '/v1/accounting/jobs?job=' + all.join(','));
    return r.json && r.json.jobs.length === all.length && r.json.jobs.every((j) => ENDED.includes(j.state))
      ? r.json.jobs : null;
  }, 60000);
  if (!ok(ended, 'the 7 jobs end')) throw new Error('jobs did not end');
  const byName = Object.fromEntries(ended.map((j) => [j.spec.name, j]));
  if (runs) {
    const want = {'hist-hold': 'CANCELLED', 'hist-ok-a': 'COMPLETED', 'hist-fail-a': 'FAILED',
      'lr-sweep-b': 'COMPLETED', 'hist-ok-c': 'COMPLETED', 'hist-fail-b': 'FAILED', 'hist-ok-d': 'COMPLETED'};
    const wrong = Object.keys(want).filter((n) => byName[n].state !== want[n]);
    ok(!wrong.length, 'the jobs end as their commands say (COMPLETED, FAILED, CANCELLED)',
      wrong.map((n) => `${n}: ${byName[n].state} (${byName[n].reason})`).join('\n'));
  }

  await historyPage(byName, runs, alice);
}

async function nodePage(node, held) {
  const page = await cluster.page();
  await page.goto(`${cluster.url}/nodes/${encodeURIComponent(NODE)}`);
  const shown = await waitUntil(() => page.evaluate(() => document.documentElement.dataset.page === 'node' &&
    document.querySelectorAll('#nd-gpus-body tbody tr').length));
  ok(shown === 4, `/nodes/${NODE} shows the node's page with 4 GPU rows`, `rows: ${shown}`);
  ok(await page.title() === `Node ${NODE} - gpuorch`, 'the page title names the node', await page.title());

  // Each row: the API's GPU (index, UUID) and its last sample (the scripted figures).
  const gpuRows = () => page.evaluate(() => [...document.querySelectorAll('#nd-gpus-body tbody tr')].map((tr) =>
    Object.fromEntries([...tr.cells].map((td) => [td.dataset.label, td.textContent]))));
  const want = node.gpus.slice().sort((a, b) => a.index - b.index).map((g) => {
    const s = SCRIPT[g.index];
    return {GPU: String(g.index), UUID: g.uuid, Util: fmtPct(s.utilization),
      'Mem used': fmtGiB(s.memory_used_mib) + ' GiB', Power: Math.round(s.power_mw / 1000) + ' W',
      Temp: s.temperature_c + ' C'};
  });
  let diff = '';
  await waitUntil(async () => {
    const got = await gpuRows();
    diff = want.map((w, i) => Object.keys(w).filter((k) => !got[i] || got[i][k] !== w[k])
      .map((k) => `GPU ${i} ${k}: ${got[i] && JSON.stringify(got[i][k])}, want ${JSON.stringify(w[k])}`).join('; '))
      .filter(Boolean).join('\n');
    return !diff;
  });
  ok(!diff, 'the GPU rows read the API\'s index and UUID and the last sample\'s utilization, memory, power, ' +
    'temperature', diff);
  const tiles = await page.evaluate(() => ['nd-state', 'nd-pool', 'nd-cpus', 'nd-mem']
    .map((id) => document.getElementById(id).textContent));
  ok(JSON.stringify(tiles) === JSON.stringify([node.state, node.pool, String(node.cpus), '64 GiB']),
    'the node\'s state, pool, CPUs and memory are the API\'s', JSON.stringify(tiles));
  if (held) {
    const uuid = held.current_attempt.gpus[0];
    const idx = node.gpus.find((g) => g.uuid === uuid).index;
    const cell = await waitUntil(async () => {
      const r = (await gpuRows())[idx];
      return r && r.Jobs.startsWith(String(held.id)) ? r.Jobs : null;
    });
    const href = await page.evaluate((i) => {
      const a = document.querySelectorAll('#nd-gpus-body tbody tr')[i].querySelector('td:last-child a');
      return a ? a.getAttribute('href') : null;
    }, idx);
    ok(cell && href === `/jobs/${held.id}`, `GPU ${idx} names the job holding it (${held.id}, a link to its page)`,
      `cell ${cell}, href ${href}`);
  }

  // The charts: one series per GPU, named by index, at the scripted values.
  const charts = [['nd-chart-util', (s) => s.utilization], ['nd-chart-mem', (s) => s.memory_used_mib / 1024],
    ['nd-chart-power', (s) => s.power_mw / 1000], ['nd-chart-temp', (s) => s.temperature_c]];
  for (const [id, value] of charts) {
    let got = null;
    const good = await waitUntil(async () => {
      got = await page.evaluate((cid) => {
        const c = window.gpuorchDash.charts[cid];
        if (!c) return null;
        const last = (vals) => [...vals].reverse().find((v) => v !== null && v !== undefined);
        return {keys: c.keys, last: c.plot.data.slice(1).map((v) => last(v)),
          points: Number(document.getElementById(cid).dataset.points)};
      }, id);
      return got && got.points > 0 && JSON.stringify(got.keys) === '["GPU 0","GPU 1","GPU 2","GPU 3"]' &&
        got.last.every((v, i) => typeof v === 'number' && Math.abs(v - value(SCRIPT[i])) < 0.01);
    });
    ok(good, `chart ${id}: a series per GPU of the node (GPU 0-3) with data points at the scripted values`,
      JSON.stringify(got));
  }
  // The series are the node's GPUs: what the API gives for node= (UUIDs) is what the page labels.
  const series = await cluster.call('GET', `/v1/metrics/series?metric=gpu_util&by=gpu&node=${NODE}&since=-15m`);
  const keys = (series.json && series.json.series || []).map((s) => s.key).sort();
  ok(JSON.stringify(keys) === JSON.stringify(node.gpus.map((g) => g.uuid).sort()),
    'GET /v1/metrics/series by=gpu&node= has the node\'s 4 GPUs (what the charts label GPU 0-3)', JSON.stringify(keys));

  await H.layoutChecks(cluster, page, 'the node\'s page', 'node', 6);
  const problems = await page.problems();
  ok(!problems.length, 'the node\'s page: no CSP violation, no script error', problems.join('\n'));
  await page.context().close();
}

async function historyPage(byName, runs, alice) {
  const page = await cluster.page();
  await page.goto(`${cluster.url}/history`);
  await waitUntil(() => page.evaluate(() => document.documentElement.dataset.page === 'history' &&
    !!document.querySelector('#hist-jobs table')));
  const defaultQ = 'state=' + ENDED.join(',') + '&limit=50';
  let diff = await tableMatches(page, defaultQ);
  ok(!diff, '/history lists the ended jobs with the API\'s state, exit code, user, team and nodes', diff);
  const failed = (await historyRows(page) || []).find((r) => r.Name === 'hist-fail-a');
  if (runs) ok(failed && failed.State === 'FAILED' && failed.Exit === '3:0', 'hist-fail-a reads FAILED, exit 3:0',
    JSON.stringify(failed));
  const idHref = await page.evaluate(() => {
    const a = document.querySelector('#hist-jobs tbody tr td a');
    return a ? a.getAttribute('href') : null;
  });
  ok(idHref === `/jobs/${byName['hist-hold'].id}`, 'a job\'s id links to its page', idHref);

  // The state filter: only FAILED checked, one box at a time, as a user clicks them.
  const len0 = await page.evaluate(() => history.length);
  for (const s of ENDED) if (s !== 'FAILED') await page.uncheck(`#hist-states input[value="${s}"]`);
  const url = await waitUntil(async () => ((await search(page)) === '/history?state=FAILED' ? true : null), 5000);
  ok(url, 'unchecking every ended state but FAILED puts state=FAILED in the URL', await search(page));
  diff = await tableMatches(page, 'state=FAILED&limit=50');
  const rows = await historyRows(page);
  // Without runs nothing failed: the table is then the API's empty answer.
  ok(!diff && (!runs || (rows && rows.length === 2 && rows.every((r) => r.State === 'FAILED'))),
    'the FAILED filter narrows the table to the failed jobs', diff || JSON.stringify(rows));
  ok(await page.evaluate(() => history.length) === len0, 'a change of filter replaces the URL (no new history entry)');

  // A reload of the filtered URL: the same rows, the controls as the URL says.
  await page.goto(`${cluster.url}/history?state=FAILED&q=hist`);
  diff = await tableMatches(page, 'state=FAILED&q=hist&limit=50');
  const controls = await page.evaluate(() => ({q: document.getElementById('hist-q').value,
    states: [...document.querySelectorAll('#hist-states input:checked')].map((c) => c.value)}));
  ok(!diff && controls.q === 'hist' && JSON.stringify(controls.states) === '["FAILED"]',
    'loading /history?state=FAILED&q=hist shows the API\'s rows, with the filters in the controls',
    diff + ' ' + JSON.stringify(controls));
  const before = await historyRows(page);
  await page.reload();
  await waitUntil(() => page.evaluate(() => !!document.querySelector('#hist-jobs table')));
  diff = rowsDiffer(before.map((r) => ({'Job ID': r['Job ID'], State: r.State, Exit: r.Exit})),
    await waitUntil(async () => {
      const r = await historyRows(page);
      return r && r.length === before.length ? r : null;
    }) || []);
  ok(!diff, 'a reload of the filtered URL shows the same rows', diff);

  // The time window, typed in the page's own inputs and applied: since a day
  // ahead, nothing (every job ended before); since an hour ago, all of them.
  await page.goto(`${cluster.url}/history`);
  for (const [aheadMs, rowsWanted] of [[86400000, 0], [-3600000, 7]]) {
    const at = new Date(Date.now() + aheadMs);
    at.setSeconds(0, 0);
    const pad = (n) => String(n).padStart(2, '0');
    await page.fill('#hist-since', `${at.getFullYear()}-${pad(at.getMonth() + 1)}-${pad(at.getDate())}T` +
      `${pad(at.getHours())}:${pad(at.getMinutes())}`);
    await page.click('#hist-form button[type="submit"]');
    const iso = at.toISOString().replace(/\.000Z$/, 'Z');
    await waitUntil(async () => JSON.parse(await queryOf(page)).since === iso, 5000);
    const sinceQ = JSON.parse(await queryOf(page)).since;
    diff = await tableMatches(page, `state=${ENDED.join(',')}&since=${encodeURIComponent(iso)}&limit=50`);
    const n = await page.evaluate(() => document.querySelectorAll('#hist-jobs tbody tr').length);
    ok(sinceQ === iso && !diff && n === rowsWanted, `since ${aheadMs > 0 ? 'a day ahead' : 'an hour ago'} ` +
      `(the page's input, Apply): since= in the URL, ${rowsWanted} rows as the API says`,
    `since=${sinceQ} want ${iso}; rows ${n}; ${diff}`);
  }

  // Paging: 3 a page (?limit=3): Next follows next_after, Previous comes back.
  await page.goto(`${cluster.url}/history?limit=3`);
  diff = await tableMatches(page, 'state=' + ENDED.join(',') + '&limit=3');
  const p1 = await apiRows('state=' + ENDED.join(',') + '&limit=3');
  ok(!diff && p1.next !== null, 'with ?limit=3 the first page has the API\'s first 3 jobs', diff);
  await page.click('#hist-next');
  const q2 = 'state=' + ENDED.join(',') + '&limit=3&after=' + p1.next;
  diff = await tableMatches(page, q2);
  const s2 = await search(page);
  const q2shown = await queryOf(page);
  ok(!diff && q2shown === JSON.stringify({after: String(p1.next), limit: '3'}),
    'Next shows the second page (after=next_after in the URL)', diff + ' ' + s2);
  const p2 = await apiRows(q2);
  await page.click('#hist-next');
  diff = await tableMatches(page, 'state=' + ENDED.join(',') + '&limit=3&after=' + p2.next);
  const last = await page.evaluate(() => ({rows: document.querySelectorAll('#hist-jobs tbody tr').length,
    next: document.getElementById('hist-next').disabled, note: document.getElementById('hist-note').textContent}));
  ok(!diff && last.rows === 1 && last.next && last.note === 'job 7, page 3',
    'Next again: the third page has the seventh job, and no Next', diff + ' ' + JSON.stringify(last));
  await page.click('#hist-prev');
  diff = await tableMatches(page, q2);
  ok(!diff && (await search(page)) === s2, 'Previous goes back to the second page', diff + ' ' + (await search(page)));
  await page.click('#hist-prev');
  diff = await tableMatches(page, 'state=' + ENDED.join(',') + '&limit=3');
  ok(!diff && (await search(page)) === '/history?limit=3', 'Previous again: the first page', diff);

  // The toolbar's search: text that is not a job id searches the history (q=).
  await page.fill('#search-q', 'sweep');
  await page.press('#search-q', 'Enter');
  await waitUntil(async () => (await search(page)) === '/history?q=sweep');
  diff = await tableMatches(page, 'state=' + ENDED.join(',') + '&q=sweep&limit=50');
  const found = await historyRows(page);
  ok(!diff && found.length === 1 && found[0].Name === 'lr-sweep-b',
    'the search box\'s "sweep" opens /history?q=sweep, which finds lr-sweep-b only',
    diff + ' ' + JSON.stringify(found));

  // Nodes link to the node's page.
  if (runs) {
    await page.goto(`${cluster.url}/history?q=hist-ok-a`);
    await waitUntil(() => page.evaluate(() => !!document.querySelector('#hist-jobs .hist-nodes a')));
    await page.click('#hist-jobs .hist-nodes a');
    const moved = await waitUntil(async () => (await search(page)) === `/nodes/${NODE}` &&
      page.evaluate(() => document.documentElement.dataset.page === 'node'));
    ok(moved, 'a job\'s node links to the node\'s page');
  }

  await page.goto(`${cluster.url}/history`);
  await waitUntil(() => page.evaluate(() => !!document.querySelector('#hist-jobs table')));
  await H.layoutChecks(cluster, page, 'the history', 'history', 2);

  // A controller restart: the page keeps polling and reads the jobs back from the store.
  await page.evaluate(() => {
    document.querySelector('#hist-jobs table').dataset.before = '1';
  });
  const want = (await apiRows(defaultQ)).rows;
  await cluster.restartServer();
  const after = await waitUntil(() => page.evaluate(() => {
    const t = document.querySelector('#hist-jobs table');
    return t && !t.dataset.before && document.getElementById('status').textContent === 'live';
  }), 30000);
  diff = rowsDiffer(want, await historyRows(page));
  ok(after && !diff, 'after a controller restart the page, still polling, shows the same ended jobs', diff);
  diff = await tableMatches(page, defaultQ);
  ok(!diff, 'and they are what the restarted controller\'s API answers', diff);
  let problems = await page.problems();
  // The restart's failed requests are the browser's network errors, not the page's.
  problems = problems.filter((p) => !/Failed to load resource|ERR_CONNECTION_REFUSED/.test(p));
  ok(!problems.length, 'the history: no CSP violation, no script error', problems.join('\n'));
  await page.context().close();

  // A member: users may not be listed (403): the user filter stays a text input; teams are a list.
  const mp = await cluster.page(alice);
  await mp.goto(`${cluster.url}/history?user=alice`);
  const kinds = await waitUntil(() => mp.evaluate(() => {
    const t = document.getElementById('hist-team');
    const u = document.getElementById('hist-user');
    return t && t.tagName === 'SELECT' && !/^loading/.test(document.getElementById('hist-jobs').textContent)
      ? {team: t.tagName, options: [...t.options].map((o) => o.value), user: u.tagName + ':' + u.value} : null;
  }));
  ok(kinds && kinds.user === 'INPUT:alice' && JSON.stringify(kinds.options) === '["","research"]',
    'a member: a team list (its own team), a free text user filter (GET /v1/users is 403)', JSON.stringify(kinds));
  diff = await tableMatches(mp, defaultQ + '&user=alice');
  ok(!diff, 'a member\'s history with user=alice is the API\'s', diff);
  problems = (await mp.problems()).filter((p) => !/403/.test(p));
  ok(!problems.length, 'the member\'s history: no CSP violation, no script error', problems.join('\n'));
  await mp.context().close();
}

main().then(() => cluster.finish(), (e) => cluster.finish(e));
