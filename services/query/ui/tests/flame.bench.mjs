// Drawing benchmark of the canvas flame graph: serves the built UI (dist/)
// with a synthetic API whose flame graph has N nodes, and measures in the
// system chromium the first draw and the redraws on hover and zoom, as the
// UI itself reports them (canvas data-draw-ms). Prints a table.
//
//   node tests/flame.bench.mjs [nodes,...]     (default 1000,5000,20000,50000)
//
// Hover and zoom numbers are the canvas redraws only (layout happens once per
// response); a hover that stays on the same frame does not redraw.

import { createServer } from 'node:http';
import { readFile } from 'node:fs/promises';
import { extname, join, normalize } from 'node:path';
import { fileURLToPath } from 'node:url';
import { open } from './harness.mjs';

const dist = fileURLToPath(new URL('../dist/', import.meta.url));
const sizes = (process.argv[2] || '1000,5000,20000,50000').split(',').map(Number);

// synthetic builds a tree of n nodes: a few deep call chains and wide fan-outs,
// names as long as real Go symbols.
function synthetic(n) {
  let seed = 42;
  const rnd = () => ((seed = (seed * 1103515245 + 12345) % 2 ** 31) / 2 ** 31);
  const name = () => `github.com/acme/shop/internal/pkg${Math.floor(rnd() * 40)}.(*Handler).Method${Math.floor(rnd() * 500)}`;
  const root = { name: 'total', self: 0, total: 0, children: [] };
  const all = [{ node: root, depth: 0 }];
  for (let i = 1; i < n; i++) {
    // Prefer recent nodes so chains get deep (up to 60 frames).
    const pick = all[Math.max(0, all.length - 1 - Math.floor(rnd() ** 3 * all.length))];
    const parent = pick.depth >= 60 ? all[Math.floor(rnd() * all.length)] : pick;
    const node = { name: name(), self: Math.floor(rnd() * 1e6), total: 0, children: [] };
    parent.node.children.push(node);
    all.push({ node, depth: parent.depth + 1 });
  }
  const sum = (x) => {
    x.total = x.self + x.children.reduce((a, c) => a + sum(c), 0);
    x.children.sort((a, b) => b.total - a.total);
    return x.total;
  };
  sum(root);
  return root;
}

let current = synthetic(10);
const types = { '.html': 'text/html', '.js': 'text/javascript', '.css': 'text/css' };
const server = createServer(async (req, res) => {
  const url = new URL(req.url, 'http://x');
  const json = (v) => { res.setHeader('Content-Type', 'application/json'); res.end(JSON.stringify(v)); };
  switch (url.pathname) {
    case '/api/v1/flamegraph': return json({ type: 'cpu', unit: 'nanoseconds', total: current.total, truncated: false, root: current });
    case '/api/v1/series': return json({ type: 'cpu', unit: 'cores', step_seconds: 60, series: [] });
    case '/api/v1/top': return json({ type: 'cpu', unit: 'nanoseconds', total: current.total, functions: [] });
    case '/api/v1/labels': return json({ labels: [] });
    case '/api/v1/config': return json({ auth: false, version: 'bench' });
  }
  const file = normalize(url.pathname === '/' ? 'index.html' : url.pathname.slice(1));
  try {
    const body = await readFile(join(dist, file));
    res.setHeader('Content-Type', types[extname(file)] ?? 'application/octet-stream');
    res.end(body);
  } catch {
    res.statusCode = 404;
    res.end();
  }
});
await new Promise((r) => server.listen(0, '127.0.0.1', r));
process.argv[2] = `http://127.0.0.1:${server.address().port}`;

const { baseURL, page, step, finish } = await open();
const rows = [];
const pct = (xs, p) => xs.slice().sort((a, b) => a - b)[Math.min(xs.length - 1, Math.floor(p * xs.length))];
const drawMs = () => page.locator('[data-testid="flamegraph"]').getAttribute('data-draw-ms').then(Number);

await finish(async () => {
  for (const n of sizes) {
    await step(`flame graph of ${n} nodes`, async () => {
      current = synthetic(n);
      const t0 = Date.now();
      await page.goto(baseURL + '/');
      await page.waitForFunction((want) => document.querySelector('[data-testid="flamegraph"]')?.getAttribute('data-frames') === String(want), n, { timeout: 60_000 });
      const firstLoad = Date.now() - t0;
      const first = await drawMs();
      const canvas = page.locator('[data-testid="flamegraph"]');
      const box = await canvas.boundingBox();
      const hovers = [];
      for (let i = 0; i < 60; i++) {
        await page.mouse.move(box.x + ((i * 37) % 100) / 100 * box.width, box.y + 18 * (1 + (i % 8)) + 9);
        hovers.push(await drawMs());
      }
      const zooms = [];
      for (let i = 0; i < 10; i++) {
        await page.mouse.click(box.x + 5, box.y + 18 * 1.5);
        zooms.push(await drawMs());
        await page.mouse.click(box.x + 5, box.y + 18 * 0.5);
        zooms.push(await drawMs());
      }
      const drawn = await canvas.getAttribute('data-drawn');
      rows.push({ n, firstLoad, first, drawn, hp50: pct(hovers, 0.5), hp99: pct(hovers, 0.99), zp50: pct(zooms, 0.5), zmax: Math.max(...zooms) });
    });
  }
  console.log('\nnodes   load+layout+draw(ms)  first draw(ms)  frames drawn  hover redraw p50/p99(ms)  zoom redraw p50/max(ms)');
  for (const r of rows) {
    console.log(`${String(r.n).padEnd(8)}${String(r.firstLoad).padEnd(22)}${r.first.toFixed(2).padEnd(16)}${String(r.drawn).padEnd(14)}${(r.hp50.toFixed(2) + ' / ' + r.hp99.toFixed(2)).padEnd(26)}${r.zp50.toFixed(2)} / ${r.zmax.toFixed(2)}`);
  }
  server.close();
});
