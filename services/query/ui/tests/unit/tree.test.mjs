import { test } from 'node:test';
import assert from 'node:assert/strict';
import {
  layoutTree, layoutDiff, frameAt, ancestors, matcher, matchedShare, functionTotals, formatValue, formatPercent, foldedNote,
} from '../../.unit-build/flame/tree.js';

const fixture = {
  name: 'total', self: 0, total: 100, children: [
    { name: 'main.main', self: 0, total: 90, children: [
      { name: 'main.work', self: 50, total: 70, children: [{ name: 'runtime.memmove', self: 20, total: 20 }] },
      { name: 'main.idle', self: 20, total: 20 },
    ] },
    { name: 'runtime.gc', self: 10, total: 10, children: [] },
  ],
};

// A random tree whose totals add up, with repeated names so recursion and
// functions under several callers appear.
function randomTree(seed, maxDepth = 7, names = 12) {
  let s = seed;
  const rnd = () => ((s = (s * 1103515245 + 12345) % 2 ** 31) / 2 ** 31);
  const build = (depth) => {
    const n = { name: `f${Math.floor(rnd() * names)}`, self: Math.floor(rnd() * 10), total: 0, children: [] };
    if (depth < maxDepth) {
      const k = Math.floor(rnd() * 4);
      for (let i = 0; i < k; i++) n.children.push(build(depth + 1));
    }
    n.total = n.self + n.children.reduce((a, c) => a + c.total, 0);
    n.children.sort((a, b) => b.total - a.total);
    return n;
  };
  const root = build(0);
  root.name = 'total';
  return root;
}

test('layout places children inside their parent, in order', () => {
  for (let seed = 1; seed <= 50; seed++) {
    const l = layoutTree(randomTree(seed));
    assert.equal(l.frames[0].w, l.total > 0 ? 1 : 0);
    for (const f of l.frames.slice(1)) {
      const p = l.frames[f.parent];
      assert.equal(f.depth, p.depth + 1);
      assert.ok(f.x >= p.x - 1e-9 && f.x + f.w <= p.x + p.w + 1e-9, `seed ${seed}: ${f.name} outside its parent`);
    }
    for (const row of l.rows) {
      for (let i = 1; i < row.length; i++) {
        const a = l.frames[row[i - 1]];
        const b = l.frames[row[i]];
        assert.ok(a.x + a.w <= b.x + 1e-9, `seed ${seed}: overlapping frames in a row`);
      }
    }
  }
});

test('frameAt finds every frame of positive width at its middle', () => {
  for (let seed = 1; seed <= 50; seed++) {
    const l = layoutTree(randomTree(seed));
    l.frames.forEach((f, i) => {
      if (f.w <= 1e-12) return;
      assert.equal(frameAt(l, f.depth, f.x + f.w / 2), i, `seed ${seed}: frame ${i}`);
    });
    assert.equal(frameAt(l, l.maxDepth + 1, 0.5), -1);
    assert.equal(frameAt(l, 0, 1.5), -1);
  }
});

test('ancestors walk up to the root', () => {
  const l = layoutTree(fixture);
  const memmove = l.frames.findIndex((f) => f.name === 'runtime.memmove');
  assert.deepEqual(ancestors(l, memmove).map((i) => l.frames[i].name), ['main.work', 'main.main', 'total']);
});

test('matcher: substring, case-insensitive, and /regex/', () => {
  assert.equal(matcher(''), null);
  assert.ok(matcher('WORK')('main.work'));
  assert.ok(!matcher('work')('main.idle'));
  assert.ok(matcher('/^runtime\\./')('runtime.gc'));
  assert.ok(!matcher('/^runtime\\./')('main.runtime'));
  // An unfinished expression falls back to a substring instead of throwing.
  assert.ok(matcher('/[/')('a/[/b'));
});

test('matchedShare counts nested matches once', () => {
  const l = layoutTree(fixture);
  assert.equal(matchedShare(l, (n) => n.startsWith('main.')), 0.9);
  assert.ok(Math.abs(matchedShare(l, (n) => n === 'runtime.memmove' || n === 'runtime.gc') - 0.3) < 1e-12);
});

test('functionTotals sums self and counts recursive totals once', () => {
  const t = functionTotals(fixture);
  assert.deepEqual(t.get('main.work'), { self: 50, total: 70 });
  assert.deepEqual(t.get('main.main'), { self: 0, total: 90 });
  assert.equal(t.has('total'), false);
});

test('diff layout sizes frames by the mean share', () => {
  const l = layoutDiff({
    name: 'total', base: 1, compare: 1, children: [
      { name: 'old', base: 0.5, compare: 0 },
      { name: 'new', base: 0, compare: 0.5 },
      { name: 'same', base: 0.5, compare: 0.5 },
    ],
  });
  assert.ok(l.diff);
  assert.deepEqual(l.frames.slice(1).map((f) => [f.name, f.w]), [['old', 0.25], ['new', 0.25], ['same', 0.5]]);
  assert.equal(frameAt(l, 1, 0.3), 2);
});

test('formatting', () => {
  assert.equal(formatValue(1500, 'nanoseconds'), '1.50 µs');
  assert.equal(formatValue(2.5e9, 'nanoseconds'), '2.50 s');
  assert.equal(formatValue(1 << 30, 'bytes'), '1.00 GiB');
  assert.equal(formatValue(512, 'bytes'), '512 B');
  assert.equal(formatPercent(0.5), '50.0%');
  assert.equal(formatPercent(0.0123), '1.23%');
  assert.equal(formatPercent(0.00001), '<0.01%');
});

test('foldedNote counts the [other] nodes, empty when nothing is folded', () => {
  assert.equal(foldedNote(undefined), '');
  assert.equal(foldedNote(0), '');
  assert.equal(foldedNote(1), 'Lighter nodes are summed into 1 [other] node (exact values).');
  assert.equal(foldedNote(12345), 'Lighter nodes are summed into 12,345 [other] nodes (exact values).');
});
