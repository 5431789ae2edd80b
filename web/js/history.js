/*
 * history.js - placeholder for the history page (being written).
 */
'use strict';

(function () {
  const G = window.GPO;
  G.register({
    name: 'history',
    title: 'history',
    range: false,
    match: (p) => null,
    mount() {},
    refresh: async () => [],
    unmount() {},
  });
})();
