// TimeChart draws one API series response with uPlot. Dragging across the
// plot selects a window and hands it to onZoom (the page's time range).

import { useEffect, useRef } from 'react';
import uPlot from 'uplot';
import 'uplot/dist/uPlot.min.css';
import type { SeriesResponse } from '../api';
import { formatValue } from '../flame/tree';
import { foldedNote, mergePoints, seriesName } from '../series';

// OTHER_COLOR draws the "other" line (the groups past the top ones):
// grey and dashed, so it never reads as one more host or service.
export const OTHER_COLOR = '#98a2b3';

const PALETTE = ['#54b399', '#6092c0', '#d36086', '#9170b8', '#ca8eae', '#d6bf57', '#b9a888', '#da8b45', '#aa6556', '#e7664c'];

export interface TimeChartProps {
  data: SeriesResponse;
  fromMs: number;
  toMs: number;
  height?: number;
  testId: string;
  onZoom: (fromMs: number, toMs: number) => void;
  highlight?: string;
  groupBy?: string;
}

export function TimeChart({ data, fromMs, toMs, height = 220, testId, onZoom, groupBy = 'service' }: TimeChartProps) {
  const ref = useRef<HTMLDivElement>(null);
  const zoomRef = useRef(onZoom);
  zoomRef.current = onZoom;

  useEffect(() => {
    const el = ref.current;
    if (!el) return;
    const opts: uPlot.Options = {
      width: Math.max(300, el.clientWidth),
      height,
      // Charts of one page share the cursor, so CPU and memory line up.
      cursor: { drag: { x: true, y: false, setScale: false }, sync: { key: 'stackstream' } },
      scales: {
        x: { time: true, min: fromMs / 1000, max: toMs / 1000 },
        // Cores and bytes read best from zero.
        y: { range: (_u, _min, max) => [0, max > 0 ? max * 1.1 : 1] },
      },
      legend: { show: true },
      axes: [
        {},
        data.unit === 'bytes' || data.unit === 'nanoseconds'
          ? { size: 90, values: (_u, ticks) => ticks.map((v) => formatValue(v, data.unit)) }
          : { size: 60, values: (_u, ticks) => ticks.map(formatTick) },
      ],
      series: [
        {},
        ...data.series.map((s, i) => ({
          label: s.other && s.folded ? `other (${s.folded})` : seriesName(s.labels, s.other),
          stroke: s.other ? OTHER_COLOR : PALETTE[i % PALETTE.length],
          dash: s.other ? [6, 4] : undefined,
          width: 1.5,
          spanGaps: false,
          value: (_u: uPlot, v: number | null) => (v == null ? '-' : formatValue(v, data.unit)),
        })),
      ],
      hooks: {
        setSelect: [
          (u) => {
            if (u.select.width < 3) return;
            const a = u.posToVal(u.select.left, 'x');
            const b = u.posToVal(u.select.left + u.select.width, 'x');
            u.setSelect({ left: 0, top: 0, width: 0, height: 0 }, false);
            zoomRef.current(Math.round(a * 1000), Math.round(b * 1000));
          },
        ],
      },
    };
    const plot = new uPlot(opts, mergePoints(data), el);
    const ro = new ResizeObserver(() => plot.setSize({ width: Math.max(300, el.clientWidth), height }));
    ro.observe(el);
    return () => {
      ro.disconnect();
      plot.destroy();
    };
  }, [data, fromMs, toMs, height]);

  const note = foldedNote(data, groupBy);
  return (
    <>
      <div ref={ref} data-testid={testId} data-series={data.series.length} data-total-series={data.total_series} className="ss-chart" />
      {note && <div className="ss-chart-note" data-testid={`${testId}-folded`}>{note}</div>}
    </>
  );
}

// formatTick keeps three significant digits, so a fraction of a core does
// not round to 0 on every tick.
export function formatTick(v: number): string {
  if (v === 0) return '0';
  const a = Math.abs(v);
  if (a >= 1000) return new Intl.NumberFormat('en-US', { notation: 'compact', maximumSignificantDigits: 3 }).format(v);
  if (a < 0.001) return v.toExponential(1);
  return String(Number(v.toPrecision(3)));
}
