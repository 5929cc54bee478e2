// Browser test of a chart at fleet size: over querytest.FleetFixture (200
// hosts, host-199 the heaviest), the CPU chart grouped per host shows the
// top 10 hosts and one grey "other" entry, not 200 legend entries, and says
// how many hosts it folded; completing a host value lists the hosts
// starting with what is typed, whatever their rank among the values.
//
//   node tests/fleet.spec.mjs <baseURL>

import { check, noApiError, open, waitAttr } from './harness.mjs';

const HOSTS = 200;
const TOP = 10;

const { baseURL, page, step, shot, finish } = await open();
const chart = '[data-testid="cpu-chart"]';

await finish(async () => {
  await step('load the CPU chart per host', async () => {
    await page.goto(baseURL + '/');
    await waitAttr(page, chart, 'data-series', (v) => Number(v) > 0, 'CPU chart drawn');
    await page.locator('[data-test-subj="groupBy"]').getByText('per host').click();
    await waitAttr(page, chart, 'data-total-series', (v) => Number(v) === HOSTS, 'per-host chart of the whole fleet');
    await noApiError(page);
    await shot('01-fleet.png');
  }, { fatal: true });

  await step(`the legend has the top ${TOP} hosts and one grey "other"`, async () => {
    const rows = await page.locator(`${chart} .u-legend .u-series`).evaluateAll((els) => els.map((e) => [
      e.querySelector('.u-label')?.textContent.trim(), getComputedStyle(e.querySelector('.u-marker')).borderColor,
    ]));
    // uPlot's first row is the x axis (time).
    const lines = rows.slice(1);
    check(lines.length === TOP + 1, `${lines.length} legend entries: ${JSON.stringify(lines.map((l) => l[0]))}`);
    const want = Array.from({ length: TOP }, (_, i) => `host-${String(HOSTS - 1 - i).padStart(3, '0')}`);
    check(JSON.stringify(lines.slice(0, TOP).map((l) => l[0])) === JSON.stringify(want),
      `top entries ${JSON.stringify(lines.map((l) => l[0]))}, want ${JSON.stringify(want)}`);
    const [label, color] = lines[TOP];
    check(label === `other (${HOSTS - TOP})`, `last entry ${label}, want other (${HOSTS - TOP})`);
    check(color === 'rgb(152, 162, 179)', `other drawn in ${color}, want the grey rgb(152, 162, 179)`);
  });

  await step('the chart says how many hosts are folded', async () => {
    const note = await page.locator('[data-testid="cpu-chart-folded"]').innerText();
    check(note === `top ${TOP} of ${HOSTS} hosts; ${HOSTS - TOP} summed as other`, `note ${JSON.stringify(note)}`);
  });

  await step('completion finds hosts past the first values by what is typed', async () => {
    // host-150 .. host-159 sort after the first 50 values: only a request
    // filtered by the prefix can list them.
    const input = page.locator('[data-test-subj="selectorInput"]');
    await input.click();
    await input.fill('{host="HOST-15');
    await page.waitForFunction(() => {
      const items = [...document.querySelectorAll('[data-testid="selector-suggestions"] li')].map((li) => li.textContent);
      return items.length === 10 && items.every((t) => /host-15\d$/.test(t.trim()));
    }, null, { timeout: 20_000 });
    await shot('02-host-completion.png');
  });
});
