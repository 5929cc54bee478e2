// A picked search result's trend: one /api/v1/series?function= request (the
// API sums the function's total per step from the per-function rollups, or
// from the samples of the stacks holding it), with the steps it was absent
// from filled with 0. Pure apart from the request; unit-tested.

import type { Api, SeriesResponse } from './api';
import type { Resolved } from './time';

export async function functionTrend(
  api: Pick<Api, 'series'>, type: string, query: string, range: Resolved, fn: string, signal?: AbortSignal,
): Promise<SeriesResponse> {
  const r = await api.series({ type, query, from: range.from, to: range.to, function: fn }, signal);
  return fillSteps(r, range.fromMs, range.toMs);
}

// fillSteps gives every step of [fromMs, toMs) a point, 0 where the API has
// none: the API leaves out the steps without samples of the function, and a
// line drawn across them would show the function running while it was not.
// Steps are aligned to the epoch, as the API aligns them.
export function fillSteps(r: SeriesResponse, fromMs: number, toMs: number): SeriesResponse {
  const step = r.step_seconds * 1000;
  if (!(step > 0) || !(toMs > fromMs)) return r;
  return {
    ...r,
    series: r.series.map((s) => {
      const have = new Map(s.points.map((p) => [p[0], p[1]]));
      for (let t = Math.floor(fromMs / step) * step; t < toMs; t += step) {
        if (!have.has(t)) have.set(t, 0);
      }
      const points = [...have].sort((a, b) => a[0] - b[0]);
      return { ...s, points };
    }),
  };
}

// trendIsEmpty: no line, or no step with a value.
export function trendIsEmpty(r: SeriesResponse): boolean {
  return !r.series?.some((s) => s.points.some((p) => p[1] !== 0));
}
