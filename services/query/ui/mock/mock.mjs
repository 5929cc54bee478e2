// A small fake of the query API for `STACKSTREAM_UI_MOCK=1 npm run dev` and for
// running tests/ui.spec.mjs without a Go server while developing. Same
// function, service and host names as the Go browser test's fixture.

const tree = {
  name: 'total', self: 0, total: 1000,
  children: [
    { name: 'main.main', self: 0, total: 900, children: [
      { name: 'main.handle', self: 50, total: 700, children: [
        { name: 'main.work', self: 500, total: 600, children: [
          { name: 'crypto/sha256.block', self: 100, total: 100 },
        ] },
        { name: 'runtime.mallocgc', self: 50, total: 50 },
      ] },
      { name: 'main.idle', self: 200, total: 200 },
    ] },
    { name: 'runtime.gcBgMarkWorker', self: 100, total: 100 },
  ],
};

function series(params, base) {
  const to = Date.parse(params.get('to') || new Date().toISOString());
  const from = Date.parse(params.get('from') || new Date(to - 3600e3).toISOString());
  const step = Math.max(60e3, Math.ceil((to - from) / 120 / 60e3) * 60e3);
  const by = params.get('group_by') || 'service';
  const names = by === 'host' ? ['web-1', 'web-2'] : ['checkout', 'web'];
  return {
    type: params.get('type') || 'cpu',
    unit: params.get('type') === 'memory' ? 'bytes' : 'cores',
    step_seconds: step / 1000,
    series: names.map((n, k) => ({
      labels: { [by]: n },
      points: Array.from({ length: Math.floor((to - from) / step) }, (_, i) => {
        const t = Math.floor(from / step) * step + i * step;
        return [t, base * (k + 1) * (1 + 0.3 * Math.sin(t / 600e3 + k))];
      }),
    })),
  };
}

// functionSeries answers /series?function=: one line, with the steps
// without samples left out as the API does.
function functionSeries(params) {
  const s = series(params, 0.5);
  const fn = params.get('function');
  const known = JSON.stringify(tree).includes(JSON.stringify(fn));
  return { ...s, series: [{ labels: { function: fn }, points: known ? s.series[0].points.filter((_, i) => i % 5 !== 3) : [] }] };
}

// sandwichOf answers /sandwich from the mock tree: callers as the paths
// to fn (outermost occurrence), callees as fn's subtrees merged.
function sandwichOf(fn) {
  const callers = { name: fn, self: 0, total: 0, children: [] };
  const callees = { name: fn, self: 0, total: 0, children: [] };
  const child = (n, name) => {
    let c = n.children.find((x) => x.name === name);
    if (!c) n.children.push((c = { name, self: 0, total: 0, children: [] }));
    return c;
  };
  const merge = (dst, src) => {
    const c = child(dst, src.name);
    c.self += src.self;
    c.total += src.total;
    for (const k of src.children ?? []) merge(c, k);
  };
  const walk = (n, path) => {
    if (n.name === fn) {
      callers.total += n.total;
      callees.total += n.total;
      callees.self += n.self;
      let cur = callers;
      for (let i = path.length - 1; i >= 1; i--) {
        cur = child(cur, path[i].name);
        cur.total += n.total;
      }
      cur.self += n.total;
      for (const k of n.children ?? []) merge(callees, k);
      return;
    }
    for (const k of n.children ?? []) walk(k, [...path, n]);
  };
  walk(tree, []);
  const sum = (n) => (n.children ?? []).reduce((a, c) => a + c.total, 0);
  callers.self = callers.total - sum(callers);
  return { type: 'cpu', unit: 'nanoseconds', total: tree.total, truncated: false, folded: 0, callers, callees };
}

export function handle(path, params) {
  const q = params.get('query') || '';
  if (/[{]?[^}]*$/.test(q) && q && !q.trim().endsWith('}')) {
    return { status: 400, body: { error: `parameter "query": cannot parse ${JSON.stringify(q)}: missing closing "}"`, parameter: 'query' } };
  }
  switch (path) {
    case '/api/v1/config': return { status: 200, body: { auth: false, version: 'mock' } };
    case '/api/v1/labels': return { status: 200, body: { labels: ['comm', 'host', 'k8s_pod', 'service'] } };
    case '/api/v1/labels/service/values': return { status: 200, body: { label: 'service', values: ['checkout', 'web'] } };
    case '/api/v1/labels/host/values': return { status: 200, body: { label: 'host', values: ['web-1', 'web-2'] } };
    case '/api/v1/series':
      if (params.get('function')) return { status: 200, body: functionSeries(params) };
      return { status: 200, body: series(params, params.get('type') === 'memory' ? 256 * 2 ** 20 : 1.25) };
    case '/api/v1/flamegraph':
      return { status: 200, body: { type: 'cpu', unit: 'nanoseconds', total: tree.total, truncated: false, root: tree } };
    case '/api/v1/sandwich':
      return { status: 200, body: sandwichOf(params.get('function') || '') };
    case '/api/v1/top':
      return { status: 200, body: { type: 'cpu', unit: 'nanoseconds', total: 1000, functions: [
        { name: 'main.work', self: 500, total: 600, self_share: 0.5, total_share: 0.6 },
        { name: 'main.idle', self: 200, total: 200, self_share: 0.2, total_share: 0.2 },
        { name: 'crypto/sha256.block', self: 100, total: 100, self_share: 0.1, total_share: 0.1 },
        { name: 'runtime.gcBgMarkWorker', self: 100, total: 100, self_share: 0.1, total_share: 0.1 },
        { name: 'main.handle', self: 50, total: 700, self_share: 0.05, total_share: 0.7 },
        { name: 'runtime.mallocgc', self: 50, total: 50, self_share: 0.05, total_share: 0.05 },
        { name: 'main.main', self: 0, total: 900, self_share: 0, total_share: 0.9 },
      ] } };
    case '/api/v1/search': {
      const k = (params.get('q') || '').toLowerCase();
      const all = [
        { kind: 'function', name: 'main.work', share: 0.6 },
        { kind: 'function', name: 'main.handle', share: 0.7 },
        { kind: 'service', name: 'checkout', share: 0.6 },
        { kind: 'service', name: 'web', share: 0.4 },
        { kind: 'host', name: 'web-1', share: 0.5 },
        { kind: 'host', name: 'web-2', share: 0.5 },
      ];
      return { status: 200, body: { query: k, results: all.filter((r) => r.name.toLowerCase().includes(k)) } };
    }
    case '/api/v1/diff':
      return { status: 200, body: { type: 'cpu', base_total: 1000, compare_total: 1500, root: {
        name: 'total', base: 1, compare: 1, children: [
          { name: 'main.main', base: 0.9, compare: 0.9, children: [
            { name: 'main.handle', base: 0.5, compare: 0.75, children: [{ name: 'main.work', base: 0.4, compare: 0.7 }] },
            { name: 'main.idle', base: 0.4, compare: 0.15 },
          ] },
          { name: 'runtime.gcBgMarkWorker', base: 0.1, compare: 0.1 },
        ] } } };
    default:
      return { status: 404, body: { error: `no such endpoint ${path}` } };
  }
}
