/*
 * node.js - a node's page, at /nodes/NAME (docs/dashboard.md): the node's
 * state, pool, heartbeat, CPUs and memory, its GPUs (type, UUID, memory, the
 * last sample's utilization, memory used, power and temperature, the jobs
 * holding each), and per-GPU charts of utilization, memory used, power and
 * temperature over the time range.
 *
 * The node comes from GET /v1/nodes (there is no GET /v1/nodes/{name}); the
 * jobs holding its GPUs from the running jobs' current attempts; the charts
 * from GET /v1/metrics/series?by=gpu&node=NAME, one series per GPU, keyed by
 * UUID, shown as "GPU i" (the node's index of that UUID).
 */
'use strict';

(function () {
  const G = window.GPO;
  const {$, el, badge, msg, table, jobLink, isNum, fmtPct, fmtGiB, fmtDuration, fmtTime, since, api,
    fetchJobs, failure, setPanel, chartMessage, renderChart, ApiError} = G;

  // value: per-point transform of the API's figure (memory: MiB -> GiB).
  const CHARTS = [
    {id: 'nd-chart-util', metric: 'gpu_util', title: 'GPU utilization', unit: '%', range: [0, 100], note: '%'},
    {id: 'nd-chart-mem', metric: 'mem_used', title: 'GPU memory used', unit: '', range: null, note: 'GiB',
      value: (v) => v / 1024},
    // Power without a unit on the axis: "300W" is wider than its labels' room.
    {id: 'nd-chart-power', metric: 'power', title: 'GPU power', unit: '', range: null, note: 'W'},
    {id: 'nd-chart-temp', metric: 'temperature', title: 'GPU temperature', unit: 'C', range: null, note: 'C'},
  ];

  let name = null; // the node shown

  function nodeState(s) {
    const color = {up: 'green', draining: 'yellow', drained: 'yellow', down: 'red'}[s] || 'muted';
    return badge(s || '?', color);
  }

  function tile(id, label) {
    const t = el('div', 'tile');
    t.appendChild(el('div', 'tile-label', label));
    t.appendChild(el('div', 'tile-value', '-')).id = id;
    return t;
  }

  function setTile(id, value) {
    const t = $(id);
    if (value instanceof Node) t.replaceChildren(value);
    else t.textContent = value === null || value === undefined ? '-' : String(value);
  }

  // uuid -> [job, ...] from the running jobs' current attempts.
  function holders(jobs) {
    const m = new Map();
    for (const j of jobs || []) {
      for (const u of (j.current_attempt && j.current_attempt.gpus) || []) {
        if (!m.has(u)) m.set(u, []);
        m.get(u).push(j);
      }
    }
    return m;
  }

  function jobsCell(g, on, dirty) {
    const d = el('span', 'nd-jobs');
    if (on.length) {
      on.forEach((j, i) => {
        if (i) d.appendChild(document.createTextNode(', '));
        d.appendChild(jobLink(j.id));
        if (j.spec && j.spec.name) d.appendChild(el('span', 'muted', ' ' + j.spec.name));
      });
    } else if (g.in_use) {
      d.appendChild(el('span', '', 'in use')); // another team's job, hidden from this user
    } else {
      d.appendChild(el('span', 'muted', dirty ? 'held: stray processes' : 'free'));
    }
    return d;
  }

  function renderSummary(n) {
    setTile('nd-state', nodeState(n.state));
    setTile('nd-pool', n.pool || '-');
    setTile('nd-heartbeat', n.last_heartbeat ? fmtDuration(since(n.last_heartbeat)) + ' ago' : '-');
    setTile('nd-cpus', isNum(n.cpus) ? n.cpus : '-');
    setTile('nd-mem', isNum(n.mem_mib) ? fmtGiB(n.mem_mib) + ' GiB' : '-');
    setTile('nd-gpus', (isNum(n.gpus_in_use) ? String(Math.round(n.gpus_in_use * 1000) / 1000) : '-') +
      ' / ' + (n.gpus || []).length);
    setTile('nd-mig', n.mig_mode || 'off');
    const notes = [];
    if (n.sampled_at) notes.push('sampled ' + fmtTime(n.sampled_at));
    if (n.rejoin_hold) notes.push('rejoining: no GPU offered yet');
    $('nd-note').textContent = notes.join(', ');
  }

  function renderGpus(n, jobs) {
    const gpus = (n.gpus || []).slice().sort((a, b) => a.index - b.index);
    if (!gpus.length) {
      setPanel('nd-gpus-body', msg('this node has no GPUs'));
      return;
    }
    const samples = new Map((n.gpu_samples || []).map((s) => [s.uuid, s]));
    const dirty = new Set(n.dirty_gpus || []);
    const held = holders(jobs);
    const sample = (g) => samples.get(g.uuid) || {};
    setPanel('nd-gpus-body', table([
      {h: 'GPU', num: true, cell: (g) => g.index},
      {h: 'Type', cell: (g) => g.gpu_type + (g.mig_enabled ? ' (MIG)' : '')},
      {h: 'UUID', cls: 'mono nd-uuid', cell: (g) => g.uuid},
      {h: 'Memory', num: true, cell: (g) => fmtGiB(g.mem_mib) + ' GiB'},
      {h: 'Util', num: true, cell: (g) => fmtPct(sample(g).utilization_pct)},
      {h: 'Mem used', num: true, cell: (g) => (isNum(sample(g).memory_used_mib)
        ? fmtGiB(sample(g).memory_used_mib) + ' GiB' : '-')},
      {h: 'Power', num: true, cell: (g) => (isNum(sample(g).power_mw)
        ? Math.round(sample(g).power_mw / 1000) + ' W' : '-')},
      {h: 'Temp', num: true, cell: (g) => (isNum(sample(g).temperature_c) ? sample(g).temperature_c + ' C' : '-')},
      {h: 'Jobs', cell: (g) => jobsCell(g, held.get(g.uuid) || [], dirty.has(g.uuid))},
    ], gpus));
  }

  // The series API's body with each UUID key as "GPU i" and values through c.value.
  function relabel(body, n, c) {
    const index = new Map((n ? n.gpus || [] : []).map((g) => [g.uuid, g.index]));
    const series = (body.series || []).map((s) => ({
      key: index.has(s.key) ? 'GPU ' + index.get(s.key) : String(s.key),
      values: c.value ? (s.values || []).map((v) => (isNum(v) ? c.value(v) : v)) : s.values,
    }));
    return Object.assign({}, body, {series});
  }

  // A colour per GPU index, whatever order the keys sort in.
  const colorOf = (k, i) => {
    const m = /^GPU (\d+)$/.exec(k);
    return m ? Number(m[1]) : i;
  };

  function mount(params, box) {
    name = params.name;
    box.replaceChildren();
    const head = box.appendChild(el('section', 'panel nd-head'));
    const h = head.appendChild(el('div', 'panel-head'));
    h.appendChild(el('h2', '', 'Node ' + name));
    h.appendChild(el('span', 'panel-note')).id = 'nd-note';
    const msgBox = head.appendChild(el('div', 'nd-msg'));
    msgBox.id = 'nd-msg';
    msgBox.hidden = true;
    const tiles = head.appendChild(el('div', 'tiles nd-tiles'));
    tiles.setAttribute('aria-label', 'node summary');
    for (const [id, label] of [['nd-state', 'State'], ['nd-pool', 'Pool'], ['nd-heartbeat', 'Heartbeat'],
      ['nd-cpus', 'CPUs'], ['nd-mem', 'Memory'], ['nd-gpus', 'GPUs in use'], ['nd-mig', 'MIG mode']]) {
      tiles.appendChild(tile(id, label));
    }

    const gp = box.appendChild(el('section', 'panel'));
    const gh = gp.appendChild(el('div', 'panel-head'));
    gh.appendChild(el('h2', '', 'GPUs'));
    gh.appendChild(el('span', 'panel-note', 'last sample'));
    const gb = gp.appendChild(el('div', 'panel-body nd-gpus-body'));
    gb.id = 'nd-gpus-body';
    gb.appendChild(msg('loading...'));

    const row = box.appendChild(el('section', 'row row-2'));
    for (const c of CHARTS) {
      const p = row.appendChild(el('div', 'panel'));
      const ph = p.appendChild(el('div', 'panel-head'));
      ph.appendChild(el('h2', '', c.title + ' by GPU'));
      ph.appendChild(el('span', 'panel-note')).id = c.id + '-note';
      const ch = p.appendChild(el('div', 'chart'));
      ch.id = c.id;
      ch.dataset.points = '0';
    }
  }

  async function refresh() {
    if (!name) return null;
    const range = G.currentRange();
    const rq = G.rangeQuery(range);
    for (const c of CHARTS) $(c.id + '-note').textContent = c.note + ', ' + range.label;
    const node = encodeURIComponent(name);
    const res = await G.settle([api('/v1/nodes'), fetchJobs()].concat(CHARTS.map((c) =>
      api('/v1/metrics/series?metric=' + c.metric + '&by=gpu&node=' + node + '&' + rq))));
    if (!res) return null;
    const [nodesR, jobsR] = res;
    const list = nodesR.status === 'fulfilled' ? nodesR.value.nodes || [] : null;
    const n = list ? list.find((x) => x.name === name) || null : null;
    const note = $('nd-msg');
    note.hidden = !!n;
    if (!list) {
      note.replaceChildren(failure(nodesR.reason));
      setPanel('nd-gpus-body', failure(nodesR.reason));
    } else if (!n) {
      note.replaceChildren(msg('no node named ' + name + ' has joined this controller', true));
      setPanel('nd-gpus-body', msg('no such node'));
    } else {
      renderSummary(n);
      renderGpus(n, jobsR.status === 'fulfilled' ? jobsR.value : null);
    }
    CHARTS.forEach((c, i) => {
      const r = res[2 + i];
      if (r.status === 'fulfilled') renderChart(c.id, relabel(r.value, n, c), c.unit, c.range, {colorOf});
      else if (r.reason instanceof ApiError && r.reason.status === 404) chartMessage(c.id, 'not available');
      else chartMessage(c.id, 'could not load: ' + (r.reason && r.reason.message), true);
    });
    return res;
  }

  G.register({
    name: 'node',
    title: 'Node',
    titleOf: (p) => 'Node ' + p.name,
    range: true,
    match: (p) => {
      const m = /^\/nodes\/([^/]+)$/.exec(p);
      if (!m) return null;
      try {
        return {name: decodeURIComponent(m[1])};
      } catch (e) {
        return null; // a malformed escape: not a node's page
      }
    },
    mount,
    refresh,
    unmount() {
      name = null;
    },
  });
})();
