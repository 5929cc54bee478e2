import { test } from 'node:test';
import assert from 'node:assert/strict';
import { frameColor, kindHues, kindOf, kindSwatch, KIND_ORDER } from '../../.unit-build/flame/kinds.js';
import { layoutTree } from '../../.unit-build/flame/tree.js';

const hueOf = (hsl) => Number(/^hsl\((\d+)/.exec(hsl)[1]);

test('every kind has its own hue range, native and kernel apart', () => {
  const names = ['main.work', 'runtime.memmove', 'do_syscall_64', 'Handler.serve', 'com.example.Cart.total', '(anonymous)', 'LazyCompile:*loop', 'x', 'pkg/a.B'];
  const ranges = KIND_ORDER.map((k) => [k, kindHues(k)]);
  for (const [k, [lo, hi]] of ranges) {
    for (const n of names) {
      for (const dim of [false, true]) {
        const h = hueOf(frameColor(k, n, dim));
        assert.ok(h >= lo && h <= hi, `${k} ${n}: hue ${h} outside ${lo}..${hi}`);
      }
    }
    const sw = hueOf(kindSwatch(k));
    assert.ok(sw >= lo && sw <= hi, `${k} swatch hue ${sw}`);
  }
  for (let i = 0; i < ranges.length; i++) {
    for (let j = i + 1; j < ranges.length; j++) {
      const [a, [alo, ahi]] = ranges[i];
      const [b, [blo, bhi]] = ranges[j];
      const gap = Math.max(blo - ahi, alo - bhi);
      assert.ok(gap >= 10, `${a} ${alo}..${ahi} and ${b} ${blo}..${bhi} are ${gap} degrees apart`);
    }
  }
});

test('kindOf: absent and unknown kinds are native', () => {
  assert.equal(kindOf(undefined), 'native');
  assert.equal(kindOf(''), 'native');
  assert.equal(kindOf('wasm'), 'native');
  assert.equal(kindOf('python'), 'python');
});

test('layout keeps the kinds of frames', () => {
  const root = {
    name: 'total', self: 0, total: 10, children: [
      { name: 'main', self: 0, total: 10, children: [
        { name: 'run', kind: 'python', self: 4, total: 6, children: [{ name: 'do_syscall_64', kind: 'kernel', self: 2, total: 2 }] },
        { name: 'run', self: 4, total: 4 },
      ] },
    ],
  };
  const l = layoutTree(root);
  assert.deepEqual(l.frames.map((f) => `${f.name}/${f.kind}`), ['total/native', 'main/native', 'run/python', 'do_syscall_64/kernel', 'run/native']);
  assert.deepEqual(l.kinds, ['native', 'python', 'kernel']);
});

test('[other] nodes are grey whatever the kind, other names are not', () => {
  const sat = (hsl) => Number(/^hsl\(\d+, (\d+)%/.exec(hsl)[1]);
  for (const k of KIND_ORDER) {
    for (const dim of [false, true]) {
      assert.ok(sat(frameColor(k, '[other]', dim)) < 15, `${k} [other] ${frameColor(k, '[other]', dim)}`);
      assert.ok(sat(frameColor(k, 'main.work', dim)) >= 40, `${k} main.work ${frameColor(k, 'main.work', dim)}`);
    }
  }
});
