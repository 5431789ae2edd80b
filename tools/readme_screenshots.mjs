#!/usr/bin/env node
// readme_screenshots.mjs URL TOKEN OUT_DIR JOB - run by tools/readme_screenshots.sh:
// saves the dashboard at URL (signed in with TOKEN) as OUT_DIR/dashboard.png
// (the overview, last 15 minutes), job.png (job JOB's page), node.png (the
// page of node gpu-a) and history.png, each at 1,280 px wide, once its data is
// painted and its charts have values.
import path from 'node:path';
import {createRequire} from 'node:module';
import {fileURLToPath} from 'node:url';

const [url, token, out, job] = process.argv.slice(2);
const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');
const {chromium} = createRequire(path.join(root, 'package.json'))('playwright-core');

const browser = await chromium.launch({executablePath: process.env.CHROMIUM || '/usr/bin/chromium',
  headless: true, args: ['--no-sandbox', '--disable-gpu', '--disable-dev-shm-usage']});
try {
  const ctx = await browser.newContext({viewport: {width: 1280, height: 900}});
  await ctx.addInitScript((t) => sessionStorage.setItem('gpuorch.token', t), token);
  const page = await ctx.newPage();
  for (const [p, file] of [['/', 'dashboard.png'], ['/jobs/' + job, 'job.png'],
    ['/nodes/gpu-a', 'node.png'], ['/history', 'history.png']]) {
    await page.goto(url + p);
    // Two refreshes in: every panel drawn, the charts with what they have.
    await page.waitForFunction(() => Number(document.documentElement.dataset.pagePolls || 0) >= 2, null,
      {timeout: 30000});
    await page.waitForTimeout(500); // the last chart's paint
    await page.screenshot({path: path.join(out, file), fullPage: true});
    console.log(`${p}: ${path.join(out, file)}`);
  }
} finally {
  await browser.close();
}
