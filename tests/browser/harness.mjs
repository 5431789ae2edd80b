// harness.mjs - what the dashboard's browser tests share: TAP output, polling,
// a real cluster (a `gpuorch server` on an ephemeral port of 127.0.0.1 with a
// temporary data directory, real `gpuorch agent`s on the fake NVML), the API
// client, Debian's headless Chromium through playwright-core, a signed-in
// page, the layout measurement (nothing overflows its panel) and where
// screenshots go. Children are stopped by PID.
//
//   import * as H from './harness.mjs';
//   const c = new H.Cluster(process.argv[2], 'job-page');   // skips (TAP) without chromium
//   await c.startServer();
//   c.startAgent('gpu-a', 1, 4);                  // 4 fake GPUs, busy from their jobs' CPU time
//   ...
//   await c.finish();                             // stops everything, prints the plan, exits

import {spawn} from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import {createRequire} from 'node:module';
import {fileURLToPath} from 'node:url';

const HERE = path.dirname(fileURLToPath(import.meta.url));
export const ROOT = path.resolve(HERE, '..', '..');
export const CHROMIUM = process.env.CHROMIUM || '/usr/bin/chromium';
export const DEADLINE_MS = 30000;
export const JOB_USER = 'gpuorch-test1';

// -- TAP. ------------------------------------------------------------------------------

let testNo = 0;
let failed = 0;
export function ok(cond, name, detail) {
  testNo++;
  if (!cond) failed++;
  console.log(`${cond ? 'ok' : 'not ok'} ${testNo} - ${name}`);
  if (!cond && detail) for (const l of String(detail).split('\n').slice(0, 40)) console.log('# ' + l);
  return cond;
}
export const diag = (text) => console.log('# ' + text);
// The plan line, at the end (Cluster.finish prints it itself); how many failed.
export const tapPlan = () => console.log(`1..${testNo}`);
export const tapFailed = () => failed;
export const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

// Polls fn (sync or async) until it returns something truthy or the deadline passes.
export async function waitUntil(fn, timeoutMs = DEADLINE_MS, stepMs = 100) {
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

export function userExists(name) {
  try {
    return fs.readFileSync('/etc/passwd', 'utf8').split('\n').some((l) => l.startsWith(name + ':'));
  } catch (e) {
    return false;
  }
}

// Whether jobs really run here: root, and the test account the setup script makes.
export const runsJobs = () => !!(process.geteuid && process.geteuid() === 0 && userExists(JOB_USER));

// -- The cluster. ----------------------------------------------------------------------

export class Cluster {
  // bin: the gpuorch binary (argv[2]); name: for the temporary directory and screenshots.
  // Without the binary, Chromium or playwright-core this prints a TAP skip and exits.
  constructor(bin, name) {
    this.bin = bin ? path.resolve(bin) : null;
    this.name = name;
    if (!this.bin || !fs.existsSync(this.bin)) skip(`usage: ${name}_test.mjs GPUORCH (the gpuorch binary)`);
    if (!fs.existsSync(CHROMIUM)) skip(`no ${CHROMIUM} (Debian package chromium; scripts/setup.sh)`);
    try {
      this.chromium = createRequire(path.join(ROOT, 'package.json'))('playwright-core').chromium;
    } catch (e) {
      skip('playwright-core is not installed (scripts/setup.sh runs npm ci)');
    }
    this.fakenvml = process.env.GPUORCH_FAKENVML ||
      path.join(path.dirname(this.bin), 'tests', 'libnvidia-ml.so.1');
    this.tmp = fs.mkdtempSync(path.join(os.tmpdir(), `gpuorch-${name}-test-`));
    // The agents' network half runs as the gpuorch account: it must reach its
    // state directory below here (mkdtemp's 0700 would keep it out).
    fs.chmodSync(this.tmp, 0o755);
    this.data = path.join(this.tmp, 'data');
    this.children = []; // {name, proc}
    this.port = null;
    this.admin = null;
    this.browser = null;
    this.serverArgs = [];
  }

  get url() {
    return `http://127.0.0.1:${this.port}`;
  }

  startChild(name, args, env) {
    const log = fs.openSync(path.join(this.tmp, name + '.log'), 'a');
    const proc = spawn(args[0], args.slice(1), {stdio: ['ignore', log, log], env: env || process.env});
    fs.closeSync(log);
    this.children.push({name, proc});
    return proc;
  }

  logTail(name, n = 2000) {
    try {
      return fs.readFileSync(path.join(this.tmp, name + '.log'), 'utf8').slice(-n);
    } catch (e) {
      return '';
    }
  }

  // Stops a child by its PID: SIGTERM, then SIGKILL after 20 s.
  async stopChild(name) {
    const c = this.children.find((x) => x.name === name);
    if (!c) return;
    const p = c.proc;
    this.children = this.children.filter((x) => x !== c);
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

  // The controller; `args` are extra flags (kept for restartServer). The same
  // port again on a restart, so that agents and pages keep talking to it.
  async startServer(args) {
    if (args) this.serverArgs = args;
    const portFile = path.join(this.tmp, 'port');
    fs.rmSync(portFile, {force: true});
    const listen = this.port ? `127.0.0.1:${this.port}` : '127.0.0.1:0';
    const proc = this.startChild('server', [this.bin, 'server', '--data', this.data, '--listen', listen,
      '--port-file', portFile, '--pass-interval', '1'].concat(this.serverArgs));
    const text = await waitUntil(() => {
      if (proc.exitCode !== null) throw new Error('server exited: ' + this.logTail('server'));
      const t = fs.existsSync(portFile) ? fs.readFileSync(portFile, 'utf8') : '';
      return t.endsWith('\n') ? t : null;
    });
    if (!text) throw new Error('the server did not start: ' + this.logTail('server'));
    this.port = Number(text);
    this.admin = fs.readFileSync(path.join(this.data, 'admin.token'), 'utf8').trim();
  }

  // A clean stop (SIGTERM: the open minutes are flushed to the store) and a start on the same port.
  async restartServer() {
    await this.stopChild('server');
    await this.startServer();
  }

  gpuUuid(nodeNo, index) {
    // Unique per run: the fake NVML finds a GPU's processes by the UUIDs in their
    // environment, so a test running beside this one must not name the same GPUs.
    const pid = (process.pid & 0xffff).toString(16).padStart(4, '0');
    return `GPU-${nodeNo.toString(16).padStart(8, '0')}-${pid}-4dab-8000-${index.toString(16).padStart(12, '0')}`;
  }

  // An agent of `gpus` fake H100s. Without `script`, the fake reports each
  // GPU's utilization from its jobs' CPU time and memory from their share
  // (tests/fakenvml/README.md); with script[i] = {utilization, power_mw, ...}
  // GPU i reports those figures.
  startAgent(name, nodeNo, gpus, script) {
    const gpuFile = path.join(this.tmp, name + '-gpus.json');
    const list = [];
    for (let i = 0; i < gpus; i++) {
      list.push(Object.assign({uuid: this.gpuUuid(nodeNo, i), name: 'NVIDIA H100 80GB HBM3'},
        script && script[i] ? script[i] : {}));
    }
    fs.writeFileSync(gpuFile, JSON.stringify({gpus: list}));
    this.startChild(name, [this.bin, 'agent', '--server', this.url, '--join-token',
      path.join(this.data, 'join.token'), '--name', name, '--pool', 'main', '--state-dir',
      path.join(this.tmp, name), '--nvml', this.fakenvml, '--addr', '127.0.0.1', '--log-listen', '127.0.0.1:0',
      '--kill-grace', '2', '--sample-interval', '500', '--poll-wait', '5', '--dirty-wait', '2',
      '--cpus', '32', '--mem-mib', '65536'], Object.assign({}, process.env, {FAKENVML_CONFIG: gpuFile, FAKENVML_DRIVER: '1'}));
  }

  // Waits until `n` nodes are up with all their GPUs sampled; the nodes, or null.
  async nodesUp(n) {
    return waitUntil(async () => {
      const r = await this.call('GET', '/v1/nodes');
      const nodes = (r.json && r.json.nodes) || [];
      return nodes.length === n && nodes.every((x) => x.state === 'up' && (x.gpus || []).length &&
        (x.gpu_samples || []).length === x.gpus.length) ? nodes : null;
    });
  }

  async call(method, p, body, token = this.admin) {
    const r = await fetch(this.url + p, {
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

  async put(p, body) {
    const r = await this.call('PUT', p, body);
    if (r.status !== 200 && r.status !== 201) throw new Error(`PUT ${p}: ${r.status} ${r.text}`);
    return r.json;
  }

  // POST /v1/jobs; the new job's id.
  async submit(spec, token = this.admin) {
    const r = await this.call('POST', '/v1/jobs', spec, token);
    if (r.status !== 201) throw new Error(`submit: ${r.status} ${r.text}`);
    return r.json.id;
  }

  async launch() {
    this.browser = await this.chromium.launch({executablePath: CHROMIUM, headless: true,
      args: ['--no-sandbox', '--disable-gpu', '--disable-dev-shm-usage']});
    return this.browser;
  }

  // A page signed in with `token` (preset in sessionStorage, as after a sign-in)
  // that records CSP violations and script errors (page.problems()).
  async page(token = this.admin, viewport = {width: 1280, height: 900}) {
    if (!this.browser) await this.launch();
    const ctx = await this.browser.newContext({viewport});
    const page = await ctx.newPage();
    const problems = [];
    page.on('pageerror', (e) => problems.push('script error: ' + e.message));
    page.on('console', (m) => {
      if (m.type() === 'error') problems.push('console: ' + m.text());
    });
    await page.addInitScript((t) => {
      if (t && !sessionStorage.getItem('gpuorch.token')) sessionStorage.setItem('gpuorch.token', t);
      window.__csp = [];
      document.addEventListener('securitypolicyviolation', (e) => window.__csp.push(e.violatedDirective + ' ' + e.blockedURI));
    }, token);
    page.problems = async () => problems.concat(await page.evaluate(() => window.__csp || []).catch(() => []));
    return page;
  }

  // Where screenshots go: $DASHBOARD_SCREENSHOT_DIR; else the build's meson-logs
  // ($MESON_BUILD_ROOT, or beside the binary); else the temporary directory, kept then.
  screenshot(file) {
    let dir = process.env.DASHBOARD_SCREENSHOT_DIR;
    if (!dir) {
      for (const d of [process.env.MESON_BUILD_ROOT, path.dirname(this.bin)]) {
        if (d && fs.existsSync(path.join(d, 'meson-logs'))) {
          dir = path.join(d, 'meson-logs');
          break;
        }
      }
    }
    if (!dir) {
      process.env.KEEP_TMP = '1';
      dir = this.tmp;
    }
    fs.mkdirSync(dir, {recursive: true});
    return path.join(dir, file);
  }

  // Cancels what still runs, stops every child, prints the TAP plan and exits.
  async finish(err) {
    if (err) {
      ok(false, 'the test ran to its end', (err && err.stack) || String(err));
      for (const c of this.children) diag(c.name + ': ' + this.logTail(c.name, 800));
    }
    try {
      if (this.browser) await this.browser.close();
    } catch (e) { /* gone */ }
    if (this.port && this.admin && this.children.some((c) => c.name === 'server')) {
      try {
        const r = await this.call('GET', '/v1/jobs?state=PENDING,RUNNING&limit=1000');
        for (const j of (r.json && r.json.jobs) || []) await this.call('POST', `/v1/jobs/${j.id}/cancel`);
        await waitUntil(async () => {
          const l = await this.call('GET', '/v1/jobs?state=RUNNING&limit=1000');
          return l.json && (l.json.jobs || []).length === 0;
        }, 20000);
      } catch (e) {
        diag('cleanup: ' + e.message);
      }
    }
    for (const c of this.children.slice().reverse()) await this.stopChild(c.name);
    if (process.env.KEEP_TMP) diag('kept ' + this.tmp);
    else fs.rmSync(this.tmp, {recursive: true, force: true});
    tapPlan();
    process.exit(failed ? 1 : 0);
  }
}

function skip(why) {
  console.log('1..0 # SKIP ' + why);
  process.exit(0);
}

// -- Layout. ---------------------------------------------------------------------------

// What overflows in the page shown (the visible `.panel`s and `.tile`s of
// #dash, and the toolbar): the page wider than the window, a panel outside the
// window, a panel body that scrolls sideways, an element outside its panel.
// Returns {cut: [sentences], panels: how many were measured}.
export function layout(page) {
  return page.evaluate(() => {
    const vw = document.documentElement.clientWidth;
    const cut = [];
    const name = (e) => e.tagName.toLowerCase() + (e.id ? '#' + e.id : '') +
      (e.className && typeof e.className === 'string' ? '.' + e.className.trim().split(/\s+/).join('.') : '');
    const visible = (e) => {
      const r = e.getBoundingClientRect();
      return r.width > 0 && r.height > 0 && getComputedStyle(e).visibility !== 'hidden';
    };
    const outside = (r, o) => r.left < o.left - 1 || r.right > o.right + 1;
    if (document.documentElement.scrollWidth > vw + 1) {
      cut.push(`the page is ${document.documentElement.scrollWidth} px wide in a ${vw} px window`);
    }
    const boxes = [...document.querySelectorAll('#dash .panel, #dash .tile, #dash .toolbar')].filter(visible);
    for (const p of boxes) {
      const pr = p.getBoundingClientRect();
      const label = (p.querySelector('h2, .tile-label') || p).textContent.slice(0, 40);
      if (outside(pr, {left: 0, right: vw})) cut.push(`${label}: ${Math.round(pr.left)}-${Math.round(pr.right)} outside the window 0-${vw}`);
      for (const b of p.querySelectorAll('.panel-body')) {
        if (b.scrollWidth > b.clientWidth + 1) cut.push(`${label}: ${name(b)} scrolls sideways, ${b.scrollWidth} > ${b.clientWidth} px`);
      }
      let n = 0;
      for (const e of p.querySelectorAll('*')) {
        if (!visible(e) || e.closest('.log')) continue; // a log scrolls inside its own box
        const r = e.getBoundingClientRect();
        if (outside(r, pr) && n++ < 5) cut.push(`${label}: ${name(e)} at ${Math.round(r.left)}-${Math.round(r.right)} outside its panel ${Math.round(pr.left)}-${Math.round(pr.right)}`);
      }
    }
    return {cut, panels: boxes.length};
  });
}

// At 1,280 and 420 px: nothing overflows (ok per width), a full-page
// screenshot PREFIX-WIDTH.png each. `what` names the page in the TAP line.
// opts: measure(page) instead of layout (its answer has cut and panels too),
// each(lay, width) for checks of the page's own after each, shot(width) the
// screenshot's path instead of cluster.screenshot's.
export async function layoutChecks(cluster, page, what, prefix, minPanels = 2, opts = {}) {
  const measure = opts.measure || layout;
  const polls = () => page.evaluate(() => Number(document.documentElement.dataset.polls || 0));
  for (const width of [1280, 420]) {
    await page.setViewportSize({width, height: 900});
    const p0 = await polls();
    await waitUntil(async () => (await polls()) >= p0 + 1);
    const lay = await waitUntil(async () => {
      const l = await measure(page);
      return !l.cut.length && l.panels >= minPanels ? l : null;
    }, 5000) || await measure(page);
    ok(lay.panels >= minPanels && !lay.cut.length, `${what} at ${width} px: nothing overflows (the page fits the ` +
      `window, no panel scrolls sideways, every element inside its panel; ${lay.panels} panels measured)`,
    lay.cut.join('\n'));
    if (opts.each) opts.each(lay, width);
    const shot = opts.shot ? opts.shot(width) : cluster.screenshot(`${prefix}-${width}.png`);
    await page.screenshot({path: shot, fullPage: true});
    diag(`screenshot at ${width} px: ${shot}`);
  }
  await page.setViewportSize({width: 1280, height: 900});
}

// The rows of the table in #ID: one object per row keyed by header, the cell's
// text; KEY.badge a badge's text, KEY.count a [data-count], KEY.uuids the GPUs' data-uuid.
export function tableRows(page, id) {
  return page.evaluate((panel) => {
    const t = document.querySelector(`#${panel} table`);
    if (!t) return null;
    const heads = [...t.querySelectorAll('thead th')].map((th) => th.textContent);
    return [...t.querySelectorAll('tbody tr')].map((tr) => {
      const row = {};
      [...tr.cells].forEach((td, i) => {
        row[heads[i]] = td.textContent;
        const b = td.querySelector('.badge');
        if (b) row[heads[i] + '.badge'] = b.textContent;
        const n = td.querySelector('[data-count]');
        if (n) row[heads[i] + '.count'] = Number(n.dataset.count);
        const u = [...td.querySelectorAll('[data-uuid]')];
        if (u.length) row[heads[i] + '.uuids'] = u.map((e) => e.dataset.uuid + '|' + e.title);
      });
      return row;
    });
  }, id);
}

// The chart in element `id`: {keys, points: values drawn, t: [first, last]} or null.
export function chartOf(page, id) {
  return page.evaluate((cid) => {
    const c = window.gpuorchDash.charts[cid];
    if (!c) return null;
    const [t, ...series] = c.plot.data;
    let points = 0;
    for (const s of series) for (const v of s) if (v !== null && v !== undefined) points++;
    return {keys: c.keys, points, t: [t[0], t[t.length - 1]], n: t.length};
  }, id);
}
