/*
 * job.js - placeholder for the job page (being written).
 */
'use strict';

(function () {
  const G = window.GPO;
  G.register({
    name: 'job',
    title: 'job',
    range: false,
    match: (p) => null,
    mount() {},
    refresh: async () => [],
    unmount() {},
  });
})();
