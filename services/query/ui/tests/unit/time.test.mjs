import { test } from 'node:test';
import assert from 'node:assert/strict';
import { parseDateMath, resolve } from '../../.unit-build/time.js';

const now = Date.parse('2026-11-30T10:37:12.345Z');

test('relative expressions', () => {
  for (const [expr, want] of [
    ['now', now],
    ['now-15m', now - 15 * 60e3],
    ['now-1h', now - 3600e3],
    ['now-7d', now - 7 * 86400e3],
    ['now+30s', now + 30e3],
    ['now-1h-30m', now - 5400e3],
    ['now/h', Date.parse('2026-11-30T10:00:00Z')],
  ]) assert.equal(parseDateMath(expr, now), want, expr);
  assert.equal(parseDateMath('now/h', now, true), Date.parse('2026-11-30T10:59:59.999Z'));
  assert.equal(parseDateMath('now-1M', now), Date.parse('2026-10-30T10:37:12.345Z'));
});

test('absolute dates and garbage', () => {
  assert.equal(parseDateMath('2026-11-30T09:00:00Z', now), Date.parse('2026-11-30T09:00:00Z'));
  assert.ok(Number.isNaN(parseDateMath('yesterday', now)));
  assert.ok(Number.isNaN(parseDateMath('now-1x', now)));
  assert.ok(Number.isNaN(parseDateMath('now-', now)));
});

test('resolve gives RFC 3339 bounds and readable errors', () => {
  const r = resolve({ start: 'now-1h', end: 'now' }, now);
  assert.equal(r.from, '2026-11-30T09:37:12.345Z');
  assert.equal(r.to, '2026-11-30T10:37:12.345Z');
  assert.match(resolve({ start: 'now', end: 'now-1h' }, now).message, /ends before it starts/);
  assert.match(resolve({ start: 'soon', end: 'now' }, now).message, /start of the time range "soon"/);
});
