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

test('wall keeps only keys exact in both answers; the rest and both others are one other line', () => {
  // cpu shows api and db and folds the rest; offcpu shows api and cache and
  // folds the rest: db's off-CPU and cache's CPU may hide in the others.
  const cpu = { type: 'cpu', unit: 'cores', step_seconds: 60, series: [
    { labels: { host: 'api' }, points: [[0, 1]] },
    { labels: { host: 'db' }, points: [[0, 2]] },
    { labels: {}, other: true, folded: 5, points: [[0, 0.5]] },
  ] };
  const offcpu = { type: 'offcpu', unit: 'threads', step_seconds: 60, series: [
    { labels: { host: 'api' }, points: [[0, 3]] },
    { labels: { host: 'cache' }, points: [[0, 4]] },
    { labels: {}, other: true, folded: 5, points: [[0, 0.25]] },
  ] };
  const w = wallSeries(cpu, offcpu);
  assert.deepEqual(w.series.map((s) => s.other ? 'other' : s.labels.host), ['api', 'other']);
  assert.deepEqual(w.series[0].points, [[0, 4]]);
  assert.deepEqual(w.series[1].points, [[0, 2 + 0.5 + 4 + 0.25]]);
  const sum = w.series.reduce((a, s) => a + s.points[0][1], 0);
  assert.equal(sum, 1 + 2 + 0.5 + 3 + 4 + 0.25);
});
