// The "other" line of a chart: its legend name and the note saying how many
// groups it sums.

import { test } from 'node:test';
import assert from 'node:assert/strict';
import { foldedNote, mergePoints, seriesName } from '../../.unit-build/series.js';

const resp = { type: 'cpu', unit: 'cores', step_seconds: 60, total_series: 150, series: [
  { labels: { host: 'a' }, points: [[0, 3]] },
  { labels: { host: 'b' }, points: [[0, 2], [60000, 1]] },
  { labels: {}, other: true, folded: 148, points: [[60000, 7]] },
] };

test('other is named other, not all', () => {
  assert.equal(seriesName({}, true), 'other');
  assert.equal(seriesName({}), 'all');
  assert.equal(seriesName({ host: 'a' }), 'a');
});

test('the note counts the folded groups', () => {
  assert.equal(foldedNote(resp, 'host'), 'top 2 of 150 hosts; 148 summed as other');
  assert.equal(foldedNote({ ...resp, series: resp.series.slice(0, 2) }, 'host'), '');
  assert.equal(foldedNote({ ...resp, series: [resp.series[0], { labels: {}, other: true, points: [] }] }, 'service'),
    'top 1 services; the rest summed as other');
});

test('other is one more column of the chart', () => {
  assert.deepEqual(mergePoints(resp), [[0, 60], [3, null], [2, 1], [null, 7]]);
});
