// Browser test of the empty states: a server over indices with no documents
// shows "no data" panels, not errors or blank space.
//
//   node tests/empty.spec.mjs <baseURL>

import { noApiError, open } from './harness.mjs';

const { baseURL, page, step, shot, finish } = await open();

await finish(async () => {
  await step('charts, flame graph and top table say there is no data', async () => {
    await page.goto(baseURL + '/');
    for (const id of ['cpuChart-empty', 'memChart-empty', 'flame-empty', 'top-empty']) {
      await page.locator(`[data-test-subj="${id}"]`).waitFor();
    }
    await noApiError(page);
    await shot('01-empty.png');
  });

  await step('a search with no match says so', async () => {
    await page.locator('[data-test-subj="tab-search"]').click();
    const box = page.locator('[data-test-subj="keywordSearch"]');
    await box.fill('nothing-here');
    await box.press('Enter');
    await page.locator('[data-test-subj="search-empty"]').waitFor();
    await noApiError(page);
    await shot('02-search-empty.png');
  });
});
