// Series responses turned into uPlot's column layout. Pure, unit-tested.

import type { SeriesResponse } from './api';

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

export function seriesName(labels: Record<string, string>): string {
  const vals = Object.values(labels);
  return vals.length ? vals.join(', ') : 'all';
}

// wallSeries adds CPU (cores) and off-CPU (threads blocked) per series key
// and timestamp: wall-clock time, as threads on or off a CPU on average.
// A series or point present in one answer only counts what it has.
export function wallSeries(cpu: SeriesResponse, offcpu: SeriesResponse): SeriesResponse {
  const byKey = new Map<string, { labels: Record<string, string>; points: Map<number, number> }>();
  for (const resp of [cpu, offcpu]) {
    for (const s of resp.series) {
      const key = JSON.stringify(Object.entries(s.labels).sort());
      let e = byKey.get(key);
      if (!e) {
        e = { labels: s.labels, points: new Map() };
        byKey.set(key, e);
      }
      for (const [t, v] of s.points) e.points.set(t, (e.points.get(t) ?? 0) + v);
    }
  }
  return {
    type: 'wall',
    unit: 'threads',
    step_seconds: cpu.step_seconds || offcpu.step_seconds,
    series: [...byKey.values()].map((e) => ({
      labels: e.labels,
      points: [...e.points.entries()].sort((a, b) => a[0] - b[0]) as [number, number][],
    })),
  };
}
