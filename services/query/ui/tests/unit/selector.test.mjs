import { test } from 'node:test';
import assert from 'node:assert/strict';
import { applyCompletion, completionAt } from '../../.unit-build/selector.js';

test('what is being typed', () => {
  assert.deepEqual(completionAt('', 0), { kind: 'label', label: '', prefix: '', start: 0 });
  assert.deepEqual(completionAt('{ser', 4), { kind: 'label', label: 'ser', prefix: 'ser', start: 1 });
  assert.deepEqual(completionAt('{service="che', 13), { kind: 'value', label: 'service', prefix: 'che', start: 10 });
  assert.deepEqual(completionAt('{service="a",host=~"web', 23), { kind: 'value', label: 'host', prefix: 'web', start: 20 });
  assert.deepEqual(completionAt('{service="a", ho', 16), { kind: 'label', label: 'ho', prefix: 'ho', start: 14 });
  assert.equal(completionAt('{service="a"}', 13), null);
  assert.equal(completionAt('garbage', 7), null);
});

test('picking a label then a value builds a valid selector', () => {
  let text = '{ser';
  let c = completionAt(text, 4);
  let cursor;
  [text, cursor] = applyCompletion(text, 4, c, 'service');
  assert.equal(text, '{service=""}');
  assert.equal(cursor, 10);
  c = completionAt(text, cursor);
  assert.equal(c.kind, 'value');
  [text, cursor] = applyCompletion(text, cursor, c, 'checkout');
  assert.equal(text, '{service="checkout"}');
  assert.equal(cursor, 19);
});

test('completion from empty input and value escaping', () => {
  let [text, cursor] = applyCompletion('', 0, completionAt('', 0), 'host');
  assert.equal(text, '{host=""}');
  const c = completionAt(text, cursor);
  [text] = applyCompletion(text, cursor, c, 'we"ird\\');
  assert.equal(text, '{host="we\\"ird\\\\"}');
});

test('a second matcher keeps the first', () => {
  const text = '{service="a",h';
  const [out] = applyCompletion(text, text.length, completionAt(text, text.length), 'host');
  assert.equal(out, '{service="a",host=""}');
});
