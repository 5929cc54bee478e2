// Browser test of the UI against a server that requires a Bearer token:
// the page explains what is missing, offers a token field, and loads once
// the token is typed.
//
//   UI_TOKEN=... node tests/auth.spec.mjs <baseURL>

import { check, noApiError, open, waitAttr } from './harness.mjs';

const token = process.env.UI_TOKEN;
if (!token) {
  console.log('UI_TOKEN is not set: it must be the token the server at the base URL requires');
  process.exit(2);
}

const { baseURL, page, step, shot, finish } = await open();

await finish(async () => {
  await step('without a token the page says authentication is required', async () => {
    await page.goto(baseURL + '/');
    const err = page.locator('[data-test-subj="apiError"]').first();
    await err.waitFor();
    const text = await err.innerText();
    check(/authentication required/i.test(text) && /token/i.test(text), `error callout says ${JSON.stringify(text)}`);
    await page.locator('[data-test-subj="apiToken"]').first().waitFor();
    await shot('01-auth-required.png');
  }, { fatal: true });

  await step('with the token the charts and the flame graph load', async () => {
    await page.locator('[data-test-subj="apiToken"] input, input[data-test-subj="apiToken"]').first().fill(token);
    await waitAttr(page, '[data-testid="cpu-chart"]', 'data-series', (v) => Number(v) > 0, 'cpu series');
    await waitAttr(page, '[data-testid="flamegraph"]', 'data-frames', (v) => Number(v) > 2, 'flame frames');
    await noApiError(page);
    await shot('02-auth-loaded.png');
  });

  await step('the token survives a reload', async () => {
    await page.reload();
    await waitAttr(page, '[data-testid="flamegraph"]', 'data-frames', (v) => Number(v) > 2, 'flame frames after reload');
    await noApiError(page);
  });
});
