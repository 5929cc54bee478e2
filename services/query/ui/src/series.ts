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
