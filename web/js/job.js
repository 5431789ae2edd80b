/*
 * job.js - a job's page, at /jobs/ID (docs/dashboard.md, "A job's page"): its
 * whole story in one place. The header (state, owner, labels, GPUs, times,
 * cost), why it waits while pending, its spec, every attempt (nodes, GPUs,
 * start, end, exit), its GPUs' utilization and memory over its life, and its
 * log, followed while the attempt runs.
 *
 * ID is a job id, or an array task's (41_7: task 7 of array 41), which the
 * history API resolves to the task's own id once.
 *
 * Each refresh reads the job again and redraws the header, the attempts and
 * the charts; the log is one stream, started when the page opens or a
 * selector (stream, attempt, rank) changes and aborted when the page goes: a
 * refresh never restarts it. For tests: the log's <pre id="job-log"> carries
 * data-bytes (bytes received), data-state (loading, following, done, error,
 * none) and data-key (attempt|stream|rank); #job-page carries data-job-state.
 */
'use strict';

(function () {
  const G = window.GPO;
  const {$, AuthError, ApiError, el, badge, msg, table, link, jobLink, nodeLinks, reasonCell, isNum, fmtMoney, fmtHours,
    fmtGiB, fmtDuration, fmtTime, serverNow, gpusHeld, classOf, gpusOf, api, apiRaw, settle, failure,
    chartMessage, renderChart, stepFor} = G;

  const LOG_MAX_CHARS = 2 * 1024 * 1024; // the log box keeps about the last 2 MB ...
  const LOG_KEEP_CHARS = 1536 * 1024; // ... cut back to this when it grows past it
  const COST_EVERY_MS = 30000; // the ledger's GPU-hours: read again at most this often
  const NODES_EVERY_MS = 30000; // the nodes' GPU list (UUID -> node/index): the same
  const ENDED_SERIES_EVERY_MS = 60000; // an ended job's charts change little: read them again this often
  const MAX_KEYS = 64; // the series API's limit of keys
  const ENDED = new Set(G.ENDED_STATES);
  const SIGNALS = {1: 'SIGHUP', 2: 'SIGINT', 6: 'SIGABRT', 9: 'SIGKILL', 11: 'SIGSEGV', 15: 'SIGTERM'};

  let cur = null; // the page shown: see mount()

  const stateBadge = G.stateBadge;
  const ms = (iso) => (iso ? Date.parse(iso) : NaN);
  const shortUuid = (u) => (u && u.length > 18 ? u.slice(0, 12) + '\u2026' + u.slice(-4) : String(u));

  // -- Small helpers. ------------------------------------------------------------------

  // A label-value list: [[label, value (string or Node), wide?], ...], values '-' when empty.
  function kvList(pairs, cls) {
    const dl = el('dl', 'kv' + (cls ? ' ' + cls : ''));
    for (const [k, v, wide] of pairs) {
      const row = dl.appendChild(el('div', 'kv-row' + (wide ? ' wide' : '')));
      row.appendChild(el('dt', '', k));
      const dd = row.appendChild(el('dd'));
      if (v instanceof Node) dd.appendChild(v);
      else dd.textContent = v === undefined || v === null || v === '' ? '-' : String(v);
    }
    return dl;
  }

  // An argv as a shell would read it back: arguments with spaces or quotes single-quoted.
  function shellJoin(argv) {
    return argv.map((a) => {
      const s = String(a);
      return /^[A-Za-z0-9_@%+=:,./-]+$/.test(s) ? s : "'" + s.replace(/'/g, "'\\''") + "'";
    }).join(' ');
  }

  const started = (a) => ms(a.started_at);
  const endedAt = (a) => ms(a.ended_at);

  // How long attempt a ran: to its end, or to now while it runs.
  function attemptMs(a) {
    const s = started(a);
    if (!isNum(s)) return NaN;
    const e = isNum(endedAt(a)) ? endedAt(a) : serverNow();
    return Math.max(0, e - s);
  }

  // uuid -> "node/index" from GET /v1/nodes, else a short UUID.
  function gpuLabel(uuid) {
    const g = cur && cur.gpuMap.get(uuid);
    return g ? g.node + '/' + g.index : shortUuid(uuid);
  }

  // GPU-hours as the cost panel shows them, with the digits a short job needs.
  const gpuHours = (v) => (v > 0 && v < 0.0001 ? '< 0.0001' : v > 0 && v < 1 ? v.toFixed(v < 0.01 ? 4 : 2)
    : fmtHours(v));

  function exitText(a) {
    if (isNum(a.signal)) return 'signal ' + a.signal + (SIGNALS[a.signal] ? ' (' + SIGNALS[a.signal] + ')' : '');
    if (isNum(a.exit_code)) return String(a.exit_code);
    return '-';
  }

  // -- The page's DOM. -----------------------------------------------------------------

  function panel(id, title, extraHead) {
    const p = el('section', 'panel');
    p.id = id + '-panel';
    const head = p.appendChild(el('div', 'panel-head job-head'));
    const h = head.appendChild(el('h2', '', title));
    h.id = id + '-title';
    const note = head.appendChild(el('span', 'panel-note'));
    note.id = id + '-note';
    if (extraHead) head.appendChild(extraHead);
    return p;
  }

  function build(box) {
    const root = el('div', 'job-page');
    root.id = 'job-page';

    const err = root.appendChild(el('section', 'panel job-error'));
    err.id = 'job-error';
    err.hidden = true;

    const head = root.appendChild(panel('job-head', 'Job ' + cur.id));
    const body = head.appendChild(el('div', 'panel-body job-body'));
    body.id = 'job-facts';
    body.appendChild(msg('loading...'));

    const wait = root.appendChild(panel('job-wait', 'Why it waits'));
    wait.hidden = true;
    wait.appendChild(el('div', 'panel-body job-body')).id = 'job-wait';

    const att = root.appendChild(panel('job-attempts', 'Attempts'));
    att.appendChild(el('div', 'panel-body')).id = 'job-attempts';

    const charts = root.appendChild(el('section', 'row row-2'));
    charts.id = 'job-charts';
    const CHARTS = [['chart-job-util', 'GPU utilization by GPU', '%'], ['chart-job-mem', 'GPU memory by GPU', 'GiB']];
    for (const [id, title, unit] of CHARTS) {
      const p = charts.appendChild(el('div', 'panel'));
      const h = p.appendChild(el('div', 'panel-head'));
      h.appendChild(el('h2', '', title));
      h.appendChild(el('span', 'panel-note', unit + ', over the job\'s life'));
      const c = p.appendChild(el('div', 'chart'));
      c.id = id;
      c.dataset.points = '0';
    }

    root.appendChild(buildLogPanel());

    const specAll = el('button', 'btn btn-ghost btn-small', 'all fields');
    specAll.type = 'button';
    specAll.id = 'job-spec-all';
    specAll.addEventListener('click', () => {
      cur.specAll = !cur.specAll;
      specAll.textContent = cur.specAll ? 'set fields only' : 'all fields';
      if (cur.job) renderSpec(cur.job);
    });
    const spec = root.appendChild(panel('job-spec', 'Spec', specAll));
    spec.appendChild(el('div', 'panel-body job-body')).id = 'job-spec';

    box.replaceChildren(root);
    for (const id of ['job-head-panel', 'job-attempts-panel', 'job-charts', 'job-log-panel', 'job-spec-panel']) {
      $(id).hidden = true; // until the job is read
    }
    $('job-head-panel').hidden = false;
  }

  function buildLogPanel() {
    const controls = el('div', 'job-log-controls');
    const seg = controls.appendChild(el('div', 'seg'));
    seg.id = 'job-log-stream';
    seg.setAttribute('role', 'group');
    seg.setAttribute('aria-label', 'stream');
    for (const s of ['stdout', 'stderr']) {
      const b = seg.appendChild(el('button', s === 'stdout' ? 'on' : '', s));
      b.type = 'button';
      b.dataset.stream = s;
    }
    seg.addEventListener('click', (ev) => {
      const b = ev.target.closest('button');
      if (!b || !cur || b.dataset.stream === cur.sel.stream) return;
      cur.sel.stream = b.dataset.stream;
      for (const x of seg.querySelectorAll('button')) x.classList.toggle('on', x === b);
      syncLog();
    });
    const att = controls.appendChild(labelled('attempt', 'job-log-attempt'));
    att.sel.addEventListener('change', () => {
      cur.sel.attempt = att.sel.value === '' ? null : Number(att.sel.value);
      syncLog();
    });
    const rank = controls.appendChild(labelled('rank', 'job-log-rank'));
    rank.hidden = true;
    rank.id = 'job-log-rank-label';
    rank.sel.addEventListener('change', () => {
      cur.sel.rank = Number(rank.sel.value) || 0;
      syncLog();
    });
    const again = controls.appendChild(el('button', 'btn btn-ghost btn-small', 'reload'));
    again.type = 'button';
    again.id = 'job-log-reload';
    again.addEventListener('click', () => {
      if (!cur) return;
      cur.log.key = null; // the same selection, read again
      syncLog();
    });

    const p = panel('job-log', 'Log', controls);
    const wrap = p.appendChild(el('div', 'log-wrap'));
    const note = wrap.appendChild(el('div', 'log-note muted'));
    note.id = 'job-log-status';
    const pre = wrap.appendChild(el('pre', 'log'));
    pre.id = 'job-log';
    pre.dataset.bytes = '0';
    pre.dataset.state = 'none';
    pre.tabIndex = 0; // scrolls with the keyboard
    return p;
  }

  function labelled(text, id) {
    const l = el('label', 'job-select');
    l.appendChild(document.createTextNode(text + ' '));
    const s = l.appendChild(el('select'));
    s.id = id;
    l.sel = s;
    return l;
  }

  // -- Drawing. ------------------------------------------------------------------------

  function showError(err) {
    const box = $('job-error');
    let text;
    if (err instanceof ApiError && err.status === 404) {
      text = 'No job ' + cur.id + ': ' + (err.message || 'not found') + ' (404).';
    } else if (err instanceof ApiError && err.status === 400) {
      text = 'Not a job id: ' + cur.id + ' (' + err.message + '). A job id is a number, or 41_7 for task 7 ' +
        'of array 41.';
    } else if (err instanceof ApiError && err.status === 403) {
      text = 'Job ' + cur.id + ' is not visible to you: ' + err.message + ' (403).';
    } else {
      box.hidden = false;
      box.replaceChildren(failure(err));
      return;
    }
    box.hidden = false;
    const m = msg(text, true);
    m.id = 'job-missing';
    const back = el('div', 'msg');
    back.appendChild(link('/', 'Back to the overview'));
    back.appendChild(document.createTextNode(' or search the '));
    back.appendChild(link('/history', 'history'));
    box.replaceChildren(m, back);
    if (!cur.job) {
      // Nothing to show below: only the message.
      for (const id of ['job-head-panel', 'job-wait-panel', 'job-attempts-panel', 'job-charts', 'job-log-panel',
        'job-spec-panel']) $(id).hidden = true;
      document.title = 'Job ' + cur.id + ' (not found) - gpuorch';
    }
  }

  function runtimeMs(j) {
    let sum = 0;
    let any = false;
    for (const a of j.attempts || []) {
      const d = attemptMs(a);
      if (isNum(d)) {
        sum += d;
        any = true;
      }
    }
    return any ? sum : NaN;
  }

  function renderHead(j) {
    const spec = j.spec || {};
    const atts = j.attempts || [];
    const title = $('job-head-title');
    title.replaceChildren(document.createTextNode('Job ' + j.id));
    if (spec.name) title.appendChild(el('span', 'job-name', spec.name));
    const sb = stateBadge(j.state);
    sb.id = 'job-state';
    title.appendChild(sb);
    if (j.hold) title.appendChild(badge('held (' + j.hold + ')', 'yellow'));
    if (j.idle) title.appendChild(badge('IDLE', 'orange'));

    const note = $('job-head-note');
    note.replaceChildren(link('/', 'overview'), document.createTextNode(' \u00b7 '),
      link('/history?q=' + encodeURIComponent(j.user || ''), j.user + '\'s jobs'));

    const firstStart = atts.reduce((m, a) => (isNum(started(a)) && !(started(a) >= m) ? started(a) : m), NaN);
    const last = atts[atts.length - 1];
    const ended = ENDED.has(j.state);
    const endMs = ended ? (last && isNum(endedAt(last)) ? endedAt(last) : ms(j.updated_at)) : NaN;
    const waited = isNum(firstStart) ? firstStart - ms(j.submitted_at)
      : j.state === 'PENDING' ? serverNow() - ms(j.submitted_at) : NaN;
    const cost = cur.costRow;
    const pairs = [
      ['team', j.team],
      ['user', j.user],
      ['project', spec.project],
      ['model', spec.model],
      ['priority', classOf(j)],
      ['GPUs', j.current_attempt ? gpusHeld(j) : gpusOf(spec)],
    ];
    if (isNum(j.array_id)) pairs.push(['array task', j.array_id + '_' + j.array_index]);
    if (j.current_attempt) pairs.push(['nodes', nodeLinks(j.current_attempt.nodes)]);
    pairs.push(
      ['submitted', fmtTime(j.submitted_at)],
      ['started', isNum(firstStart) ? fmtTime(new Date(firstStart).toISOString()) : '-'],
      ['ended', isNum(endMs) ? fmtTime(new Date(endMs).toISOString()) : '-'],
      ['run time', fmtDuration(runtimeMs(j))],
      ['waited', fmtDuration(waited)],
      ['attempts', String(atts.length)],
      ['cost', fmtMoney(j.cost)],
      ['GPU-hours', cost && isNum(cost.gpu_hours) ? gpuHours(cost.gpu_hours) : '-'],
    );
    if (j.state === 'RUNNING') {
      pairs.push(['GPU util now', G.fmtPct(j.gpu_utilization_pct)],
        ['GPU mem now', isNum(j.gpu_memory_used_mib) ? fmtGiB(j.gpu_memory_used_mib) + ' GiB' : '-']);
    }
    if (j.reason) pairs.push(['reason', j.reason, true]);
    $('job-facts').replaceChildren(kvList(pairs, 'kv-facts'));
    $('job-page').dataset.jobState = j.state;
  }

  function renderWait(j) {
    const p = $('job-wait-panel');
    p.hidden = j.state !== 'PENDING';
    if (p.hidden) return;
    const est = j.estimated_start ? fmtTime(j.estimated_start) : j.estimated_start_note || 'no estimate yet';
    const r = reasonCell(j.wait_reason);
    r.id = 'job-wait-reason';
    $('job-wait').replaceChildren(kvList([
      ['reason', r, true],
      ['estimated start', est],
      ['waiting for', fmtDuration(serverNow() - ms(j.submitted_at))],
    ]));
  }

  function gpuCell(a) {
    const d = el('span', 'job-gpus');
    const gpus = a.gpus || [];
    d.dataset.count = String(gpus.length);
    d.appendChild(el('span', 'job-gpu-n', String(gpus.length)));
    for (const u of gpus) {
      const g = cur.gpuMap.get(u);
      const s = d.appendChild(el('span', 'job-gpu mono', shortUuid(u)));
      s.title = u + (g ? ' (' + g.node + ' GPU ' + g.index + ')' : '');
      s.dataset.uuid = u;
    }
    return d;
  }

  function renderAttempts(j) {
    const atts = (j.attempts || []).slice().reverse(); // the latest first
    $('job-attempts-note').textContent = atts.length === 1 ? '1 attempt' : atts.length ? atts.length + ' attempts' : '';
    if (!atts.length) {
      $('job-attempts').replaceChildren(msg(j.state === 'PENDING' ? 'not started yet' : 'no attempt'));
      return;
    }
    $('job-attempts').replaceChildren(table([
      {h: 'Attempt', num: true, cell: (a) => a.attempt},
      {h: 'State', cell: (a) => stateBadge(a.state)},
      {h: 'Nodes', cell: (a) => nodeLinks(a.nodes)},
      {h: 'GPUs', cls: 'gpus-cell', cell: gpuCell},
      {h: 'Start', num: true, cell: (a) => fmtTime(a.started_at)},
      {h: 'End', num: true, cell: (a) => fmtTime(a.ended_at)},
      {h: 'Duration', num: true, cell: (a) => fmtDuration(attemptMs(a))},
      {h: 'Exit', num: true, cls: 'exit', cell: exitText},
      {h: 'Reason', cell: (a) => a.reason || '-'},
    ], atts));
  }

  // Fields a submission leaves at these show only with "all fields".
  const SPEC_DEFAULTS = {requeue: true, open_mode: 'truncate', launch: 'every_node'};
  const SPEC_ALWAYS = new Set(['command', 'gpus', 'cpus', 'mem_mib', 'time_limit_s']);
  const SPEC_ORDER = ['name', 'command', 'script', 'team', 'project', 'model', 'priority', 'pool', 'gpu_type',
    'gpus', 'gpu_mem_mib', 'min_gpu_mem_mib', 'mig_profile', 'cpus', 'mem_mib', 'time_limit_s', 'nodes',
    'gpus_per_node', 'ntasks', 'ntasks_per_node', 'cpus_per_task', 'gpus_per_task', 'mem_per_node_mib',
    'mem_per_cpu_mib', 'mem_per_gpu_mib', 'mem_whole_node', 'exclusive', 'multi_node', 'constraint', 'launch',
    'dependencies', 'array', 'hold', 'begin', 'checkpointable', 'max_retries', 'requeue', 'signal', 'workdir',
    'submit_dir', 'output', 'error', 'open_mode', 'env'];

  function isDefault(k, v) {
    if (k in SPEC_DEFAULTS) return v === SPEC_DEFAULTS[k];
    if (v === null || v === undefined || v === false || v === 0 || v === '') return true;
    if (Array.isArray(v)) return !v.length;
    return typeof v === 'object' && !Object.keys(v).length;
  }

  function specValue(k, v) {
    if (v === null || v === undefined) return '-';
    if (k === 'command' && Array.isArray(v)) return el('code', 'spec-command', shellJoin(v));
    if (k === 'script') return el('pre', 'spec-script', String(v));
    if (k === 'env' && typeof v === 'object') {
      const d = el('div', 'mono');
      for (const [ek, ev] of Object.entries(v)) d.appendChild(el('div', '', ek + '=' + ev));
      return d.childNodes.length ? d : '-';
    }
    if (k === 'dependencies' && Array.isArray(v)) {
      const d = el('span');
      v.forEach((dep, i) => {
        if (i) d.appendChild(document.createTextNode(', '));
        d.appendChild(document.createTextNode((dep.type || 'after') + ' '));
        d.appendChild(isNum(dep.job) ? jobLink(dep.job) : document.createTextNode(String(dep.job)));
      });
      return d.childNodes.length ? d : 'none';
    }
    if (k === 'time_limit_s') return v > 0 ? fmtDuration(v * 1000) + ' (' + v + ' s)' : 'none';
    if (k === 'begin' && isNum(v) && v > 0) return fmtTime(new Date(v * 1000).toISOString());
    if (/_mib$/.test(k) && isNum(v)) return v + ' MiB' + (v >= 1024 ? ' (' + fmtGiB(v) + ' GiB)' : '');
    if (typeof v === 'boolean') return v ? 'yes' : 'no';
    if (typeof v === 'object') return el('code', '', JSON.stringify(v));
    return String(v);
  }

  function renderSpec(j) {
    const spec = j.spec || {};
    const rest = Object.keys(spec).filter((k) => !SPEC_ORDER.includes(k)).sort(); // fields of a newer server
    const keys = SPEC_ORDER.filter((k) => k in spec).concat(rest);
    const pairs = [];
    let hidden = 0;
    for (const k of keys) {
      const v = spec[k];
      if (k === 'command' && v === null && spec.script) continue;
      if (!cur.specAll && !SPEC_ALWAYS.has(k) && isDefault(k, v)) {
        hidden++;
        continue;
      }
      pairs.push([k, specValue(k, v), k === 'command' || k === 'script' || k === 'env']);
    }
    $('job-spec').replaceChildren(kvList(pairs, 'kv-spec'));
    $('job-spec-note').textContent = hidden ? hidden + ' fields at their defaults not shown' : '';
  }

  // -- The charts: each GPU the job held, over its life. -------------------------------

  // {keys, since, until, step, sinceMs, untilMs} of the series to read, or null before any attempt started.
  function seriesWindow(j) {
    const atts = j.attempts || [];
    const keys = [];
    let from = NaN;
    let to = -Infinity;
    let open = false;
    for (const a of atts) {
      for (const u of a.gpus || []) if (!keys.includes(u)) keys.push(u);
      if (!isNum(started(a))) continue;
      if (!(from <= started(a))) from = started(a);
      if (isNum(endedAt(a))) to = Math.max(to, endedAt(a));
      else open = true;
    }
    if (!isNum(from) || !keys.length) return null;
    const untilMs = open || !isNum(to) || to === -Infinity ? serverNow() : to;
    const step = stepFor(Math.max(1, (untilMs - from) / 1000));
    // A step either side: the buckets that hold the first and the last samples.
    const since = new Date(from - step * 1000).toISOString();
    const until = open ? 'now' : new Date(untilMs + step * 1000).toISOString();
    return {keys: keys.slice(0, MAX_KEYS), since, until, step, open};
  }

  function seriesQuery(metric, w) {
    return '/v1/metrics/series?metric=' + metric + '&by=gpu&key=' + w.keys.map(encodeURIComponent).join(',') +
      '&since=' + encodeURIComponent(w.since) + '&until=' + encodeURIComponent(w.until) + '&step=' + w.step + 's';
  }

  // The series' keys (UUIDs) as "node/index" where the nodes list names them (unique), values scaled.
  function relabel(body, scale) {
    const labels = (body.series || []).map((s) => gpuLabel(String(s.key)));
    const unique = new Set(labels).size === labels.length;
    return Object.assign({}, body, {series: (body.series || []).map((s, i) => ({
      key: unique ? labels[i] : String(s.key),
      values: scale === 1 ? s.values : (s.values || []).map((v) => (v === null || v === undefined ? v : v * scale)),
    }))});
  }

  function drawChart(id, r, scale, unit, yRange) {
    if (r.status === 'fulfilled') {
      renderChart(id, relabel(r.value, scale), unit, yRange);
      $(id).dataset.uuids = (r.value.series || []).map((s) => s.key).sort().join(',');
    } else if (r.reason instanceof ApiError && r.reason.status === 404) {
      chartMessage(id, 'not available');
    } else {
      chartMessage(id, 'could not load: ' + (r.reason && r.reason.message), true);
    }
  }

  // -- The log. ------------------------------------------------------------------------

  function stopLog() {
    if (cur && cur.log.ctrl) cur.log.ctrl.abort();
    if (cur) cur.log.ctrl = null;
  }

  function setLogState(lg, st, text, bad) {
    if (!cur || cur.log !== lg) return;
    const pre = $('job-log');
    pre.dataset.state = st;
    const note = $('job-log-status');
    note.className = bad ? 'log-note msg bad' : 'log-note muted';
    note.textContent = text;
  }

  // Appends text to the log box, keeping about the last 2 MB, and follows the
  // end when the reader was at the end.
  function appendLog(lg, text, bytes) {
    if (!cur || cur.log !== lg) return;
    const pre = $('job-log');
    lg.bytes += bytes;
    pre.dataset.bytes = String(lg.bytes);
    if (!text) return;
    const atEnd = pre.scrollTop + pre.clientHeight >= pre.scrollHeight - 8;
    lg.chars += text.length;
    if (lg.chars > LOG_MAX_CHARS) {
      let all = pre.textContent + text;
      all = all.slice(all.length - LOG_KEEP_CHARS);
      const nl = all.indexOf('\n');
      if (nl >= 0 && nl < 4096) all = all.slice(nl + 1); // start at a whole line
      pre.textContent = all;
      lg.chars = all.length;
      pre.dataset.trimmed = '1';
    } else {
      pre.appendChild(document.createTextNode(text));
    }
    if (atEnd) pre.scrollTop = pre.scrollHeight;
  }

  async function readLog(lg, path) {
    const dec = new TextDecoder();
    try {
      const r = await apiRaw(path, lg.ctrl.signal, 'text/plain');
      setLogState(lg, lg.follow ? 'following' : 'loading', lg.follow ? 'following: the attempt runs' : 'loading...');
      const reader = r.body.getReader();
      for (;;) {
        const {done, value} = await reader.read();
        if (done) break;
        if (!cur || cur.log !== lg) {
          reader.cancel().catch(() => {});
          return;
        }
        appendLog(lg, dec.decode(value, {stream: true}), value.length);
      }
      appendLog(lg, dec.decode(), 0);
      // A follow ends with its attempt (or when the node stops serving it: "reload" reads it again).
      setLogState(lg, 'done', (lg.bytes ? 'end of the log' : 'the log is empty') + ' (' + lg.bytes + ' bytes)');
    } catch (e) {
      if (lg.ctrl && lg.ctrl.signal.aborted) return; // the page went, or the selection changed
      if (!cur || cur.log !== lg) return;
      if (e instanceof AuthError) {
        G.refreshNow(); // the refresh sees the 401 too and signs out
        return;
      }
      const status = e instanceof ApiError && e.status ? ' (' + e.status + ')' : '';
      setLogState(lg, 'error', 'could not read the log: ' + (e && e.message ? e.message : String(e)) + status, true);
    }
  }

  // Starts the log stream the selectors name, unless it is the one already shown.
  function syncLog() {
    const c = cur;
    if (!c || !c.job) return;
    const j = c.job;
    const atts = j.attempts || [];
    const attSel = $('job-log-attempt');
    const rankLabel = $('job-log-rank-label');
    const rankSel = $('job-log-rank');
    if (!atts.length) {
      stopLog();
      attSel.replaceChildren(el('option', '', 'none'));
      attSel.disabled = true;
      rankLabel.hidden = true;
      c.log = {key: 'none', bytes: 0, chars: 0};
      $('job-log').replaceChildren();
      $('job-log').dataset.bytes = '0';
      $('job-log').dataset.key = '';
      setLogState(c.log, 'none', j.state === 'PENDING' ? 'no log yet: the job has not started' : 'no attempt, no log');
      return;
    }
    attSel.disabled = false;
    const latest = j.current_attempt ? j.current_attempt.attempt : atts[atts.length - 1].attempt;
    const want = c.sel.attempt !== null && atts.some((a) => a.attempt === c.sel.attempt) ? c.sel.attempt : latest;
    const a = atts.find((x) => x.attempt === want) || atts[atts.length - 1];
    // The attempt selector: "latest" follows a new attempt; a number stays on that one.
    const opts = [['', 'latest (' + latest + ')']].concat(atts.slice().reverse().map((x) =>
      [String(x.attempt), x.attempt + ' ' + x.state]));
    const sig = opts.map((o) => o.join(':')).join('|');
    if (attSel.dataset.sig !== sig) {
      attSel.replaceChildren(...opts.map(([v, t]) => {
        const o = el('option', '', t);
        o.value = v;
        return o;
      }));
      attSel.dataset.sig = sig;
    }
    attSel.value = c.sel.attempt === null ? '' : String(a.attempt);

    const nodes = a.nodes || [];
    rankLabel.hidden = nodes.length <= 1;
    const rank = Math.min(c.sel.rank, Math.max(0, nodes.length - 1));
    const rsig = nodes.join('|');
    if (rankSel.dataset.sig !== rsig) {
      rankSel.replaceChildren(...nodes.map((n, i) => {
        const o = el('option', '', i + ' (' + n + ')');
        o.value = String(i);
        return o;
      }));
      rankSel.dataset.sig = rsig;
    }
    rankSel.value = String(rank);

    const key = a.attempt + '|' + c.sel.stream + '|' + rank;
    if (c.log.key === key) return; // already shown, or streaming: a refresh never restarts it
    stopLog();
    // Followed only while this attempt is the one that runs now.
    const follow = !!(j.current_attempt && j.current_attempt.attempt === a.attempt && !a.ended_at);
    const lg = c.log = {key, ctrl: new AbortController(), follow, bytes: 0, chars: 0};
    const pre = $('job-log');
    pre.replaceChildren();
    pre.dataset.bytes = '0';
    pre.dataset.key = key;
    delete pre.dataset.trimmed;
    setLogState(lg, 'loading', follow ? 'connecting...' : 'loading...');
    $('job-log-note').textContent = 'attempt ' + a.attempt + ', ' + c.sel.stream +
      (nodes.length > 1 ? ', rank ' + rank + ' (' + nodes[rank] + ')' : nodes.length ? ', ' + nodes[0] : '');
    const q = 'stream=' + c.sel.stream + '&attempt=' + a.attempt + '&rank=' + rank + (follow ? '&follow=1' : '');
    readLog(lg, '/v1/jobs/' + c.jobId + '/logs?' + q);
  }

  // -- The refresh. --------------------------------------------------------------------

  function nodesMap(body) {
    const m = new Map();
    for (const n of (body && body.nodes) || []) {
      for (const g of n.gpus || []) if (g.uuid) m.set(g.uuid, {node: n.name, index: g.index});
    }
    return m;
  }

  // The numeric id of an array task (41_7), from the history API; null if there is none.
  async function resolveTask(c) {
    const m = /^(\d+)_(\d+)$/.exec(c.id);
    const body = await api('/v1/accounting/jobs?job=' + encodeURIComponent(c.id));
    const hit = ((body && body.jobs) || []).find((x) => String(x.array_id) === m[1] && String(x.array_index) === m[2]);
    if (!hit) throw new ApiError(404, 'no task ' + m[2] + ' of array ' + m[1]);
    return hit.id;
  }

  async function refresh() {
    const c = cur;
    if (!c) return null;
    if (c.jobId === null) {
      const r = await settle([resolveTask(c)]);
      if (!r || c !== cur) return null;
      if (r[0].status === 'rejected') {
        if (!(r[0].reason instanceof AuthError)) showError(r[0].reason);
        return r;
      }
      c.jobId = r[0].value;
    }
    const now = Date.now();
    const needNodes = now - c.nodesAt > NODES_EVERY_MS ||
      (c.job && (c.job.attempts || []).some((a) => (a.gpus || []).some((u) => !c.gpuMap.has(u))) &&
        now - c.nodesAt > 5000);
    const first = await settle([api('/v1/jobs/' + c.jobId), needNodes ? api('/v1/nodes') : Promise.resolve(null)]);
    if (!first || c !== cur) return null;
    const [jobR, nodesR] = first;
    if (needNodes && nodesR.status === 'fulfilled') {
      c.gpuMap = nodesMap(nodesR.value);
      c.nodesAt = now;
    }
    if (jobR.status === 'rejected') {
      if (!(jobR.reason instanceof AuthError)) showError(jobR.reason);
      return first;
    }
    const j = jobR.value;
    const wasNone = !c.job;
    c.job = j;
    $('job-error').hidden = true;
    for (const id of ['job-head-panel', 'job-attempts-panel', 'job-charts', 'job-log-panel', 'job-spec-panel']) {
      $(id).hidden = false;
    }
    renderHead(j);
    renderWait(j);
    renderAttempts(j);
    if (wasNone || c.specFor !== j.updated_at) {
      renderSpec(j);
      c.specFor = j.updated_at;
    }
    syncLog();

    // The second round: the charts (and the ledger's GPU-hours, now and then).
    const w = seriesWindow(j);
    const ended = ENDED.has(j.state);
    const wkey = w ? w.keys.join(',') + ' ' + w.since + ' ' + w.until : '';
    const seriesDue = w && (w.open || wkey !== c.seriesKey || now - c.seriesAt > ENDED_SERIES_EVERY_MS);
    const costDue = w && (now - c.costAt > COST_EVERY_MS || (ended && !c.costFinal));
    const reqs = [];
    if (seriesDue) reqs.push(api(seriesQuery('gpu_util', w)), api(seriesQuery('mem_used', w)));
    if (costDue) {
      reqs.push(api('/v1/cost?by=job&key=' + encodeURIComponent(String(j.id)) + '&since=' +
        encodeURIComponent(new Date(ms(w.since) - 60000).toISOString()) + '&until=now'));
    }
    if (!w) {
      const why = !(j.attempts || []).length ? 'the job has not started' : 'the job holds no GPU';
      chartMessage('chart-job-util', why);
      chartMessage('chart-job-mem', why);
      c.seriesKey = '';
    }
    if (!reqs.length) return first;
    const second = await settle(reqs);
    if (!second || c !== cur) return null;
    let k = 0;
    if (seriesDue) {
      drawChart('chart-job-util', second[k++], 1, '%', [0, 100]);
      drawChart('chart-job-mem', second[k++], 1 / 1024, 'G', null); // the axis has room for "80G"
      c.seriesKey = wkey;
      c.seriesAt = now;
    }
    if (costDue) {
      const r = second[k++];
      if (r.status === 'fulfilled') {
        c.costRow = ((r.value && r.value.rows) || []).find((x) => String(x.key) === String(j.id)) || null;
        c.costAt = now;
        c.costFinal = ended;
        renderHead(j);
      }
    }
    return first.concat(second);
  }

  G.register({
    name: 'job',
    title: 'Job',
    range: false, // the charts span the job's life
    match: (p) => {
      const m = /^\/jobs\/([^/]+)$/.exec(p);
      if (!m) return null;
      let id;
      try {
        id = decodeURIComponent(m[1]);
      } catch (e) {
        id = m[1];
      }
      return {id};
    },
    titleOf: (params) => 'Job ' + params.id,
    mount(params, box) {
      cur = {
        id: params.id,
        // A plain number is the job's id; an array task's (41_7) is looked up first.
        jobId: /^\d+$/.test(params.id) ? params.id : /^\d+_\d+$/.test(params.id) ? null : params.id,
        job: null,
        gpuMap: new Map(),
        nodesAt: 0,
        costRow: null,
        costAt: 0,
        costFinal: false,
        seriesKey: '',
        seriesAt: 0,
        specAll: false,
        specFor: null,
        sel: {stream: 'stdout', attempt: null, rank: 0},
        log: {key: null, ctrl: null, bytes: 0, chars: 0},
      };
      if (cur.jobId !== null && !/^\d+$/.test(cur.jobId)) cur.jobId = encodeURIComponent(cur.jobId); // the API says 400
      build(box);
    },
    refresh,
    unmount() {
      stopLog();
      cur = null;
    },
    signedOut() {
      stopLog();
      if (cur) cur.log.key = null; // signed in again: the log is read again
    },
  });
})();
