// Browser test of the stackstream UI: playwright-core driving the system's
// chromium (never a downloaded browser).
//
//   node tests/ui.spec.mjs <baseURL>
//
// Environment:
//   CHROMIUM       browser binary (default /usr/bin/chromium)
//   UI_ARTIFACTS   directory for screenshots (default ./artifacts)
//   UI_EXPECT      JSON with the fixture's names: {"hot":"main.work","keyword":"work","service":"checkout",
//                  "base":"{service=\"web\"}","compare":"{service=\"checkout\"}"}
// Exits non-zero when a step fails; prints one line per step and a summary.

import { check, noApiError, open, waitAttr, STEP_TIMEOUT } from './harness.mjs';

const expect = {
  hot: 'main.work',
  keyword: 'work',
  service: 'checkout',
  base: '{service="web"}',
  compare: '{service="checkout"}',
  ...JSON.parse(process.env.UI_EXPECT || '{}'),
};

const { baseURL, page, step, shot, finish } = await open();

await finish(async () => {
  await step('load the UI and see the charts', async () => {
    await page.goto(baseURL + '/');
    await page.locator('[data-testid="cpu-chart"] canvas').first().waitFor();
    await page.locator('[data-testid="memory-chart"] canvas').first().waitFor();
    const n = await waitAttr(page, '[data-testid="cpu-chart"]', 'data-series', (v) => Number(v) > 0, 'cpu series');
    check(Number(n) > 0, 'no cpu series');
    await noApiError(page);
    await shot('01-loaded.png');
  }, { fatal: true });

  await step('see the flame graph and the hottest function first in the top table', async () => {
    await waitAttr(page, '[data-testid="flamegraph"]', 'data-frames', (v) => Number(v) > 2, 'flame frames');
    const firstRow = page.locator('[data-test-subj="topTable"] tbody tr').first();
    await firstRow.waitFor();
    const text = await firstRow.innerText();
    check(text.includes(expect.hot), `top table's first row is ${JSON.stringify(text)}, want ${expect.hot}`);
  });

  await step('drag across the chart to zoom the time range', async () => {
    const over = page.locator('[data-testid="cpu-chart"] .u-over').first();
    const box = await over.boundingBox();
    check(box, 'no chart plot area');
    await page.mouse.move(box.x + box.width * 0.5, box.y + box.height / 2);
    await page.mouse.down();
    await page.mouse.move(box.x + box.width * 0.75, box.y + box.height / 2, { steps: 8 });
    await page.mouse.move(box.x + box.width * 0.99, box.y + box.height / 2, { steps: 8 });
    await page.mouse.up();
    await page.waitForFunction(() => /from=\d{4}-/.test(decodeURIComponent(location.search)), null, { timeout: STEP_TIMEOUT });
    await page.locator('[data-testid="cpu-chart"] canvas').first().waitFor();
    await noApiError(page);
    await shot('02-zoomed.png');
  });

  await step('pick a preset time range', async () => {
    await page.locator('[data-test-subj="superDatePickerToggleQuickMenuButton"]').first().click();
    await page.locator('[data-test-subj="superDatePickerCommonlyUsed_Last_6 hours"]').click();
    await page.waitForFunction(() => new URLSearchParams(location.search).get('from') === 'now-6h', null, { timeout: STEP_TIMEOUT });
    await waitAttr(page, '[data-testid="cpu-chart"]', 'data-series', (v) => Number(v) > 0, 'cpu series after preset');
    await noApiError(page);
    await shot('03-range.png');
  });

  await step('hover and click a flame graph frame to zoom', async () => {
    const canvas = page.locator('[data-testid="flamegraph"]');
    const row = Number(await canvas.getAttribute('data-row-height'));
    const box = await canvas.boundingBox();
    // Depth 2 (root is 0) at the left edge: the heaviest path's second frame.
    await page.mouse.move(box.x + 4, box.y + row * 2.5);
    const tip = page.locator('[data-testid="flamegraph-tooltip"]');
    await tip.waitFor();
    const tipText = await tip.innerText();
    check(/Self/.test(tipText) && /Total/.test(tipText) && /%/.test(tipText), `tooltip shows ${JSON.stringify(tipText)}`);
    const name = tipText.split('\n')[0].trim();
    await page.mouse.click(box.x + 4, box.y + row * 2.5);
    await waitAttr(page, '[data-testid="flamegraph"]', 'data-focus', (v) => v === name, `zoom on ${name}`);
    await shot('04-flame-zoomed.png');
    await page.locator('[data-test-subj="flamegraph-reset"]').click();
    await waitAttr(page, '[data-testid="flamegraph"]', 'data-focus', (v) => v === 'total', 'zoom reset');
  });

  await step('flip the flame graph between icicle and flame', async () => {
    const canvas = page.locator('[data-testid="flamegraph"]');
    await page.locator('[data-test-subj="icicleToggle"]').click();
    await waitAttr(page, '[data-testid="flamegraph"]', 'data-icicle', (v) => v === 'false', 'flame orientation');
    // Root at the bottom now: the last row is the root frame.
    const box = await canvas.boundingBox();
    const row = Number(await canvas.getAttribute('data-row-height'));
    await page.mouse.move(box.x + box.width / 2, box.y + box.height - row / 2);
    const tip = page.locator('[data-testid="flamegraph-tooltip"]');
    await tip.waitFor();
    check((await tip.innerText()).startsWith('total'), 'the bottom row is not the root');
    await shot('05a-flame-orientation.png');
    await page.locator('[data-test-subj="icicleToggle"]').click();
    await waitAttr(page, '[data-testid="flamegraph"]', 'data-icicle', (v) => v === 'true', 'icicle orientation');
  });

  await step('highlight a function in the flame graph', async () => {
    await page.locator('[data-test-subj="flameSearch"]').fill(expect.hot);
    await waitAttr(page, '[data-testid="flamegraph"]', 'data-matches', (v) => Number(v) > 0, 'matching frames');
    await shot('05-flame-search.png');
    await page.locator('[data-test-subj="flameSearch"]').fill('');
  });

  await step('open the sandwich view from the top table', async () => {
    await page.locator('[data-test-subj="topFunction"]', { hasText: expect.hot }).first().click();
    await page.locator('[data-test-subj="sandwich"]').waitFor();
    await waitAttr(page, '[data-testid="sandwich-callers"]', 'data-frames', (v) => Number(v) > 1, 'callers');
    await waitAttr(page, '[data-testid="sandwich-callees"]', 'data-frames', (v) => Number(v) >= 1, 'callees');
    await page.locator('[data-test-subj="sandwich"]').scrollIntoViewIfNeeded();
    await shot('06-sandwich.png');
    await page.locator('[data-test-subj="closeSandwich"]').click();
  });

  await step('search a function and see its trend', async () => {
    await page.locator('[data-test-subj="tab-search"]').click();
    const box = page.locator('[data-test-subj="keywordSearch"]');
    await box.fill(expect.keyword);
    await box.press('Enter');
    const hit = page.locator('[data-test-subj="searchResult-function"]', { hasText: expect.hot }).first();
    await hit.waitFor();
    // The trend is one /series?function= request, not /top per sub-range.
    const asked = [];
    const record = (req) => {
      const u = new URL(req.url());
      if (u.pathname.startsWith('/api/v1/')) asked.push(u);
    };
    page.on('request', record);
    await hit.click();
    await page.locator('[data-testid="trend-chart"] canvas').first().waitFor();
    page.off('request', record);
    const trend = asked.filter((u) => u.pathname === '/api/v1/series');
    check(trend.length === 1 && trend[0].searchParams.get('function') === expect.hot,
      `trend requests: ${trend.map((u) => u.search).join(' ') || 'none'}, want one /series?function=${expect.hot}`);
    check(!asked.some((u) => u.pathname === '/api/v1/top'), `the trend asked /top: ${asked.map((u) => u.pathname).join(' ')}`);
    await waitAttr(page, '[data-testid="search-flamegraph"]', 'data-focus', (v) => v === expect.hot, 'search focus');
    await noApiError(page);
    await shot('07-search.png');
  });

  await step('pick a service in the search results to select it', async () => {
    const box = page.locator('[data-test-subj="keywordSearch"]');
    await box.fill(expect.service);
    await box.press('Enter');
    const hit = page.locator('[data-test-subj="searchResult-service"]', { hasText: expect.service }).first();
    await hit.waitFor();
    await hit.click();
    await page.waitForFunction((want) => new URLSearchParams(location.search).get('query') === want,
      `{service="${expect.service}"}`, { timeout: STEP_TIMEOUT });
    check((await page.locator('[data-test-subj="selectorInput"]').inputValue()) === `{service="${expect.service}"}`, 'selector not set');
    await waitAttr(page, '[data-testid="flamegraph"]', 'data-frames', (v) => Number(v) > 2, 'flame of the service');
    await noApiError(page);
    await shot('07a-search-service.png');
    await page.locator('[data-test-subj="selectorInput"]').fill('');
    await page.locator('[data-test-subj="selectorInput"]').press('Enter');
  });

  await step('open the diff of two ranges', async () => {
    await page.locator('[data-test-subj="tab-diff"]').click();
    await page.locator('[data-test-subj="runDiff"]').click();
    await waitAttr(page, '[data-testid="diff-flamegraph"]', 'data-frames', (v) => Number(v) > 2, 'diff frames');
    await noApiError(page);
    await shot('08-diff-ranges.png');
  });

  await step('open the diff of two selections', async () => {
    await page.locator('[data-test-subj="diffMode"]').getByText('Two selections').click();
    await page.locator('[data-test-subj="diffBaseSelector"]').fill(expect.base);
    await page.locator('[data-test-subj="diffCompareSelector"]').fill(expect.compare);
    await page.locator('[data-test-subj="runDiff"]').click();
    await waitAttr(page, '[data-testid="diff-flamegraph"]', 'data-frames', (v) => Number(v) > 2, 'diff frames');
    await noApiError(page);
    const canvas = page.locator('[data-testid="diff-flamegraph"]');
    const box = await canvas.boundingBox();
    await page.mouse.move(box.x + 4, box.y + 18 * 1.5);
    await page.locator('[data-testid="diff-flamegraph-tooltip"]').waitFor();
    await shot('09-diff-selections.png');
  });

  await step('show an API error as a readable message', async () => {
    await page.locator('[data-test-subj="tab-profile"]').click();
    const sel = page.locator('[data-test-subj="selectorInput"]');
    await sel.fill('{service="checkout"');
    await sel.press('Enter');
    const err = page.locator('[data-test-subj="apiError"]').first();
    await err.waitFor();
    const text = await err.innerText();
    check(/query/i.test(text), `error callout says ${JSON.stringify(text)}`);
    // Shown once under the selector; the panels point at it.
    check((await page.locator('[data-test-subj="apiError"]').count()) === 1, 'the selector error is shown more than once');
    await page.locator('[data-test-subj="flame-selectorError"]').waitFor();
    await shot('10-error.png');
  });

  await step('complete label names and values in the selector', async () => {
    const sel = page.locator('[data-test-subj="selectorInput"]');
    await sel.fill('');
    await sel.type('{serv');
    const sugg = page.locator('[data-testid="selector-suggestions"] li', { hasText: 'service' }).first();
    await sugg.waitFor();
    await sel.press('Tab');
    await page.locator('[data-testid="selector-suggestions"] li').first().waitFor();
    await sel.press('Tab');
    const v = await sel.inputValue();
    check(/^\{service="[^"]+"\}$/.test(v), `selector after completion is ${JSON.stringify(v)}`);
    await sel.press('Enter');
    await waitAttr(page, '[data-testid="flamegraph"]', 'data-frames', (x) => Number(x) > 1, 'flame after selector');
    await noApiError(page);
    await shot('11-selector.png');
  });

  await step('pick the Off-CPU type: its chart in place of memory, and the wall-clock chart', async () => {
    await page.locator('[data-test-subj="profileType"]').selectOption('offcpu');
    await page.waitForFunction(() => new URLSearchParams(location.search).get('type') === 'offcpu', null, { timeout: STEP_TIMEOUT });
    // The fixture has CPU samples only: off-CPU is empty, wall clock is CPU.
    await page.locator('[data-test-subj="offcpuChart-empty"], [data-testid="offcpu-chart"]').first().waitFor();
    await waitAttr(page, '[data-testid="wall-chart"]', 'data-series', (v) => Number(v) > 0, 'wall series');
    check((await page.locator('[data-testid="memory-chart"]').count()) === 0, 'the memory chart is still shown for off-CPU');
    await noApiError(page);
    await shot('12-offcpu.png');
  });

  await step('fold the flame graph to a few nodes: grey [other] nodes and a note, then every node again', async () => {
    const flame = '[data-testid="flamegraph"]';
    const others = async (what, pred) => {
      await page.locator('[data-test-subj="flameSearch"]').fill('[other]');
      return waitAttr(page, flame, 'data-matches', pred, what);
    };
    await page.goto(baseURL + '/');
    await waitAttr(page, flame, 'data-frames', (v) => Number(v) > 4, 'full flame graph');
    await others('no [other] frame with every node shown', (v) => v === '0');
    check((await page.locator('[data-test-subj="flameFolded"]').count()) === 0, 'a folded note with every node shown');
    await page.goto(baseURL + '/?nodes=2');
    await others('[other] frames at 2 nodes', (v) => Number(v) > 0);
    check((await page.locator('[data-test-subj="maxNodes"]').inputValue()) === '2', 'the nodes choice is not the URL\'s 2');
    const note = await page.locator('[data-test-subj="flameFolded"]').innerText();
    check(/summed into \d+ \[other\] nodes? \(exact values\)\. Grey/.test(note), `folded note ${JSON.stringify(note)}`);
    await shot('13-folded.png');
    await page.locator('[data-test-subj="maxNodes"]').selectOption('');
    await others('no [other] frame again', (v) => v === '0');
    check(!new URLSearchParams(new URL(page.url()).search).has('nodes'), `URL still has nodes: ${page.url()}`);
    check((await page.locator('[data-test-subj="flameFolded"]').count()) === 0, 'the folded note stays with every node shown');
    await noApiError(page);
  });
});
