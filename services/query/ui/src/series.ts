// Series responses turned into uPlot's column layout. Pure, unit-tested.

import type { SeriesLine, SeriesResponse } from './api';

// uPlot's AlignedData: x values (seconds), then one column per series.
export type AlignedData = [number[], ...(number | null)[][]];

// mergePoints aligns series with different timestamps on one x axis
// (seconds, as uPlot wants), leaving gaps as null.
export function mergePoints(resp: SeriesResponse): AlignedData {
  const xs = new Set<number>();
  for (const s of resp.series) for (const [t] of s.points) xs.add(t);
  const sorted = [...xs].sort((a, b) => a - b);
  const pos = new Map(sorted.map((t, i) => [t, i]));
  const ys = resp.series.map((s) => {
    const col: (number | null)[] = new Array(sorted.length).fill(null);
    for (const [t, v] of s.points) col[pos.get(t)!] = v;
    return col;
  });
  return [sorted.map((t) => t / 1000), ...ys];
}

export function seriesName(labels: Record<string, string>, other = false): string {
  if (other) return 'other';
  const vals = Object.values(labels);
  return vals.length ? vals.join(', ') : 'all';
}

// foldedNote says how many groups a chart sums as "other", or '' when it
// shows every group.
export function foldedNote(resp: SeriesResponse, groupBy: string): string {
  const other = resp.series.find((s) => s.other);
  if (!other) return '';
  const shown = resp.series.length - 1;
  const n = other.folded;
  const plural = groupBy === 'host' ? 'hosts' : 'services';
  if (n == null) return `top ${shown} ${plural}; the rest summed as other`;
  return `top ${shown} of ${shown + n} ${plural}; ${n} summed as other`;
}

// wallSeries adds CPU (cores) and off-CPU (threads blocked) per series key
// and timestamp: wall-clock time, as threads on or off a CPU on average.
// A series or point present in one answer only counts what it has. When an
// answer folded groups into "other", a key missing from it may hide there,
// so such a key is not a line of its own either: it goes into the wall's
// "other" with both answers' other lines. Every line shown is then exact
// and the lines still add up to CPU + off-CPU at every step.
export function wallSeries(cpu: SeriesResponse, offcpu: SeriesResponse): SeriesResponse {
  const answers = [cpu, offcpu];
  const keyOf = (s: SeriesLine) => JSON.stringify(Object.entries(s.labels).sort());
  const keySets = answers.map((r) => new Set(r.series.filter((s) => !s.other).map(keyOf)));
  const folding = answers.map((r) => r.series.some((s) => s.other));
  const exact = (key: string) => answers.every((_, i) => keySets[i].has(key) || !folding[i]);
  const byKey = new Map<string, { labels: Record<string, string>; points: Map<number, number> }>();
  const other = new Map<number, number>();
  const otherKeys = new Set<string>();
  const add = (m: Map<number, number>, pts: [number, number][]) => {
    for (const [t, v] of pts) m.set(t, (m.get(t) ?? 0) + v);
  };
  for (const resp of answers) {
    for (const s of resp.series) {
      const key = keyOf(s);
      if (s.other || !exact(key)) {
        if (!s.other) otherKeys.add(key);
        add(other, s.points);
        continue;
      }
      let e = byKey.get(key);
      if (!e) {
        e = { labels: s.labels, points: new Map() };
        byKey.set(key, e);
      }
      add(e.points, s.points);
    }
  }
  const sorted = (m: Map<number, number>) => [...m.entries()].sort((a, b) => a[0] - b[0]) as [number, number][];
  const series: SeriesLine[] = [...byKey.values()].map((e) => ({ labels: e.labels, points: sorted(e.points) }));
  if (folding.some(Boolean)) series.push({ labels: {}, other: true, points: sorted(other) });
  return {
    type: 'wall',
    unit: 'threads',
    step_seconds: cpu.step_seconds || offcpu.step_seconds,
    series,
  };
}
