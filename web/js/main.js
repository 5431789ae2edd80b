/*
 * main.js - the dashboard's frame (docs/dashboard.md): sign in and out, the
 * page router (/, /jobs/ID, /nodes/NAME, /history: the controller serves the
 * same page at each, and links between them move in place with pushState),
 * the time range selector and the search box of the toolbar, and the refresh
 * cycle: the page shown is read again every POLL_MS while the tab is visible.
 * A 401 from any request means the token is no longer good: back to the
 * sign-in form.
 */
'use strict';

(function () {
  const G = window.GPO;
  const {state, $, AuthError, el, POLL_MS, TOKEN_KEY, RANGES, localInput} = G;

  let current = null; // the page shown: {page, params, key}

  // -- The refresh cycle. --------------------------------------------------------------

  function showStatus(failed) {
    const s = $('status');
    s.hidden = false;
    const stale = failed || Date.now() - state.lastOk > 3 * POLL_MS;
    s.className = stale ? 'status stale' : 'status';
    s.textContent = stale ? 'cannot reach the server' : 'live';
    const u = $('updated');
    u.hidden = !state.lastOk;
    if (state.lastOk) u.textContent = 'updated ' + new Date(state.lastOk).toLocaleTimeString();
  }

  function schedule() {
    clearTimeout(state.timer);
    state.timer = setTimeout(tick, POLL_MS);
  }

  async function refresh() {
    if (!current) return;
    const res = await current.page.refresh(current.params);
    if (!res) return; // signed out, or another page meanwhile
    if (res.some((r) => r.status === 'rejected' && r.reason instanceof AuthError)) {
      signOut('Your session ended: the server no longer accepts this token (401). Sign in again.');
      return;
    }
    const allFailed = res.every((r) => r.status === 'rejected');
    if (!allFailed) state.lastOk = Date.now();
    state.polls++;
    state.pagePolls++;
    const root = document.documentElement;
    root.dataset.polls = String(state.polls);
    root.dataset.pagePolls = String(state.pagePolls);
    showStatus(allFailed);
    if (!root.dataset.loaded) {
      root.dataset.loaded = '1';
      performance.mark('gpuorch-loaded');
    }
  }

  // One refresh at a time; one asked for during another runs right after it.
  async function tick() {
    if (!state.token) return;
    if (state.running) {
      state.again = true;
      return;
    }
    if (document.hidden) {
      schedule(); // no point polling for a tab nobody looks at
      return;
    }
    state.running = true;
    try {
      do {
        state.again = false;
        await refresh();
      } while (state.again && state.token);
    } catch (e) {
      showStatus(true);
      if (window.console) console.error(e);
    } finally {
      state.running = false;
      if (state.token) schedule();
    }
  }
  G.refreshNow = tick;

  // -- Pages. --------------------------------------------------------------------------

  function hideAllPages() {
    for (const p of G.pages) {
      const box = $('page-' + p.name);
      if (box) box.hidden = true;
    }
  }

  // Shows the page location names (mounting it when it or its parameters
  // changed); unknown paths show the overview.
  function route() {
    const path = location.pathname;
    let page = null;
    let params = null;
    for (const p of G.pages) {
      params = p.match(path);
      if (params) {
        page = p;
        break;
      }
    }
    if (!page) {
      page = G.pages.find((p) => p.name === 'overview');
      params = {};
    }
    const key = page.name + ' ' + JSON.stringify(params);
    drawToolbar(page);
    if (!current || current.key !== key) {
      if (current) {
        current.page.unmount();
        G.dropCharts($('page-' + current.page.name));
      }
      state.routeGen++;
      state.pagePolls = 0;
      hideAllPages();
      current = {page, params, key};
      const box = $('page-' + page.name);
      box.hidden = false;
      document.documentElement.dataset.page = page.name;
      page.mount(params, box);
    } else {
      state.routeGen++; // the same page with another range or filter: read again
    }
    document.title = (page.titleOf ? page.titleOf(params) : page.title) + ' - gpuorch';
    if (state.token) tick();
  }
  G.setOnRoute(route);

  // -- The toolbar: pages, search, time range. -----------------------------------------

  function drawToolbar(page) {
    for (const a of document.querySelectorAll('#nav a')) {
      a.classList.toggle('on', a.dataset.page === page.name);
    }
    const box = $('range');
    box.hidden = !page.range;
    if (!page.range) {
      $('range-custom').hidden = true; // a page without charts over the range
      return;
    }
    const r = G.currentRange();
    for (const b of box.querySelectorAll('button[data-range]')) {
      b.classList.toggle('on', b.dataset.range === r.key);
    }
    $('range-custom-btn').classList.toggle('on', r.key === 'custom');
    const custom = $('range-custom');
    if (r.key === 'custom') {
      $('range-from').value = localInput(r.from_ms);
      $('range-to').value = localInput(r.to_ms);
    } else {
      custom.hidden = true;
    }
  }

  function initToolbar() {
    const box = $('range');
    for (const [key] of RANGES) {
      const b = el('button', '', key);
      b.type = 'button';
      b.dataset.range = key;
      box.insertBefore(b, $('range-custom-btn'));
    }
    box.addEventListener('click', (ev) => {
      const b = ev.target.closest('button');
      if (!b) return;
      if (b.dataset.range) {
        $('range-custom').hidden = true;
        G.navigate(G.rangeHref(b.dataset.range));
      } else if (b.id === 'range-custom-btn') {
        const custom = $('range-custom');
        custom.hidden = !custom.hidden;
        $('range-error').hidden = true;
        if (!custom.hidden && !$('range-from').value) {
          const r = G.currentRange();
          const to = r.to_ms || Date.now();
          $('range-from').value = localInput(r.from_ms || to - r.span_s * 1000);
          $('range-to').value = localInput(to);
        }
      }
    });
    $('range-custom').addEventListener('submit', (ev) => {
      ev.preventDefault();
      const from = new Date($('range-from').value).getTime();
      const to = new Date($('range-to').value).getTime();
      const err = $('range-error');
      if (!G.isNum(from) || !G.isNum(to) || from >= to) {
        err.hidden = false;
        err.textContent = 'from must be a time before to';
        return;
      }
      err.hidden = true;
      G.navigate(G.rangeHref({from_ms: from, to_ms: to}));
    });
    $('search').addEventListener('submit', (ev) => {
      ev.preventDefault();
      const q = $('search-q').value.trim();
      if (!q) return;
      // A job id (or an array task's, 41_7) opens the job; anything else
      // searches names and users in the history.
      if (/^\d+(_\d+)?$/.test(q)) G.navigate('/jobs/' + encodeURIComponent(q));
      else G.navigate('/history?q=' + encodeURIComponent(q));
    });
    for (const a of document.querySelectorAll('#nav a')) {
      a.addEventListener('click', (ev) => {
        if (ev.button !== 0 || ev.metaKey || ev.ctrlKey || ev.shiftKey || ev.altKey) return;
        ev.preventDefault();
        G.navigate(a.getAttribute('href'));
      });
    }
    window.addEventListener('popstate', route);
  }

  // -- Sign in and out. ----------------------------------------------------------------

  function showLogin(message) {
    $('dash').hidden = true;
    $('logout').hidden = true;
    $('who').hidden = true;
    $('status').hidden = true;
    $('updated').hidden = true;
    $('login').hidden = false;
    const e = $('login-error');
    e.hidden = !message;
    e.textContent = message || '';
    $('token').value = '';
    $('token').focus();
  }

  function signOut(message) {
    state.generation++;
    state.token = null;
    clearTimeout(state.timer);
    try {
      sessionStorage.removeItem(TOKEN_KEY);
    } catch (e) { /* storage disabled: nothing kept */ }
    for (const id of Object.keys(state.charts)) G.chartMessage(id, 'no data yet');
    for (const p of G.pages) if (p.signedOut) p.signedOut();
    showLogin(message);
  }

  async function signIn(token, fromStorage) {
    state.generation++;
    state.token = token;
    let me;
    try {
      me = await G.api('/v1/whoami');
    } catch (e) {
      state.token = null;
      if (e instanceof AuthError) {
        try {
          sessionStorage.removeItem(TOKEN_KEY);
        } catch (x) { /* nothing kept */ }
        showLogin(fromStorage ? 'Your session ended: the server no longer accepts this token (401). Sign in again.'
          : 'The server did not accept this token (401). Check it and try again.');
      } else {
        showLogin('Could not reach the server: ' + (e && e.message ? e.message : String(e)));
      }
      return;
    }
    try {
      sessionStorage.setItem(TOKEN_KEY, token);
    } catch (e) { /* storage disabled: the token lives until a reload */ }
    state.me = me;
    const who = $('who');
    who.replaceChildren(document.createTextNode(me.name || '?'));
    who.appendChild(el('span', 'role', me.role === 'admin' ? '(admin)' : me.team ? '(' + me.team + ')' : ''));
    who.hidden = false;
    $('logout').hidden = false;
    $('login').hidden = true;
    $('dash').hidden = false;
    await tick();
  }

  function init() {
    $('login-form').addEventListener('submit', (ev) => {
      ev.preventDefault();
      const token = $('token').value.trim();
      if (!token) {
        showLogin('Enter an API token.');
        return;
      }
      const btn = $('login-submit');
      btn.disabled = true;
      signIn(token, false).finally(() => {
        btn.disabled = false;
      });
    });
    $('logout').addEventListener('click', () => signOut(''));
    document.addEventListener('visibilitychange', () => {
      if (!document.hidden && state.token) tick();
    });
    if (typeof ResizeObserver === 'function') new ResizeObserver(G.resizeCharts).observe($('dash'));
    else window.addEventListener('resize', G.resizeCharts);
    initToolbar();
    route();

    let saved = null;
    try {
      saved = sessionStorage.getItem(TOKEN_KEY);
    } catch (e) { /* storage disabled */ }
    if (saved) signIn(saved, true);
    else showLogin('');
  }

  init();
})();
