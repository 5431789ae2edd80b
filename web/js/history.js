/*
 * history.js - the history page, at /history (docs/dashboard.md): jobs from
 * GET /v1/accounting/jobs (ended ones by default, any state the filter asks
 * for), with the columns of `gpuorch history`, filtered by team, user, state,
 * a time window and a search text, in pages of 50 (keyset: the API's
 * next_after, newest first: order=desc).
 *
 * Every filter lives in the URL (/history?team=research&state=FAILED&q=sweep)
 * so that a view can be shared or reloaded: a change of filter replaces the
 * URL (GPO.navigate(href, true)) and the refresh reads the filters back from
 * it. Paging adds `after` (the first id of the page is after it) and `prev`
 * (the `after` of each page before, so "Previous" can go back): history
 * entries of their own, so the browser's Back also goes back a page.
 */
'use strict';

(function () {
  const G = window.GPO;
  const {$, el, msg, table, jobLink, isNum, fmtDuration, fmtTime, gpusOf, api, failure,
    setPanel, serverNow} = G;

  const ENDED = G.ENDED_STATES;
  const STATES = ENDED.concat(['PENDING', 'RUNNING']);
  const PAGE = 50;
  const PREV_MAX = 100; // pages remembered for "Previous"

  let ui = null; // the page's controls, built at mount
  let lists = null; // {teams: [names] | null, users: [names] | null}, read once a mount
  let shownQuery = null; // the URL query the controls show

  // -- The filters in the URL. ---------------------------------------------------------

  const count = (v, min, max) => {
    const n = Number(v);
    return v !== null && v !== '' && Number.isInteger(n) && n >= min && n <= max ? n : null;
  };

  // {team, user, states (null: the ended states), since, until, q, after, prev: [ids], limit}.
  function filters() {
    const p = new URLSearchParams(location.search);
    const states = (p.get('state') || '').split(',').map((s) => s.trim().toUpperCase())
      .filter((s) => STATES.includes(s));
    return {
      team: p.get('team') || '',
      user: p.get('user') || '',
      states: states.length ? [...new Set(states)] : null,
      since: p.get('since') || '',
      until: p.get('until') || '',
      q: p.get('q') || '',
      after: count(p.get('after'), 0, Number.MAX_SAFE_INTEGER),
      prev: (p.get('prev') || '').split(',').filter((x) => x !== '').map((x) => count(x, 0, Number.MAX_SAFE_INTEGER))
        .filter((x) => x !== null),
      limit: count(p.get('limit'), 1, 1000) || PAGE,
    };
  }

  // The URL of the history with the filters f; the page's other parameters (refresh=) kept.
  function hrefOf(f) {
    const p = new URLSearchParams(location.search);
    const set = (k, v) => {
      if (v === null || v === undefined || v === '') p.delete(k);
      else p.set(k, String(v));
    };
    const states = f.states && !(f.states.length === ENDED.length && ENDED.every((s) => f.states.includes(s)))
      ? STATES.filter((s) => f.states.includes(s)).join(',') : '';
    set('team', f.team);
    set('user', f.user);
    set('state', states);
    set('since', f.since);
    set('until', f.until);
    set('q', f.q);
    set('after', f.after);
    set('prev', f.after !== null && f.prev.length ? f.prev.slice(-PREV_MAX).join(',') : '');
    set('limit', f.limit !== PAGE ? f.limit : '');
    const q = p.toString();
    return '/history' + (q ? '?' + q : '');
  }

  // The API's query for the filters f.
  function apiQuery(f) {
    const p = new URLSearchParams();
    p.set('state', (f.states || ENDED).join(','));
    p.set('order', 'desc'); // newest first
    for (const k of ['team', 'user', 'since', 'until', 'q']) if (f[k]) p.set(k, f[k]);
    if (f.after !== null) p.set('after', String(f.after));
    p.set('limit', String(f.limit));
    return p.toString();
  }

  // A filter changed: back to the first page, the URL replaced.
  function change(patch) {
    const f = Object.assign(filters(), patch, {after: null, prev: []});
    G.navigate(hrefOf(f), true);
  }

  // -- Times: the URL holds RFC 3339 (UTC), the inputs local time to the minute. -------

  function fromInput(value) {
    const d = new Date(value);
    return value && !isNaN(d) ? d.toISOString().replace(/\.\d{3}Z$/, 'Z') : '';
  }

  // -- The controls. -------------------------------------------------------------------

  function field(label, control) {
    const l = el('label', 'hist-field');
    l.appendChild(el('span', 'hist-label', label));
    l.appendChild(control);
    return l;
  }

  function textInput(id, placeholder) {
    const i = el('input');
    i.id = id;
    i.type = 'text';
    i.placeholder = placeholder;
    i.autocomplete = 'off';
    i.spellcheck = false;
    return i;
  }

  // A team or user filter: a free text input until the list is known (members
  // may not list users: 403), then a <select> of the names.
  function pickBox(id, placeholder) {
    const box = el('span', 'hist-pick');
    box.appendChild(textInput(id, placeholder));
    return box;
  }

  function buildControls(box) {
    const form = el('form', 'hist-filters');
    form.id = 'hist-form';
    form.noValidate = true;
    form.setAttribute('role', 'search');
    form.setAttribute('aria-label', 'filter the history');
    const q = textInput('hist-q', 'id, user or part of a name');
    q.type = 'search';
    form.appendChild(field('Search', q));
    const team = pickBox('hist-team', 'any team');
    form.appendChild(field('Team', team));
    const user = pickBox('hist-user', 'any user');
    form.appendChild(field('User', user));
    const since = el('input');
    since.id = 'hist-since';
    since.type = 'datetime-local';
    form.appendChild(field('Since', since));
    const until = el('input');
    until.id = 'hist-until';
    until.type = 'datetime-local';
    form.appendChild(field('Until', until));
    const states = el('div', 'hist-states');
    states.id = 'hist-states';
    states.setAttribute('role', 'group');
    states.setAttribute('aria-label', 'job states');
    for (const s of STATES) {
      const l = el('label', 'hist-state');
      const c = el('input');
      c.type = 'checkbox';
      c.value = s;
      l.appendChild(c);
      l.appendChild(document.createTextNode(s));
      states.appendChild(l);
    }
    form.appendChild(states);
    const actions = el('span', 'hist-actions');
    const apply = el('button', 'btn', 'Apply');
    apply.type = 'submit';
    actions.appendChild(apply);
    const reset = el('button', 'btn btn-ghost', 'Clear');
    reset.type = 'button';
    reset.id = 'hist-clear';
    actions.appendChild(reset);
    form.appendChild(actions);

    // Text and times are applied with Enter or Apply (a time typed field by
    // field is valid, and would be sent, at each field); a select or a box at once.
    form.addEventListener('submit', (ev) => {
      ev.preventDefault();
      change(formFilters());
    });
    form.addEventListener('change', (ev) => {
      if (ev.target.tagName === 'SELECT' || ev.target.type === 'checkbox') change(formFilters());
    });
    reset.addEventListener('click', () => change({team: '', user: '', states: null, since: '', until: '', q: ''}));
    box.appendChild(form);
    return {form, q, since, until, states};
  }

  function formFilters() {
    const checked = [...ui.states.querySelectorAll('input:checked')].map((c) => c.value);
    return {
      q: ui.q.value.trim(),
      team: $('hist-team').value.trim(),
      user: $('hist-user').value.trim(),
      since: fromInput(ui.since.value),
      until: fromInput(ui.until.value),
      states: checked.length ? checked : null,
    };
  }

  // Replaces the text input of a team or user filter with a select of `names`.
  function toSelect(id, names, any) {
    const old = $(id);
    if (!old || old.tagName === 'SELECT') return;
    const s = el('select');
    s.id = id;
    s.appendChild(el('option', '', any)).value = '';
    for (const n of names) s.appendChild(el('option', '', n)).value = n;
    old.replaceWith(s);
  }

  function setPick(id, value) {
    const c = $(id);
    if (c.tagName === 'SELECT' && value && ![...c.options].some((o) => o.value === value)) {
      c.appendChild(el('option', '', value)).value = value; // not (or no longer) listed: kept
    }
    c.value = value;
  }

  // The controls as the URL says (at mount, after Back, after the toolbar's search).
  function syncControls(f) {
    if (shownQuery === location.search) return;
    shownQuery = location.search;
    ui.q.value = f.q;
    setPick('hist-team', f.team);
    setPick('hist-user', f.user);
    ui.since.value = G.localInput(Date.parse(f.since));
    ui.until.value = G.localInput(Date.parse(f.until));
    const on = f.states || ENDED;
    for (const c of ui.states.querySelectorAll('input')) c.checked = on.includes(c.value);
  }

  // The teams and users of the dropdowns, once a mount; a refused list (403) keeps the text input.
  function loadLists() {
    if (lists) return [];
    lists = {teams: null, users: null};
    const names = (arr) => (arr || []).map((x) => x.name).filter(Boolean).sort();
    const t = api('/v1/teams').then((b) => {
      lists.teams = names(b.teams);
      toSelect('hist-team', lists.teams, 'any team');
      shownQuery = null;
    });
    const u = api('/v1/users').then((b) => {
      lists.users = names(b.users);
      toSelect('hist-user', lists.users, 'any user');
      shownQuery = null;
    });
    // Not the page's data: a refusal here does not count as the page failing.
    return [t.catch(() => null), u.catch(() => null)];
  }

  // -- The table. ----------------------------------------------------------------------

  // The job's last attempt (what sacct reports): the last of attempts, else the current one.
  function lastAttempt(j) {
    const a = j.attempts || [];
    return a.length ? a[a.length - 1] : j.current_attempt || null;
  }

  // sacct's state: REQUEUED for a pending job that ran before, OUT_OF_MEMORY for an OOM failure.
  function stateOf(j) {
    if (j.state === 'PENDING' && j.attempts_made > 0) return 'REQUEUED';
    if (j.state === 'FAILED' && /^out of memory/.test(j.reason || '')) return 'OUT_OF_MEMORY';
    return j.state;
  }

  // sacct's ExitCode, "code:signal" of the last attempt (0:0 when it did not run).
  function exitOf(j) {
    const a = lastAttempt(j) || {};
    return (isNum(a.exit_code) ? a.exit_code : 0) + ':' + (isNum(a.signal) ? a.signal : 0);
  }

  function elapsedOf(j) {
    const a = lastAttempt(j);
    const start = a ? Date.parse(a.started_at || '') : NaN;
    if (!isNum(start)) return '-';
    const end = Date.parse(a.ended_at || '');
    return fmtDuration(Math.max(0, (isNum(end) ? end : serverNow()) - start));
  }

  function idText(j) {
    return isNum(j.array_id) ? j.array_id + '_' + j.array_index : String(j.id);
  }

  function stateCell(j) {
    const s = stateOf(j);
    const b = G.stateBadge(s);
    if (j.reason) b.title = j.reason;
    return b;
  }

  function nodesCell(j) {
    const a = lastAttempt(j);
    const nodes = (a && a.nodes) || [];
    if (!nodes.length) return el('span', 'muted', '-');
    const d = G.nodeLinks(nodes);
    d.className = 'hist-nodes';
    return d;
  }

  const COLUMNS = [
    {h: 'Job ID', num: true, cell: (j) => jobLink(j.id, idText(j))},
    {h: 'Name', cls: 'hist-name', cell: (j) => (j.spec && j.spec.name) || '-'},
    {h: 'User', cell: (j) => j.user},
    {h: 'Team', cell: (j) => j.team},
    {h: 'State', cell: stateCell},
    {h: 'Exit', num: true, cls: 'mono', cell: exitOf},
    {h: 'Start', num: true, cell: (j) => fmtTime((lastAttempt(j) || {}).started_at)},
    {h: 'End', num: true, cell: (j) => fmtTime((lastAttempt(j) || {}).ended_at)},
    {h: 'Elapsed', num: true, cell: elapsedOf},
    {h: 'GPUs', num: true, cell: (j) => gpusOf(j.spec)},
    {h: 'Nodes', cell: nodesCell},
  ];

  function pageButton(text, id, href) {
    const b = el('button', 'btn', text);
    b.type = 'button';
    b.id = id;
    b.disabled = !href;
    if (href) b.addEventListener('click', () => G.navigate(href));
    return b;
  }

  function renderPager(f, body) {
    const pageNo = f.after === null ? 1 : f.prev.length + 2;
    const n = (body.jobs || []).length;
    const first = (pageNo - 1) * f.limit;
    $('hist-note').textContent = (n > 1 ? `jobs ${first + 1}-${first + n}, ` : n ? `job ${first + 1}, ` : '') +
      'page ' + pageNo;
    const next = isNum(body.next_after)
      ? hrefOf(Object.assign({}, f, {after: body.next_after, prev: f.after === null ? [] : f.prev.concat([f.after])}))
      : null;
    const prev = f.after === null ? null
      : hrefOf(Object.assign({}, f, {after: f.prev.length ? f.prev[f.prev.length - 1] : null,
        prev: f.prev.slice(0, -1)}));
    const firstHref = f.after === null ? null : hrefOf(Object.assign({}, f, {after: null, prev: []}));
    $('hist-pager').replaceChildren(pageButton('First', 'hist-first', firstHref),
      pageButton('Previous', 'hist-prev', prev), pageButton('Next', 'hist-next', next));
  }

  function renderJobs(f, body) {
    const jobs = body.jobs || [];
    if (!jobs.length) {
      setPanel('hist-jobs', msg(f.after === null ? 'no job matches these filters' : 'no more jobs'));
    } else {
      setPanel('hist-jobs', table(COLUMNS, jobs));
    }
    renderPager(f, body);
  }

  // -- The page. -----------------------------------------------------------------------

  function mount(params, box) {
    lists = null;
    shownQuery = null;
    box.replaceChildren();
    const fp = box.appendChild(el('section', 'panel hist-filter-panel'));
    fp.setAttribute('aria-label', 'filters');
    const fh = fp.appendChild(el('div', 'panel-head'));
    fh.appendChild(el('h2', '', 'History'));
    fh.appendChild(el('span', 'panel-note', 'newest first; filters are in the address'));
    ui = buildControls(fp);

    const jp = box.appendChild(el('section', 'panel'));
    const jh = jp.appendChild(el('div', 'panel-head'));
    jh.appendChild(el('h2', '', 'Jobs'));
    jh.appendChild(el('span', 'panel-note')).id = 'hist-note';
    const body = jp.appendChild(el('div', 'panel-body hist-body'));
    body.id = 'hist-jobs';
    body.appendChild(msg('loading...'));
    jp.appendChild(el('div', 'hist-pager')).id = 'hist-pager';
  }

  async function refresh() {
    if (!ui) return null;
    const f = filters();
    syncControls(f);
    const res = await G.settle([api('/v1/accounting/jobs?' + apiQuery(f))].concat(loadLists()));
    if (!res) return null;
    const [jobsR] = res;
    if (jobsR.status === 'fulfilled') {
      renderJobs(f, jobsR.value);
    } else {
      setPanel('hist-jobs', failure(jobsR.reason));
      $('hist-pager').replaceChildren();
      $('hist-note').textContent = '';
    }
    syncControls(f); // the dropdowns may have just been built
    return res;
  }

  G.register({
    name: 'history',
    title: 'History',
    titleOf: () => 'History',
    range: false,
    match: (p) => (p === '/history' || p === '/history/' ? {} : null),
    mount,
    refresh,
    unmount() {
      ui = null;
    },
  });
})();
