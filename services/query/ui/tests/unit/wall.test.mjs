// Wall-clock series: CPU (cores) + off-CPU (threads blocked) per service and
// timestamp.

import { test } from 'node:test';
import assert from 'node:assert/strict';
import { wallSeries } from '../../.unit-build/series.js';

test('wall adds cpu and offcpu per series and timestamp', () => {
  const cpu = { type: 'cpu', unit: 'cores', step_seconds: 60, series: [
    { labels: { service: 'api' }, points: [[0, 0.5], [60000, 1]] },
    { labels: { service: 'db' }, points: [[0, 2]] },
  ] };
  const offcpu = { type: 'offcpu', unit: 'threads', step_seconds: 60, series: [
    { labels: { service: 'api' }, points: [[60000, 3], [120000, 4]] },
    { labels: { service: 'cache' }, points: [[0, 1]] },
  ] };
  const w = wallSeries(cpu, offcpu);
  assert.equal(w.type, 'wall');
  assert.equal(w.unit, 'threads');
  const by = Object.fromEntries(w.series.map((s) => [s.labels.service, s.points]));
  assert.deepEqual(by.api, [[0, 0.5], [60000, 4], [120000, 4]]);
  assert.deepEqual(by.db, [[0, 2]]);
  assert.deepEqual(by.cache, [[0, 1]]);
});
