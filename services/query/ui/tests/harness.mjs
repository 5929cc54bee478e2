// Shared pieces of the browser tests: the system chromium through
// playwright-core (never a downloaded browser), numbered steps with a
// screenshot on failure, and waits on the data-* attributes the UI exposes.

import { mkdirSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { chromium } from 'playwright-core';

export const STEP_TIMEOUT = 20_000;

export async function open() {
  const baseURL = (process.argv[2] || 'http://127.0.0.1:5173').replace(/\/$/, '');
  const artifacts = resolve(process.env.UI_ARTIFACTS || 'artifacts');
  mkdirSync(artifacts, { recursive: true });
  const profileDir = mkdtempSync(join(tmpdir(), 'stackstream-ui-chromium-'));
  const ctx = await chromium.launchPersistentContext(profileDir, {
    executablePath: process.env.CHROMIUM || '/usr/bin/chromium',
    headless: true,
    args: [
      '--no-sandbox', '--disable-gpu', '--disable-background-networking', '--disable-component-update',
      '--disable-sync', '--no-first-run',
    ],
    viewport: { width: 1440, height: 1000 },
  });
  ctx.setDefaultTimeout(STEP_TIMEOUT);
  const page = ctx.pages()[0] ?? (await ctx.newPage());
  const pageErrors = [];
  page.on('pageerror', (e) => pageErrors.push(e.message));
  page.on('console', (m) => {
    // Failed requests are the API errors the tests provoke on purpose; the
    // UI shows them itself.
    if (m.type() === 'error' && !/Failed to load resource/.test(m.text())) pageErrors.push(m.text());
  });

  let passed = 0;
  let failed = 0;
  const shot = (name) => page.screenshot({ path: join(artifacts, name), fullPage: true });

  async function step(name, fn, { fatal = false } = {}) {
    const t0 = Date.now();
    try {
      await fn();
      passed++;
      console.log(`ok   ${name} (${Date.now() - t0} ms)`);
    } catch (e) {
      failed++;
      console.log(`FAIL ${name}: ${e.message.split('\n')[0]}`);
      await shot(`FAILED-${name.replace(/\W+/g, '-')}.png`).catch(() => {});
      if (fatal) throw new Error(`stopping: ${name} failed`);
    }
  }

  async function finish(run) {
    try {
      await run();
    } catch (e) {
      console.log(e.message);
    }
    await step('no script errors on the page', async () => {
      check(pageErrors.length === 0, `page errors: ${pageErrors.slice(0, 3).join(' | ')}`);
    });
    await ctx.close();
    rmSync(profileDir, { recursive: true, force: true });
    console.log(`screenshots in ${artifacts}`);
    console.log(`${passed} passed, ${failed} failed`);
    process.exit(failed ? 1 : 0);
  }

  return { baseURL, page, step, shot, finish };
}

export function check(cond, msg) {
  if (!cond) throw new Error(msg);
}

// waitAttr waits until an attribute of the first match satisfies pred.
export async function waitAttr(page, selector, attr, pred, what) {
  const deadline = Date.now() + STEP_TIMEOUT;
  let last = null;
  while (Date.now() < deadline) {
    last = await page.locator(selector).first().getAttribute(attr, { timeout: 1000 }).catch(() => null);
    if (last !== null && pred(last)) return last;
    await page.waitForTimeout(100);
  }
  throw new Error(`${what}: ${selector} [${attr}] is ${JSON.stringify(last)}`);
}

export async function noApiError(page) {
  const err = page.locator('[data-test-subj="apiError"]');
  if (await err.count()) throw new Error(`the page shows an API error: ${await err.first().innerText()}`);
}
