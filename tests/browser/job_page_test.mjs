#!/usr/bin/env node
// job_page_test.mjs GPUORCH - the dashboard's job page (/jobs/ID, web/js/job.js)
// in Debian's headless Chromium driven by playwright-core (tests/browser/harness.mjs):
// a real `gpuorch server` and two `gpuorch agent`s of 4 fake GPUs each (no
// script: the fake NVML reports each GPU's utilization from its jobs' CPU time),
// a team with a quota and a member whose jobs run as gpuorch-test1.
//
// As the member: a job that burns a core and prints a line every ~0.2 s, a
// 2-node gang whose ranks print their own text, a job that exits 3, an array
// of two tasks, a job too big to start now. Checks, each read from the page's
// DOM and compared with the API: the overview's Running table links the job
// to its page (a click moves there in place); the page's state, header facts,
// attempts (nodes and GPUs as the API lists them); the log growing while the
// attempt runs, from one stream that the refreshes do not restart; the
// utilization and memory charts drawn with one series per GPU of the attempt
// (labelled node/index, as GET /v1/nodes maps the UUIDs); the gang's rank
// selector showing rank 1's own text; the ended job's exit code and its
// stderr; an array task's page by its 41_7 id; the pending job's wait reason
// and estimated start; an unknown id's 404 message; the layout at 1,280 and
// 420 px (screenshots job-page-1280.png and job-page-420.png); no CSP
// violation and no script error. Without root or the gpuorch-test1 account
// the jobs cannot run: the checks that need them are left out (a TAP
// diagnostic says so) and the rest run. Prints TAP.

import * as H from './harness.mjs';

const c = new H.Cluster(process.argv[2], 'job-page');

// The burner: a line every ~0.2 s, a core busy in between (the fake NVML's utilization).
const BURN = 'i=0; while [ $i -lt 3000 ]; do echo line $i; i=$((i+1)); b=0; ' +
  'while [ $b -lt 200000 ]; do b=$((b+1)); done; done';
// Each rank of the gang writes its own text (SLURM_NODEID: its index in the job's nodes).
// About 3 MB of output at once: more than the log box keeps (about the last 2 MB).
const LOUD = 'awk \'BEGIN { s = sprintf("%92s", ""); gsub(/ /, "x", s); for (i = 1; i <= 30000; i++) print i, s }\'';
const GANG = 'i=0; while [ $i -lt 1200 ]; do echo "rank $SLURM_NODEID says $i"; i=$((i+1)); sleep 0.5; done';

// -- Reading the page. ---------------------------------------------------------------

// The label-value pairs of the list in #ID: {label: text}.
function facts(page, id) {
  return page.evaluate((box) => {
    const out = {};
    for (const row of document.querySelectorAll(`#${box} .kv-row`)) {
      out[row.querySelector('dt').textContent] = row.querySelector('dd').textContent;
    }
    return out;
  }, id);
}

function logBox(page) {
  return page.evaluate(() => {
    const e = document.getElementById('job-log');
    const note = document.getElementById('job-log-status');
    return e ? {text: e.textContent, bytes: Number(e.dataset.bytes), state: e.dataset.state, key: e.dataset.key,
      note: note ? note.textContent : ''} : null;
  });
}

const polls = (page) => page.evaluate(() => Number(document.documentElement.dataset.pagePolls || 0));
const pageState = (page) => page.evaluate(() => {
  const b = document.getElementById('job-state');
  return b && !document.getElementById('job-head-panel').hidden ? b.textContent : null;
});

async function jobOf(id) {
  const r = await c.call('GET', '/v1/jobs/' + id);
  return r.json;
}

// Opens /jobs/ID in place (as a link does) and waits for the job's state to show.
async function openJob(page, id) {
  await page.evaluate((href) => window.GPO.navigate(href), '/jobs/' + id);
  return H.waitUntil(() => pageState(page), 15000);
}

// -- The checks. -----------------------------------------------------------------------

async function main() {
  const runs = H.runsJobs();
  if (!runs) H.diag(`not root or no ${H.JOB_USER}: the jobs cannot run; only what a pending job shows is checked`);
  await c.startServer();
  await c.put('/v1/pools/main', {description: 'H100 nodes'});
  await c.put('/v1/teams/research', {quotas: [{pool: 'main', guaranteed: 8, borrow_limit: 0}]});
  await c.put('/v1/users/alice', {unix_user: H.JOB_USER, team: 'research', role: 'member'});
  const alice = (await c.call('POST', '/v1/users/alice/tokens?label=test')).json.token;
  c.startAgent('gpu-a', 1, 4);
  c.startAgent('gpu-b', 2, 4);
  const nodes = await c.nodesUp(2);
  if (!H.ok(nodes, 'two agents of 4 fake GPUs register and send samples', c.logTail('server'))) {
    throw new Error('no agents');
  }
  const gpuType = nodes[0].gpus[0].gpu_type;
  await c.call('PUT', '/v1/prices/' + encodeURIComponent(gpuType), {per_gpu_hour: 2.49});
  // uuid -> "node/index", as the page labels the chart's series.
  const label = {};
  for (const n of nodes) for (const g of n.gpus) label[g.uuid] = n.name + '/' + g.index;

  const token = runs ? alice : c.admin;
  const submit = (spec) => c.submit(Object.assign({team: 'research', cpus: 1, mem_mib: 256}, spec), token);
  const busy = await submit({name: 'burner', gpus: 1, project: 'llm', command: ['sh', '-c', BURN]});
  const gang = await submit({name: 'gang', nodes: 2, gpus_per_node: 1, mem_per_node_mib: 256, mem_mib: undefined,
    cpus: undefined, command: ['sh', '-c', GANG]});
  const fail = await submit({name: 'fails', gpus: 1, command: ['sh', '-c', 'echo going; echo broken >&2; exit 3']});
  const loud = await submit({name: 'loud', gpus: 0, command: ['sh', '-c', LOUD]});

  const page = await c.page(alice);
  const logRequests = [];
  page.on('request', (r) => {
    if (r.url().includes('/logs?')) logRequests.push(r.url());
  });
  // Streams the page aborted (playwright: requestfailed, net::ERR_ABORTED).
  logRequests.aborted = [];
  page.on('requestfailed', (r) => {
    if (r.url().includes('/logs?')) logRequests.aborted.push(r.url());
  });
  await page.goto(c.url + '/');
  await H.waitUntil(() => page.evaluate(() => document.documentElement.dataset.loaded === '1'));

  if (runs) await runningChecks(page, {busy, gang, fail, loud, label, logRequests, token});
  else await pendingOnlyChecks(page, busy);

  // A job that cannot start now: why it waits. With the jobs above running, 4 GPUs are more
  // than any node has free; without them, 5 are more than any node has.
  const big = await submit({name: 'too-big', gpus: runs ? 4 : 5, command: ['sleep', '600']});
  const bigApi = await H.waitUntil(async () => {
    const j = await jobOf(big);
    return j && j.state === 'PENDING' && j.wait_reason ? j : null;
  });
  await openJob(page, big);
  const wait = await H.waitUntil(async () => {
    const w = await page.evaluate(() => {
      const p = document.getElementById('job-wait-panel');
      const r = document.getElementById('job-wait-reason');
      return p && !p.hidden && r ? {text: r.textContent, code: (r.querySelector('.badge') || {}).textContent} : null;
    });
    return w && w.code ? w : null;
  });
  const m = bigApi && /^([a-z_]+): (.*)$/s.exec(bigApi.wait_reason);
  H.ok(wait && m && wait.code === m[1] && wait.text.includes(m[2].slice(0, 30)),
    'a pending job\'s page says why it waits: the code as a badge and the sentence (wait_reason)',
    JSON.stringify({wait, api: bigApi && bigApi.wait_reason}));
  const waitFacts = await facts(page, 'job-wait');
  H.ok(waitFacts['estimated start'] && waitFacts['estimated start'] !== '-',
    'and its estimated start (or the note why there is none)', JSON.stringify(waitFacts));
  const noLog = await logBox(page);
  H.ok(noLog && noLog.state === 'none' && /not started/.test(noLog.note),
    'a job that has not started has no log to read, and says so', JSON.stringify(noLog));

  // An id the server does not know: a clear message, no crash.
  const before = (await page.problems()).length;
  await page.evaluate(() => window.GPO.navigate('/jobs/999999'));
  const missing = await H.waitUntil(() => page.evaluate(() => {
    const e = document.getElementById('job-missing');
    return e && e.offsetParent ? e.textContent : null;
  }), 10000);
  H.ok(missing && /no job 999999/i.test(missing) && missing.includes('404'),
    'a job id that does not exist shows "No job 999999 ... (404)", not a crash', String(missing));
  const hiddenRest = await page.evaluate(() => document.getElementById('job-attempts-panel').hidden &&
    document.getElementById('job-log-panel').hidden);
  H.ok(hiddenRest, 'and nothing else of a job (no empty attempts or log)');
  // Chromium logs each 404 answer as "Failed to load resource": the page's own request, expected here.
  const problems = (await page.problems()).filter((p, i) => i < before || !/Failed to load resource.*404/.test(p));
  H.ok(problems.length === 0, 'no CSP violation and no script error in the page', problems.join('\n'));
}

// Everything that needs running jobs.
async function runningChecks(page, {busy, gang, fail, loud, label, logRequests, token}) {
  const busyApi = await H.waitUntil(async () => {
    const j = await jobOf(busy);
    return j && j.state === 'RUNNING' && j.current_attempt && j.current_attempt.state === 'RUNNING' ? j : null;
  });
  if (!H.ok(busyApi, 'the burner runs', c.logTail('gpu-a'))) throw new Error('the job does not run');

  // The overview's Running table links the job id to its page.
  const sel = `#running a[href="/jobs/${busy}"]`;
  const linkShown = await H.waitUntil(() => page.$(sel), 15000);
  if (H.ok(linkShown, 'the overview\'s Running table links the job id to /jobs/ID')) {
    await page.click(sel);
  } else {
    await page.evaluate((href) => window.GPO.navigate(href), '/jobs/' + busy);
  }
  const shownState = await H.waitUntil(() => pageState(page), 15000);
  const where = await page.evaluate(() => ({path: location.pathname, page: document.documentElement.dataset.page,
    title: document.title}));
  H.ok(where.path === '/jobs/' + busy && where.page === 'job' && where.title.startsWith('Job ' + busy),
    'the job\'s page opens in place at /jobs/ID, titled "Job ID"', JSON.stringify(where));
  H.ok(shownState === 'RUNNING', 'its state badge says RUNNING, as the API', String(shownState));
  const head = await facts(page, 'job-facts');
  H.ok(head.team === 'research' && head.user === 'alice' && head.project === 'llm' && head.GPUs === '1' &&
    head.priority === busyApi.priority && head.nodes === busyApi.current_attempt.nodes.join(', ') &&
    head.started !== '-' && head.ended === '-' && /^\d/.test(head.cost),
  'the header: team, user, project, priority class, GPUs, nodes, started, not ended, cost',
  JSON.stringify(head));

  // The attempts, against the API's.
  const att = await H.waitUntil(async () => {
    const rows = await H.tableRows(page, 'job-attempts');
    return rows && rows.length ? rows : null;
  });
  const a1 = busyApi.attempts[0];
  const row = att && att[0];
  H.ok(att && att.length === busyApi.attempts.length && row.Attempt === String(a1.attempt) &&
    row['State.badge'] === 'RUNNING' && row.Nodes === a1.nodes.join(', ') &&
    row['GPUs.count'] === a1.gpus.length && row['GPUs.uuids'].every((u, i) => u.startsWith(a1.gpus[i] + '|')) &&
    row.Start !== '-' && row.End === '-' && row.Exit === '-',
  'the attempts table: the attempt, RUNNING, its node and its GPUs (UUIDs in the titles) as the API lists them',
  JSON.stringify({att, api: busyApi.attempts}));

  // The log grows while the attempt runs, from one stream.
  const first = await H.waitUntil(async () => {
    const l = await logBox(page);
    return l && l.state === 'following' && /line 0\n/.test(l.text) ? l : null;
  });
  H.ok(first, 'the log box follows the running attempt: its first lines appear', JSON.stringify(await logBox(page)));
  const lines = (t) => (t.match(/^line \d+$/gm) || []).length;
  const p0 = await polls(page);
  const later = first && await H.waitUntil(async () => {
    const l = await logBox(page);
    return l && lines(l.text) >= lines(first.text) + 5 && (await polls(page)) >= p0 + 2 ? l : null;
  }, 40000);
  H.ok(later && later.bytes > first.bytes && later.text.startsWith(first.text),
    'the log grows between two reads (more lines appended, the earlier ones kept)',
    JSON.stringify({first: first && first.bytes, later: later && later.bytes}));
  const forThis = logRequests.filter((u) => u.includes(`/v1/jobs/${busy}/logs?`));
  H.ok(forThis.length === 1 && forThis[0].includes('follow=1') && forThis[0].includes('stream=stdout'),
    'one follow request for the whole time: the page\'s refreshes do not restart the stream',
    forThis.join('\n'));

  // The charts: one series per GPU of the attempt, labelled node/index, with data.
  const chart = await H.waitUntil(async () => {
    const ch = await H.chartOf(page, 'chart-job-util');
    return ch && ch.points > 0 ? ch : null;
  }, 40000);
  const wantKeys = a1.gpus.map((u) => label[u]).sort();
  H.ok(chart && JSON.stringify(chart.keys.slice().sort()) === JSON.stringify(wantKeys),
    'the utilization chart has data points and one series per GPU of the attempt (node/index)',
    JSON.stringify({chart, wantKeys}));
  const grown = chart && await H.waitUntil(async () => {
    const ch = await H.chartOf(page, 'chart-job-util');
    return ch && ch.t[1] > chart.t[1] ? ch : null;
  }, 30000);
  H.ok(grown && grown.t[0] === chart.t[0],
    'while the job runs the chart\'s window grows to now (the same start, a later end)',
    JSON.stringify({chart, grown}));
  const uuids = await page.evaluate(() => document.getElementById('chart-job-util').dataset.uuids);
  H.ok(uuids === a1.gpus.slice().sort().join(','), 'its series are the attempt\'s GPU UUIDs (by=gpu&key=...)',
    String(uuids));
  const busyUtil = await H.waitUntil(async () => {
    const v = await page.evaluate(() => {
      const ch = window.gpuorchDash.charts['chart-job-util'];
      return ch ? Math.max(0, ...ch.plot.data[1].filter((x) => typeof x === 'number')) : 0;
    });
    return v > 0 ? v : null;
  }, 40000);
  H.ok(busyUtil > 0, 'the burner\'s GPU shows utilization above 0 (the fake NVML counts its CPU time)',
    String(busyUtil));
  const mem = await H.waitUntil(async () => {
    const ch = await H.chartOf(page, 'chart-job-mem');
    return ch && ch.points > 0 ? ch : null;
  }, 20000);
  H.ok(mem && JSON.stringify(mem.keys.slice().sort()) === JSON.stringify(wantKeys),
    'the GPU memory chart has data points for the same GPUs', JSON.stringify(mem));
  const hours = await H.waitUntil(async () => {
    const f = await facts(page, 'job-facts');
    return f['GPU-hours'] && f['GPU-hours'] !== '-' ? f : null;
  }, 40000);
  H.ok(hours, 'the header has the ledger\'s GPU-hours for the job (GET /v1/cost?by=job)',
    JSON.stringify(await facts(page, 'job-facts')));

  // The layout, with a running job, its log and its charts.
  await H.layoutChecks(c, page, 'the job page', 'job-page', 5);

  // The gang: two nodes, one GPU each, and each rank's own text.
  const gangApi = await H.waitUntil(async () => {
    const j = await jobOf(gang);
    return j && j.state === 'RUNNING' && j.current_attempt && j.current_attempt.state === 'RUNNING' ? j : null;
  });
  if (!H.ok(gangApi, 'the 2-node gang runs')) return;
  await openJob(page, gang);
  const gone = await H.waitUntil(() => logRequests.aborted.some((u) => u.includes(`/v1/jobs/${busy}/logs?`)), 10000);
  H.ok(gone, 'leaving the job\'s page aborts its log stream', JSON.stringify(logRequests.aborted));
  const gangRows = await H.waitUntil(async () => {
    const rows = await H.tableRows(page, 'job-attempts');
    return rows && rows.length ? rows : null;
  });
  const g1 = gangApi.attempts[0];
  H.ok(gangRows && gangRows[0].Nodes === g1.nodes.join(', ') && g1.nodes.length === 2 &&
    gangRows[0]['GPUs.count'] === 2, 'the gang\'s attempt: its two nodes and two GPUs, as the API',
  JSON.stringify({gangRows, api: g1}));
  const rank0 = await H.waitUntil(async () => {
    const l = await logBox(page);
    return l && /rank 0 says/.test(l.text) ? l : null;
  });
  const ranks = await page.evaluate(() => {
    const s = document.getElementById('job-log-rank');
    return !document.getElementById('job-log-rank-label').hidden ? [...s.options].map((o) => o.textContent) : null;
  });
  H.ok(rank0 && !/rank 1 says/.test(rank0.text) && ranks && ranks.length === 2 &&
    ranks[0].includes(g1.nodes[0]) && ranks[1].includes(g1.nodes[1]),
  'the gang\'s log shows rank 0 by default; the rank selector offers 0 and 1 with their nodes',
  JSON.stringify({ranks, text: rank0 && rank0.text.slice(0, 200)}));
  await page.selectOption('#job-log-rank', '1');
  const rank1 = await H.waitUntil(async () => {
    const l = await logBox(page);
    return l && l.key && l.key.endsWith('|1') && /rank 1 says/.test(l.text) ? l : null;
  });
  H.ok(rank1 && !/rank 0 says/.test(rank1.text), 'rank 1 selected: the box shows rank 1\'s own text only',
    JSON.stringify(await logBox(page)));
  const gangStreams = logRequests.filter((u) => u.includes(`/v1/jobs/${gang}/logs?`));
  H.ok(gangStreams.length === 2 && gangStreams[1].includes('rank=1'),
    'a new stream for the new selection (rank=1), not one per refresh', gangStreams.join('\n'));
  const rank0Gone = await H.waitUntil(() => logRequests.aborted.some((u) => u === gangStreams[0]), 10000);
  H.ok(rank0Gone, 'and the stream of rank 0 aborted', JSON.stringify(logRequests.aborted));

  // The ended job: its exit code, and its stderr by the stream selector.
  const failApi = await H.waitUntil(async () => {
    const j = await jobOf(fail);
    return j && j.state === 'FAILED' ? j : null;
  });
  H.ok(failApi, 'the job that exits 3 ends FAILED', JSON.stringify(await jobOf(fail)));
  await openJob(page, fail);
  const failRows = await H.waitUntil(async () => {
    const rows = await H.tableRows(page, 'job-attempts');
    return rows && rows.length && rows[0].Exit !== '-' ? rows : null;
  });
  H.ok(failRows && failRows[0].Exit === '3' && failRows[0]['State.badge'] === 'FAILED' && failRows[0].End !== '-' &&
    (await pageState(page)) === 'FAILED', 'an ended job\'s page: FAILED, the attempt\'s end and exit code 3',
  JSON.stringify(failRows));
  const endedShot = c.screenshot('job-page-ended.png');
  await page.screenshot({path: endedShot, fullPage: true});
  H.diag('the ended job\'s page: ' + endedShot);
  const outDone = await H.waitUntil(async () => {
    const l = await logBox(page);
    return l && l.state === 'done' && /going/.test(l.text) ? l : null;
  });
  const failUrl = logRequests.filter((u) => u.includes(`/v1/jobs/${fail}/logs?`));
  H.ok(outDone && failUrl.length === 1 && !failUrl[0].includes('follow='),
    'its stdout read once (no follow for an ended attempt)', JSON.stringify({outDone, failUrl}));
  await page.click('#job-log-stream button[data-stream="stderr"]');
  const errText = await H.waitUntil(async () => {
    const l = await logBox(page);
    return l && l.state === 'done' && l.key.includes('|stderr|') ? l : null;
  });
  H.ok(errText && errText.text.trim() === 'broken', 'the stream selector shows its stderr', JSON.stringify(errText));

  // A log larger than the box keeps: the last ~2 MB, from a whole line, to the job's last line.
  const loudApi = await H.waitUntil(async () => {
    const j = await jobOf(loud);
    return j && j.state === 'COMPLETED' ? j : null;
  });
  const full = await c.call('GET', `/v1/jobs/${loud}/logs`, undefined, token);
  const fullBytes = Buffer.byteLength(full.text);
  await openJob(page, loud);
  const big = await H.waitUntil(async () => {
    const l = await logBox(page);
    return l && l.state === 'done' ? l : null;
  });
  const trimmed = await page.evaluate(() => document.getElementById('job-log').dataset.trimmed);
  H.ok(loudApi && fullBytes > 2.5e6 && big && big.bytes === fullBytes && trimmed === '1' &&
    big.text.length <= 2 * 1024 * 1024 && big.text.length >= 1024 * 1024 && /^\d+ x{92}\n/.test(big.text) &&
    big.text.endsWith('30000 ' + 'x'.repeat(92) + '\n'),
  'a 3 MB log: every byte read, the box keeps about the last 2 MB, from a whole line to the last',
  JSON.stringify({fullBytes, bytes: big && big.bytes, chars: big && big.text.length, trimmed,
    head: big && big.text.slice(0, 20), tail: big && big.text.slice(-20)}));

  // An array task, by its ARRAY_TASK id.
  const arr = await c.call('POST', '/v1/jobs', {team: 'research', name: 'arr', array: '0-1', gpus: 0, cpus: 1,
    mem_mib: 64, command: ['sh', '-c', 'echo task $SLURM_ARRAY_TASK_ID']}, token);
  const ids = arr.json && arr.json.array_jobs;
  if (H.ok(arr.status === 201 && ids && ids.length === 2, 'an array of two tasks is submitted', arr.text)) {
    const t1 = await jobOf(ids[1]);
    const arrayId = t1.array_id;
    await page.evaluate((href) => window.GPO.navigate(href), `/jobs/${arrayId}_1`);
    const f = await H.waitUntil(async () => {
      const x = await facts(page, 'job-facts');
      return x['array task'] ? x : null;
    }, 15000);
    const title = await page.evaluate(() => document.getElementById('job-head-title').textContent);
    H.ok(f && f['array task'] === `${arrayId}_1` && title.startsWith('Job ' + ids[1]),
      `/jobs/${arrayId}_1 opens the array's task 1 (job ${ids[1]})`, JSON.stringify({f, title}));
  }
}

// Without running jobs: the job's page for a job that waits.
async function pendingOnlyChecks(page, busy) {
  await openJob(page, busy);
  const st = await pageState(page);
  const j = await jobOf(busy);
  H.ok(st === j.state, 'the job\'s page shows its state as the API', `${st} vs ${j.state}`);
  const rows = await page.evaluate(() => document.getElementById('job-attempts').textContent);
  H.ok(j.attempts.length || /not started/.test(rows), 'no attempt yet: the attempts panel says so', rows);
  await H.layoutChecks(c, page, 'the job page', 'job-page', 3);
}

main().then(() => c.finish(), (e) => c.finish(e));
