// The Search tab's function trend: one /api/v1/series?function= request made
// by the real Api client to a local HTTP server, and the gap filling of its
// answer.

import { test } from 'node:test';
import assert from 'node:assert/strict';
import { createServer } from 'node:http';
import { Api, ApiError } from '../../.unit-build/api.js';
import { functionTrend, fillSteps, trendIsEmpty } from '../../.unit-build/trend.js';

// serve answers every request with answer(url) and records the requests.
async function serve(answer) {
  const requests = [];
  const server = createServer((req, res) => {
    const url = new URL(req.url, 'http://x');
    requests.push({ method: req.method, url, auth: req.headers.authorization });
    const [status, body] = answer(url);
    res.writeHead(status, { 'content-type': 'application/json' });
    res.end(JSON.stringify(body));
  });
  await new Promise((ok) => server.listen(0, '127.0.0.1', ok));
  const base = `http://127.0.0.1:${server.address().port}`;
  return { base, requests, close: () => new Promise((ok) => server.close(ok)) };
}

const H = 3600e3;
const range = { from: new Date(10 * H).toISOString(), to: new Date(16 * H).toISOString(), fromMs: 10 * H, toMs: 16 * H };

test('a function trend is one /series request with function=', async (t) => {
  const srv = await serve((url) => [200, {
    type: url.searchParams.get('type'), unit: 'cores', step_seconds: 3600,
    series: [{ labels: { function: url.searchParams.get('function') }, points: [[11 * H, 0.5], [13 * H, 1.5]] }],
  }]);
  t.after(srv.close);
  const api = new Api(() => 'secret', srv.base);
  const fn = 'main.(*T).work';
  const r = await functionTrend(api, 'cpu', '{service="checkout"}', range, fn);

  assert.equal(srv.requests.length, 1, `requests: ${srv.requests.map((q) => q.url.href).join(' ')}`);
  const { method, url, auth } = srv.requests[0];
  assert.equal(method, 'GET');
  assert.equal(url.pathname, '/api/v1/series');
  assert.deepEqual(Object.fromEntries(url.searchParams), {
    type: 'cpu', query: '{service="checkout"}', from: range.from, to: range.to, function: fn,
  });
  assert.equal(auth, 'Bearer secret');

  assert.equal(r.unit, 'cores');
  assert.equal(r.series.length, 1);
  assert.deepEqual(r.series[0].labels, { function: fn });
  // Six hourly steps, the two the API answered and 0 elsewhere.
  assert.deepEqual(r.series[0].points, [[10 * H, 0], [11 * H, 0.5], [12 * H, 0], [13 * H, 1.5], [14 * H, 0], [15 * H, 0]]);
  assert.equal(trendIsEmpty(r), false);
});

test('a function trend passes on the API error', async (t) => {
  const srv = await serve(() => [400, { error: 'parameter "function": longer than 1024 bytes', parameter: 'function' }]);
  t.after(srv.close);
  await assert.rejects(functionTrend(new Api(() => '', srv.base), 'cpu', '', range, 'x'), (e) => {
    assert.ok(e instanceof ApiError);
    assert.equal(e.status, 400);
    assert.equal(e.parameter, 'function');
    return true;
  });
  assert.equal(srv.requests.length, 1);
});

test('fillSteps aligns to the epoch and keeps the points it has', () => {
  const r = { type: 'heap', unit: 'bytes', step_seconds: 120, series: [{ labels: { function: 'f' }, points: [[240e3, 7]] }] };
  // [100 s, 500 s) with 2-minute steps: 0, 120, 240, 360, 480 s.
  assert.deepEqual(fillSteps(r, 100e3, 500e3).series[0].points, [[0, 0], [120e3, 0], [240e3, 7], [360e3, 0], [480e3, 0]]);
  assert.deepEqual(r.series[0].points, [[240e3, 7]], 'input left alone');
  // A step of 0 or an empty range leaves the answer as it is.
  assert.equal(fillSteps({ ...r, step_seconds: 0 }, 0, 1e6).series[0].points.length, 1);
  assert.equal(fillSteps(r, 5e5, 5e5), r);
});

test('trendIsEmpty', () => {
  assert.equal(trendIsEmpty({ series: [] }), true);
  assert.equal(trendIsEmpty({ series: [{ labels: {}, points: [] }] }), true);
  assert.equal(trendIsEmpty({ series: [{ labels: {}, points: [[0, 0], [60e3, 0]] }] }), true);
  assert.equal(trendIsEmpty({ series: [{ labels: {}, points: [[0, 0], [60e3, 1e-9]] }] }), false);
});
