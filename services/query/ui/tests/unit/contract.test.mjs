// The API's example answers (schemas/api/*.json, which the API's own tests
// decode into its response types) read by the UI's pure modules: if either
// side changes a shape, this fails.

import { test } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { layoutTree, layoutDiff, frameAt } from '../../.unit-build/flame/tree.js';
import { mergePoints, seriesName } from '../../.unit-build/series.js';

const example = (name) => JSON.parse(readFileSync(new URL(`../../../../../schemas/api/${name}.json`, import.meta.url)));

test('flamegraph example lays out', () => {
  const fg = example('flamegraph');
  assert.equal(typeof fg.unit, 'string');
  assert.equal(typeof fg.truncated, 'boolean');
  const l = layoutTree(fg.root);
  assert.equal(l.frames[0].name, 'total');
  assert.equal(l.total, fg.root.total);
  assert.ok(l.frames.length > 2);
  const leaf = l.frames[l.frames.length - 1];
  assert.equal(frameAt(l, leaf.depth, leaf.x + leaf.w / 2), l.frames.length - 1);
  // kind is absent for native code and named for the others.
  assert.equal(l.frames.find((f) => f.name === 'main.work').kind, 'native');
  assert.equal(l.frames.find((f) => f.name === 'do_syscall_64').kind, 'kernel');
  assert.deepEqual(l.kinds, ['native', 'kernel']);
});

test('diff example lays out', () => {
  const d = example('diff');
  assert.equal(typeof d.base_total, 'number');
  assert.equal(typeof d.compare_total, 'number');
  const l = layoutDiff(d.root);
  for (const f of l.frames) {
    assert.equal(typeof f.base, 'number');
    assert.equal(typeof f.compare, 'number');
  }
});

test('series example merges into columns', () => {
  const s = example('series');
  assert.ok(['cores', 'bytes'].includes(s.unit));
  const data = mergePoints(s);
  assert.equal(data.length, s.series.length + 1);
  assert.deepEqual(data[0], [...new Set(s.series.flatMap((x) => x.points.map((p) => p[0])))].sort((a, b) => a - b).map((t) => t / 1000));
  assert.equal(seriesName(s.series[0].labels), Object.values(s.series[0].labels).join(', '));
});

test('series with different timestamps leave gaps', () => {
  const data = mergePoints({ series: [{ labels: { host: 'a' }, points: [[1000, 1], [3000, 3]] }, { labels: {}, points: [[2000, 2]] }] });
  assert.deepEqual(data, [[1, 2, 3], [1, null, 3], [null, 2, null]]);
  assert.equal(seriesName({}), 'all');
});

test('top, search, labels, config and error examples have the fields the UI reads', () => {
  const top = example('top');
  for (const k of ['name', 'self', 'total', 'self_share', 'total_share']) assert.ok(k in top.functions[0], `top: ${k}`);
  const search = example('search');
  const kinds = new Set(search.results.map((r) => r.kind));
  for (const k of ['function', 'service', 'host', 'label']) assert.ok(kinds.has(k), `search kind ${k}`);
  assert.ok(search.results.find((r) => r.kind === 'label').label);
  assert.ok(Array.isArray(example('labels').labels));
  assert.ok(Array.isArray(example('label_values').values));
  assert.equal(typeof example('config').auth, 'boolean');
  const err = example('error');
  assert.equal(typeof err.error, 'string');
  assert.equal(typeof err.parameter, 'string');
});
