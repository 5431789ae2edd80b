/*
 * overview.js - the dashboard's first page, at / (docs/dashboard.md): tiles,
 * services, the utilization and queue charts over the time range, nodes and
 * GPUs, the queue and the running jobs, cost and budgets, idle jobs.
 *
 * Each panel draws from its own request, so one API that fails or is not there
 * (404: an older controller) leaves the others working.
 */
'use strict';

(function () {
  const {state, $, ApiError, el, badge, msg, table, jobLink, nodeLink, reasonCell, isNum, fmtPct, fmtFrac,
    fmtMoney, fmtHours, fmtGiB, fmtShares, fmtDuration, fmtTime, fmtSeconds, serverNow, since,
    gpusHeld, classOf, gpusOf, utilClass, bar, api, fetchJobs, failure, setPanel, chartMessage,
    renderChart} = window.GPO;

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
        d.appendChild(el('div')).appendChild(nodeLink(n.name));
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


  function specName(j) {
    return j.spec && j.spec.name ? j.spec.name : '';
  }

  // -- Filters of the queue and running tables (in the URL: ?q=&team=&user=). -----------

  function jobFilter() {
    const p = new URLSearchParams(location.search);
    return {q: (p.get('q') || '').trim().toLowerCase(), team: p.get('team') || '', user: p.get('user') || ''};
  }

  // The search box's text: the job's id, or part of its name or user (any case).
  function jobMatches(f, j) {
    if (f.team && j.team !== f.team) return false;
    if (f.user && j.user !== f.user) return false;
    if (!f.q) return true;
    return String(j.id) === f.q || specName(j).toLowerCase().includes(f.q) ||
      String(j.user || '').toLowerCase().includes(f.q);
  }

  const filtered = (f) => !!(f.q || f.team || f.user);

  // "3 waiting", or "1 of 3 waiting" when a filter hides some.
  function countNote(shown, all, what) {
    if (!all) return '';
    return shown === all ? `${all} ${what}` : `${shown} of ${all} ${what}`;
  }

  // The team and user choices: those of the jobs listed, and the one chosen.
  function setChoices(id, values, chosen) {
    const sel = $(id);
    const want = [''].concat([...new Set(values.concat(chosen ? [chosen] : []))].sort());
    const have = [...sel.options].map((o) => o.value);
    if (have.join('\n') !== want.join('\n')) {
      sel.replaceChildren(...want.map((v) => {
        const o = el('option', '', v || 'all');
        o.value = v;
        return o;
      }));
    }
    sel.value = chosen;
  }

  function renderFilters(jobs) {
    const f = jobFilter();
    setChoices('f-team', jobs.map((j) => j.team).filter(Boolean), f.team);
    setChoices('f-user', jobs.map((j) => j.user).filter(Boolean), f.user);
    $('f-clear').hidden = !filtered(f);
    const box = $('search-q');
    if (document.activeElement !== box) box.value = new URLSearchParams(location.search).get('q') || '';
  }

  function setFilter(name, value) {
    const p = new URLSearchParams(location.search);
    if (value) p.set(name, value);
    else p.delete(name);
    const q = p.toString();
    window.GPO.navigate(location.pathname + (q ? '?' + q : ''), true);
  }

  // The jobs in `state` that the filters keep, in cmp's order, counted in the
  // panel's note ("1 of 3 waiting"); null, with the panel saying why, for none.
  function filteredJobs(jobs, state, panel, what, cmp) {
    const f = jobFilter();
    const all = jobs.filter((j) => j.state === state);
    const shown = all.filter((j) => jobMatches(f, j)).sort(cmp);
    $(panel + '-note').textContent = countNote(shown.length, all.length, what);
    if (shown.length) return shown;
    setPanel(panel, msg(all.length ? `no ${what} job matches the filter` : `no job is ${what}`));
    return null;
  }

  function renderQueue(jobs) {
    const pending = filteredJobs(jobs, 'PENDING', 'queue', 'waiting',
      (a, b) => Date.parse(a.submitted_at) - Date.parse(b.submitted_at) || a.id - b.id);
    if (!pending) return;
    setPanel('queue', table([
      {h: 'ID', num: true, cls: 'mono', cell: (j) => jobLink(j.id)},
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
    const running = filteredJobs(jobs, 'RUNNING', 'running', 'running', (a, b) => a.id - b.id);
    if (!running) return;
    setPanel('running', table([
      {h: 'ID', num: true, cls: 'mono', cell: (j) => jobLink(j.id)},
      {h: 'Name', cell: specName},
      {h: 'Team', cell: (j) => j.team},
      {h: 'User', cell: (j) => j.user},
      {h: 'Project', cell: (j) => (j.spec && j.spec.project) || '-'},
      {h: 'Model', cell: (j) => (j.spec && j.spec.model) || '-'},
      {h: 'State', cell: (j) => window.GPO.stateBadge(j.current_attempt ? j.current_attempt.state : j.state)},
      {h: 'GPUs', num: true, cell: gpusHeld},
      {h: 'Nodes', cell: (j) => window.GPO.nodeLinks(j.current_attempt ? j.current_attempt.nodes : [])},
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
      {h: 'ID', num: true, cls: 'mono', cell: (j) => jobLink(j.id)},
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

  // The charts, over the page's time range (GPO.currentRange: in the URL).
  const CHARTS = [
    {id: 'chart-util-node', query: 'metric=gpu_util&by=node', unit: '%', range: [0, 100], note: '%'},
    {id: 'chart-util-team', query: 'metric=gpu_util&by=team', unit: '%', range: [0, 100], note: '%'},
    {id: 'chart-queue', query: 'metric=queue_length&by=team', unit: '', range: null, note: 'pending jobs'},
  ];


  // -- Services (docs/dashboard.md): GET /v1/services each refresh. ------------------

  const SVC_HISTORY_MS = 2 * 60 * 1000; // the cost's history the page keeps
  const SVC_RATE_MIN_MS = 5000; // cost per hour: from the cost's growth over at least this
  const SVC_RATE_MAX_MS = 60000; // ... and at most this

  // Each service's cost as the page saw it, one point a refresh (t in seconds):
  // the cost per hour column is how fast it grows. (The charts read the series API.)
  function recordServices(services) {
    const h = state.svcHist;
    const now = serverNow();
    h.t.push(now / 1000);
    const n = h.t.length;
    for (const s of services) {
      const st = s.status || {};
      let e = h.byName[s.name];
      if (!e) e = h.byName[s.name] = {cost: new Array(n - 1).fill(null)};
      e.cost.push(st.cost && isNum(st.cost.cost) ? st.cost.cost : null);
    }
    for (const e of Object.values(h.byName)) while (e.cost.length < n) e.cost.push(null);
    // Forget what is older than the window, and services gone from all of it.
    let drop = 0;
    while (drop < h.t.length - 1 && now / 1000 - h.t[drop] > SVC_HISTORY_MS / 1000) drop++;
    if (drop) {
      h.t.splice(0, drop);
      for (const e of Object.values(h.byName)) e.cost.splice(0, drop);
    }
    for (const [name, e] of Object.entries(h.byName)) {
      if (e.cost.every((v) => v === null)) delete h.byName[name];
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

  // The services' charts over the time range: GET /v1/metrics/series by
  // service of each metric (SVC_SERIES), the services listed now only.
  const SVC_SERIES = ['replicas', 'desired_replicas', 'rps', 'latency_p50', 'latency_p99'];
  const SVC_CHARTS = ['chart-svc-replicas', 'chart-svc-rps', 'chart-svc-latency'];

  function serviceCharts(names, res) {
    const bodies = res.map((r) => (r.status === 'fulfilled' ? r.value : null));
    const failed = res.find((r) => r.status === 'rejected');
    if (failed) {
      const text = failed.reason instanceof ApiError && failed.reason.status === 404 ? 'not available'
        : 'could not load: ' + (failed.reason && failed.reason.message);
      for (const id of SVC_CHARTS) chartMessage(id, text, text !== 'not available');
      return;
    }
    const [ready, desired, rps, p50, p99] = bodies;
    // One chart's body from several answers (the same grid): series renamed NAME + suffix.
    const merge = (parts) => ({t: parts[0][0].t, step_s: parts[0][0].step_s,
      series: parts.flatMap(([b, suffix]) => (b.series || []).filter((s) => names.includes(s.key))
        .map((s) => ({key: s.key + suffix, values: s.values})))});
    // One colour per service on every chart; its desired count and p99 dashed, in the same colour.
    const colorOf = (k) => Math.max(0, names.indexOf(k.replace(/ (desired|p50|p99)$/, '')));
    renderChart('chart-svc-replicas', merge([[ready, ''], [desired, ' desired']]), '', null,
      {colorOf, dashOf: (k) => / desired$/.test(k)});
    renderChart('chart-svc-rps', merge([[rps, '']]), '', null, {colorOf});
    renderChart('chart-svc-latency', merge([[p50, ' p50'], [p99, ' p99']]), 's', null,
      {colorOf, dashOf: (k) => / p99$/.test(k)});
  }


  // the API (404), hides it; another failure shows in it when it was shown.
  function showServices(r, seriesRes) {
    const block = $('services-block');
    const list = r.status === 'fulfilled' ? (r.value && r.value.services) || [] : null;
    if (list && list.length) {
      recordServices(list);
      block.hidden = false;
      renderServices(list);
      serviceCharts(list.map((s) => s.name).sort(), seriesRes);
      return;
    }
    if (list || (r.reason instanceof ApiError && r.reason.status === 404) || block.hidden) {
      block.hidden = true;
      clearServiceHistory();
      for (const id of SVC_CHARTS) chartMessage(id, 'no data yet');
      return;
    }
    setPanel('services', failure(r.reason));
  }


  // -- The page. -----------------------------------------------------------------------

  async function refresh() {
    const costBy = state.costBy;
    const range = window.GPO.currentRange();
    const rq = window.GPO.rangeQuery(range);
    for (const c of CHARTS) {
      const note = $(c.id).parentNode.querySelector('.panel-note');
      if (note) note.textContent = c.note + ', ' + range.label;
    }
    // The services' series only while there are services: with the others when
    // the last answer listed some, else after this one's list, if it has any.
    const svcSeries = () => SVC_SERIES.map((m) => api('/v1/metrics/series?metric=' + m + '&by=service&' + rq));
    const withSvc = state.svcSeen;
    let res = await window.GPO.settle([
      api('/v1/nodes'),
      fetchJobs(),
      api('/v1/cost?by=' + encodeURIComponent(costBy)),
      api('/v1/budgets'),
      api('/v1/services'),
    ].concat(CHARTS.map((c) => api('/v1/metrics/series?' + c.query + '&' + rq)), withSvc ? svcSeries() : []));
    if (!res) return null;
    const val = (r) => (r.status === 'fulfilled' ? r.value : null);
    const servicesR = res[4];
    state.svcSeen = !!(val(servicesR) && (val(servicesR).services || []).length);
    if (state.svcSeen && !withSvc) {
      const more = await window.GPO.settle(svcSeries());
      if (!more) return null;
      res = res.concat(more);
    }
    const [nodesR, jobsR, costR, budgetsR] = res;
    const nodes = val(nodesR) ? val(nodesR).nodes || [] : null;
    const jobs = val(jobsR);

    if (nodes) renderNodes(nodes, jobs);
    else setPanel('nodes', failure(nodesR.reason));
    if (jobs) {
      renderFilters(jobs);
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
    showServices(servicesR, res.slice(5 + CHARTS.length));
    for (const id of SVC_CHARTS) {
      const note = $(id).parentNode.querySelector('.panel-note');
      if (note) note.textContent = note.dataset.what + ', ' + range.label;
    }

    CHARTS.forEach((c, i) => {
      const r = res[5 + i];
      if (r.status === 'fulfilled') renderChart(c.id, r.value, c.unit, c.range);
      else if (r.reason instanceof ApiError && r.reason.status === 404) chartMessage(c.id, 'not available');
      else chartMessage(c.id, 'could not load: ' + (r.reason && r.reason.message), true);
    });
    return res;
  }

  function init() {
    $('f-team').addEventListener('change', (ev) => setFilter('team', ev.target.value));
    $('f-user').addEventListener('change', (ev) => setFilter('user', ev.target.value));
    $('f-clear').addEventListener('click', () => {
      const p = new URLSearchParams(location.search);
      for (const k of ['q', 'team', 'user']) p.delete(k);
      $('search-q').value = '';
      const q = p.toString();
      window.GPO.navigate(location.pathname + (q ? '?' + q : ''), true);
    });
    // Typing in the search box filters the overview's tables as it goes.
    let typing = null;
    $('search-q').addEventListener('input', (ev) => {
      if (document.documentElement.dataset.page !== 'overview') return;
      clearTimeout(typing);
      typing = setTimeout(() => {
        // Enter may have opened another page meanwhile.
        if (document.documentElement.dataset.page === 'overview') setFilter('q', ev.target.value.trim());
      }, 250);
    });
    $('cost-by').addEventListener('click', (ev) => {
      const by = ev.target && ev.target.dataset ? ev.target.dataset.by : null;
      if (!by || by === state.costBy) return;
      state.costBy = by;
      for (const b of $('cost-by').querySelectorAll('button')) b.classList.toggle('on', b.dataset.by === by);
      setPanel('cost', msg('loading...'));
      window.GPO.refreshNow();
    });
  }

  window.GPO.register({
    name: 'overview',
    title: 'Overview',
    range: true,
    match: (p) => (p === '/' || p === '/index.html' ? {} : null),
    mount() {},
    refresh,
    unmount() {},
    signedOut() {
      clearServiceHistory();
      state.svcSeen = false;
      $('services-block').hidden = true;
    },
  });
  init();
})();
