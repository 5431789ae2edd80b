/*
 * node.js - placeholder for the node page (being written).
 */
'use strict';

(function () {
  const G = window.GPO;
  G.register({
    name: 'node',
    title: 'node',
    range: false,
    match: (p) => null,
    mount() {},
    refresh: async () => [],
    unmount() {},
  });
})();
