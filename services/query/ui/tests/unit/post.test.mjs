// Long requests: the real Api client sends a GET while the URL fits
// MAX_GET_URL and the same parameters as a POST form past it; completion
// asks for values by prefix.

import { test } from 'node:test';
import assert from 'node:assert/strict';
import { createServer } from 'node:http';
import { Api, MAX_GET_URL } from '../../.unit-build/api.js';
import { valuesQuery } from '../../.unit-build/selector.js';

test('a selector past the URL limit is sent as a POST form', async (t) => {
  const requests = [];
  const server = createServer((req, res) => {
    let body = '';
    req.on('data', (c) => (body += c));
    req.on('end', () => {
      requests.push({ method: req.method, url: req.url, type: req.headers['content-type'], body, auth: req.headers.authorization });
      res.writeHead(200, { 'content-type': 'application/json' });
      res.end(JSON.stringify({ type: 'cpu', unit: 'cores', step_seconds: 60, series: [] }));
    });
  });
  await new Promise((ok) => server.listen(0, '127.0.0.1', ok));
  t.after(() => server.close());
  const api = new Api(() => 'tok', `http://127.0.0.1:${server.address().port}`);
  const hosts = Array.from({ length: 5000 }, (_, i) => `host-${String(i).padStart(4, '0')}`);
  const query = `{host=~"${hosts.join('|')}"}`;
  await api.series({ query, group_by: 'host', top: 10 });
  await api.series({ query: '{host=~"host-0001|host-0002"}', group_by: 'host' });
  assert.equal(requests.length, 2);
  const [long, short] = requests;
  assert.equal(long.method, 'POST');
  assert.equal(long.url, '/api/v1/series');
  assert.equal(long.type, 'application/x-www-form-urlencoded');
  assert.equal(long.auth, 'Bearer tok');
  const form = new URLSearchParams(long.body);
  assert.equal(form.get('query'), query);
  assert.equal(form.get('top'), '10');
  assert.ok(long.body.length > MAX_GET_URL);
  assert.equal(short.method, 'GET');
  assert.equal(new URL(short.url, 'http://x').searchParams.get('query'), '{host=~"host-0001|host-0002"}');
});

test('values are asked for by prefix, any case, escaped', () => {
  assert.equal(valuesQuery('host', ''), '');
  assert.equal(valuesQuery('host', 'web-1'), '{host=~"(?i)web-1.*"}');
  assert.equal(valuesQuery('host', 'a.b'), '{host=~"(?i)a\\\\.b.*"}');
  assert.equal(valuesQuery('k8s_pod', 'x"y'), '{k8s_pod=~"(?i)x\\"y.*"}');
});
