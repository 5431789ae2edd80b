#!/usr/bin/env node
// dashboard_load.mjs URL TOKEN LOADS [PATH ...] - run by bench/dashboard_load.sh:
// loads each page PATH of the dashboard at URL (default "/": the overview;
// "/jobs/1": a job's page) LOADS times, each in a fresh browser context (cold:
// no cache) with TOKEN already in sessionStorage, and prints the time from
// navigation start to the page's "gpuorch-loaded" performance mark (set once
// the first answers of every API the page reads are painted), then the median.
import path from 'node:path';
import {createRequire} from 'node:module';
import {fileURLToPath} from 'node:url';

const [url, token, loadsArg, ...pathsArg] = process.argv.slice(2);
const loads = Math.max(1, Number(loadsArg) || 5);
const paths = pathsArg.length ? pathsArg : ['/'];
const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');
const {chromium} = createRequire(path.join(root, 'package.json'))('playwright-core');

const browser = await chromium.launch({executablePath: process.env.CHROMIUM || '/usr/bin/chromium',
  headless: true, args: ['--no-sandbox', '--disable-gpu', '--disable-dev-shm-usage']});
const results = [];
try {
  for (const p of paths) {
    const times = [];
    for (let i = 0; i < loads; i++) {
      const ctx = await browser.newContext({viewport: {width: 1680, height: 1050}});
      await ctx.addInitScript((t) => sessionStorage.setItem('gpuorch.token', t), token);
      const page = await ctx.newPage();
      await page.goto(url + p);
      await page.waitForFunction(() => document.documentElement.dataset.loaded === '1', null,
        {timeout: 30000});
      const t = await page.evaluate(() => {
        const m = performance.getEntriesByName('gpuorch-loaded')[0];
        const nav = performance.getEntriesByType('navigation')[0];
        return {loaded: m.startTime, dcl: nav.domContentLoadedEventEnd, bytes: nav.transferSize,
          page: document.documentElement.dataset.page};
      });
      console.log(`${p} load ${i + 1}: ${t.loaded.toFixed(0)} ms to data painted ` +
        `(page ${t.page}, DOMContentLoaded ${t.dcl.toFixed(0)} ms, ${t.bytes} bytes)`);
      times.push(t.loaded);
      await ctx.close();
    }
    times.sort((a, b) => a - b);
    results.push([p, times[Math.floor((times.length - 1) / 2)], times.length]);
  }
} finally {
  await browser.close();
}
for (const [p, p50, n] of results) {
  console.log(`dashboard ${p === '/' ? 'first load' : p} p50: ${p50.toFixed(0)} ms over ${n} loads ` +
    `(goal < 1000 ms)`);
}
