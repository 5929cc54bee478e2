// Browser test of frame kinds: over querytest.KindsFixture (every root child
// of the flame graph is of one kind: native, python, kernel, java, jit, js,
// by falling total), the legend names each kind with its own color, the
// frames are drawn in their kind's color, and the tooltip names the kind.
//
//   node tests/kinds.spec.mjs <baseURL>

import { check, noApiError, open, waitAttr } from './harness.mjs';

// The fixture's root children, left to right, with their totals.
const ROOTS = [
  ['main', 'native', 400], ['<module>', 'python', 300], ['do_syscall_64', 'kernel', 150],
  ['com.example.Main.main', 'java', 100], ['LazyCompile:*loop', 'jit', 60], ['(anonymous)', 'js', 50],
];
const TOTAL = ROOTS.reduce((s, r) => s + r[2], 0);

// hue of a CSS rgb() color or of [r, g, b], in degrees.
function hue(c) {
  const [r, g, b] = (Array.isArray(c) ? c : c.match(/\d+(\.\d+)?/g).slice(0, 3).map(Number)).map((v) => v / 255);
  const max = Math.max(r, g, b);
  const d = max - Math.min(r, g, b);
  if (d === 0) return 0;
  let h = max === r ? ((g - b) / d) % 6 : max === g ? (b - r) / d + 2 : (r - g) / d + 4;
  h *= 60;
  return h < 0 ? h + 360 : h;
}
const hueDistance = (a, b) => Math.min(Math.abs(a - b), 360 - Math.abs(a - b));

const { baseURL, page, step, shot, finish } = await open();
const canvas = '[data-testid="flamegraph"]';
const swatches = {};

// The center of the right end of a root child in the canvas, in page and
// canvas pixels: labels are drawn from the left, so the right end is fill.
async function rootChildPoint(i) {
  const box = await page.locator(canvas).boundingBox();
  const rowH = Number(await page.locator(canvas).getAttribute('data-row-height'));
  const rows = Number(await page.locator(canvas).getAttribute('data-rows'));
  const icicle = (await page.locator(canvas).getAttribute('data-icicle')) === 'true';
  const before = ROOTS.slice(0, i).reduce((s, r) => s + r[2], 0);
  const x = ((before + ROOTS[i][2]) / TOTAL) * box.width - 4;
  const y = (icicle ? 1 : rows - 2) * rowH + rowH / 2;
  return { px: box.x + x, py: box.y + y, x, y };
}

await finish(async () => {
  await step('load the flame graph of mixed kinds', async () => {
    await page.goto(baseURL + '/');
    await waitAttr(page, canvas, 'data-kinds', (v) => v.split(',').length === 6, 'kinds drawn');
    await noApiError(page);
    await shot('01-kinds.png');
  }, { fatal: true });

  await step('the legend names every kind with its own color', async () => {
    const items = page.locator('[data-test-subj="flamegraph-legend"] [data-kind]');
    const kinds = await items.evaluateAll((els) => els.map((e) => [
      e.dataset.kind, e.textContent.trim(), getComputedStyle(e.querySelector('.ss-legend-swatch')).backgroundColor,
    ]));
    check(JSON.stringify(kinds.map((k) => k[0])) === JSON.stringify(['native', 'kernel', 'python', 'java', 'js', 'jit']),
      `legend kinds ${JSON.stringify(kinds)}`);
    check(JSON.stringify(kinds.map((k) => k[1])) === JSON.stringify(['Native', 'Kernel', 'Python', 'Java', 'JS', 'JIT']),
      `legend labels ${JSON.stringify(kinds)}`);
    for (const [k, , color] of kinds) swatches[k] = hue(color);
    const hues = Object.entries(swatches);
    for (let i = 0; i < hues.length; i++) {
      for (let j = i + 1; j < hues.length; j++) {
        check(hueDistance(hues[i][1], hues[j][1]) >= 20, `legend colors of ${hues[i][0]} and ${hues[j][0]} too close: ${JSON.stringify(swatches)}`);
      }
    }
  });

  await step('each kind is drawn in its legend color', async () => {
    await page.mouse.move(0, 0); // no hover outline
    const drawn = {};
    for (let i = 0; i < ROOTS.length; i++) {
      const { x, y } = await rootChildPoint(i);
      const rgb = await page.locator(canvas).evaluate((c, [x, y]) => {
        const dpr = c.width / c.clientWidth;
        return Array.from(c.getContext('2d').getImageData(Math.round(x * dpr), Math.round(y * dpr), 1, 1).data.slice(0, 3));
      }, [x, y]);
      const [name, kind] = ROOTS[i];
      drawn[kind] = hue(rgb);
      check(hueDistance(drawn[kind], swatches[kind]) <= 20,
        `${name} (${kind}) drawn with hue ${drawn[kind].toFixed(0)} (rgb ${rgb}), legend ${swatches[kind].toFixed(0)}`);
    }
    const kinds = Object.keys(drawn);
    for (let i = 0; i < kinds.length; i++) {
      for (let j = i + 1; j < kinds.length; j++) {
        check(hueDistance(drawn[kinds[i]], drawn[kinds[j]]) >= 15, `${kinds[i]} and ${kinds[j]} drawn alike: ${JSON.stringify(drawn)}`);
      }
    }
  });

  await step('the tooltip names the kind of the frame', async () => {
    for (let i = 0; i < ROOTS.length; i++) {
      const { px, py } = await rootChildPoint(i);
      await page.mouse.move(px, py);
      const tip = page.locator('[data-testid="flamegraph-tooltip"]');
      await tip.waitFor();
      const name = await tip.locator('.ss-tooltip-name').innerText();
      const kind = await tip.locator('.ss-tooltip-kind').getAttribute('data-kind');
      check(name === ROOTS[i][0] && kind === ROOTS[i][1], `tooltip says ${name} (${kind}), want ${ROOTS[i][0]} (${ROOTS[i][1]})`);
      if (i === 1) await shot('02-kind-tooltip.png');
    }
  });
});
