// FlameGraph draws a Layout on one canvas. Frames narrower than half a pixel
// are skipped (their children are narrower still), so tens of thousands of
// frames draw in a few milliseconds; hover and zoom redraw from the flat
// arrays without touching React state per frame.

import { useCallback, useEffect, useMemo, useRef, useState } from 'react';
import { EuiButtonEmpty, EuiFlexGroup, EuiFlexItem, EuiText } from '@opensearch-project/oui';
import { ancestors, formatPercent, formatValue, frameAt, matchedShare, type Layout } from './tree';
import { frameColor, KIND_ORDER, kindLabel, kindSwatch, type FrameKind } from './kinds';

const ROW = 18;
const FONT = '12px ui-monospace, SFMono-Regular, Menlo, Consolas, monospace';

export interface FlameGraphProps {
  layout: Layout;
  unit: string;
  match?: ((name: string) => boolean) | null;
  icicle?: boolean;
  testId?: string;
  onFocusFunction?: (name: string | null) => void;
  onSandwich?: (name: string) => void;
  // Focus the first frame of this function when it changes (search picks).
  focusName?: string | null;
}

export function FlameGraph(props: FlameGraphProps) {
  const { layout, unit, match, icicle = true, testId = 'flamegraph' } = props;
  const canvasRef = useRef<HTMLCanvasElement>(null);
  const wrapRef = useRef<HTMLDivElement>(null);
  const [width, setWidth] = useState(800);
  const [focus, setFocus] = useState(0);
  const [hover, setHover] = useState<{ i: number; x: number; y: number } | null>(null);
  const height = (layout.maxDepth + 1) * ROW;

  useEffect(() => setFocus(0), [layout]);

  useEffect(() => {
    if (!props.focusName) return;
    const i = layout.frames.findIndex((f) => f.name === props.focusName);
    if (i >= 0) setFocus(i);
  }, [props.focusName, layout]);

  useEffect(() => {
    const el = wrapRef.current;
    if (!el) return;
    const ro = new ResizeObserver(() => setWidth(Math.max(200, el.clientWidth)));
    ro.observe(el);
    setWidth(Math.max(200, el.clientWidth));
    return () => ro.disconnect();
  }, []);

  const matchFlags = useMemo(() => {
    if (!match) return null;
    const flags = new Uint8Array(layout.frames.length);
    layout.frames.forEach((f, i) => {
      if (i > 0 && match(f.name)) flags[i] = 1;
    });
    return flags;
  }, [layout, match]);

  const focusFrame = layout.frames[focus] ?? layout.frames[0];
  const yOf = useCallback(
    (depth: number) => (icicle ? depth : layout.maxDepth - depth) * ROW,
    [icicle, layout.maxDepth],
  );

  useEffect(() => {
    const canvas = canvasRef.current;
    if (!canvas || !focusFrame) return;
    const dpr = window.devicePixelRatio || 1;
    canvas.width = Math.round(width * dpr);
    canvas.height = Math.round(height * dpr);
    canvas.style.width = `${width}px`;
    canvas.style.height = `${height}px`;
    const ctx = canvas.getContext('2d');
    if (!ctx) return;
    const t0 = performance.now();
    ctx.setTransform(dpr, 0, 0, dpr, 0, 0);
    ctx.clearRect(0, 0, width, height);
    ctx.font = FONT;
    ctx.textBaseline = 'middle';
    const charW = ctx.measureText('m').width || 7;
    const x0 = focusFrame.x;
    const span = focusFrame.w || 1;
    const focusAncestors = new Set(ancestors(layout, focus));
    const frames = layout.frames;
    let drawn = 0;
    for (let i = 0; i < frames.length; i++) {
      const f = frames[i];
      let px = ((f.x - x0) / span) * width;
      let pw = (f.w / span) * width;
      if (pw < 0.5 || px + pw <= 0 || px >= width) continue;
      if (f.depth < focusFrame.depth && !focusAncestors.has(i)) continue;
      drawn++;
      if (px < 0) {
        pw += px;
        px = 0;
      }
      if (px + pw > width) pw = width - px;
      const y = yOf(f.depth);
      ctx.fillStyle = colorOf(layout, i, matchFlags, focusAncestors.has(i));
      ctx.fillRect(px, y, Math.max(0.5, pw - 0.5), ROW - 1);
      if (hover && hover.i === i) {
        ctx.strokeStyle = '#1a1c21';
        ctx.lineWidth = 1.5;
        ctx.strokeRect(px + 0.75, y + 0.75, Math.max(0.5, pw - 2), ROW - 2.5);
      }
      if (pw > charW * 3) {
        const fit = Math.floor((pw - 6) / charW);
        const label = f.name.length > fit ? f.name.slice(0, Math.max(1, fit - 1)) + '…' : f.name;
        ctx.fillStyle = '#1a1c21';
        ctx.fillText(label, px + 3, y + ROW / 2);
      }
    }
    // Exposed for the browser tests and the drawing benchmark.
    canvas.dataset.drawMs = (performance.now() - t0).toFixed(2);
    canvas.dataset.drawn = String(drawn);
  }, [layout, width, height, focus, focusFrame, matchFlags, hover?.i, yOf]);

  const hitTest = (ev: React.MouseEvent<HTMLCanvasElement>) => {
    const rect = ev.currentTarget.getBoundingClientRect();
    const px = ev.clientX - rect.left;
    const py = ev.clientY - rect.top;
    const row = Math.floor(py / ROW);
    const depth = icicle ? row : layout.maxDepth - row;
    const frac = focusFrame.x + (px / width) * (focusFrame.w || 1);
    return { i: frameAt(layout, depth, frac), x: px, y: py };
  };

  const onMove = (ev: React.MouseEvent<HTMLCanvasElement>) => {
    const h = hitTest(ev);
    setHover(h.i >= 0 ? h : null);
  };

  const onClick = (ev: React.MouseEvent<HTMLCanvasElement>) => {
    const h = hitTest(ev);
    if (h.i < 0) return;
    const next = h.i === focus ? Math.max(0, layout.frames[h.i].parent) : h.i;
    setFocus(next);
    props.onFocusFunction?.(next === 0 ? null : layout.frames[next].name);
  };

  const hovered = hover ? layout.frames[hover.i] : null;
  const matches = matchFlags ? matchFlags.reduce((s, v) => s + v, 0) : 0;
  const share = useMemo(() => (match && !layout.diff ? matchedShare(layout, match) : 0), [layout, match]);

  return (
    <div>
      <EuiFlexGroup gutterSize="s" alignItems="center" responsive={false} style={{ minHeight: 32 }}>
        <EuiFlexItem grow={false}>
          <EuiText size="xs" color="subdued" data-test-subj={`${testId}-status`}>
            {focus === 0 ? 'Click a frame to zoom' : <>Zoomed on <strong>{focusFrame.name}</strong></>}
            {matchFlags ? ` · ${matches} matching frames` : ''}
            {matchFlags && !layout.diff ? ` (${formatPercent(share)} of the total)` : ''}
          </EuiText>
        </EuiFlexItem>
        {focus !== 0 && (
          <EuiFlexItem grow={false}>
            <EuiButtonEmpty size="xs" iconType="fullScreenExit" onClick={() => { setFocus(0); props.onFocusFunction?.(null); }}
              data-test-subj={`${testId}-reset`}>
              Reset zoom
            </EuiButtonEmpty>
          </EuiFlexItem>
        )}
        {focus !== 0 && props.onSandwich && (
          <EuiFlexItem grow={false}>
            <EuiButtonEmpty size="xs" iconType="layers" onClick={() => props.onSandwich!(focusFrame.name)}
              data-test-subj={`${testId}-sandwich`}>
              Sandwich view
            </EuiButtonEmpty>
          </EuiFlexItem>
        )}
      </EuiFlexGroup>
      {!layout.diff && <KindLegend kinds={layout.kinds} testId={testId} />}
      <div ref={wrapRef} style={{ position: 'relative', width: '100%' }}>
        <canvas
          ref={canvasRef}
          data-testid={testId}
          data-focus={focusFrame?.name ?? ''}
          data-frames={layout.frames.length}
          data-matches={matches}
          data-rows={layout.maxDepth + 1}
          data-row-height={ROW}
          data-icicle={icicle ? 'true' : 'false'}
          data-kinds={layout.kinds.join(',')}
          role="img"
          aria-label={`Flame graph of ${layout.frames.length} frames${focus !== 0 ? `, zoomed on ${focusFrame?.name}` : ''}`}
          style={{ display: 'block', cursor: 'pointer' }}
          onMouseMove={onMove}
          onMouseLeave={() => setHover(null)}
          onClick={onClick}
        />
        {hovered && hover && (
          <div className="ss-tooltip" data-testid={`${testId}-tooltip`}
            style={{ left: Math.min(hover.x + 12, width - 320), top: hover.y + 16 }}>
            <div className="ss-tooltip-name">{hovered.name}</div>
            {hover.i !== 0 && (
              <div className="ss-tooltip-kind" data-kind={hovered.kind}>
                <span className="ss-legend-swatch" style={{ background: kindSwatch(hovered.kind) }} />
                {kindLabel(hovered.kind)}
              </div>
            )}
            {layout.diff ? (
              <DiffTip base={hovered.base ?? 0} compare={hovered.compare ?? 0} />
            ) : (
              <table>
                <tbody>
                  <tr><td>Self</td><td>{formatValue(hovered.self, unit)}</td><td>{formatPercent(layout.total ? hovered.self / layout.total : 0)}</td></tr>
                  <tr><td>Total</td><td>{formatValue(hovered.total, unit)}</td><td>{formatPercent(layout.total ? hovered.total / layout.total : 0)}</td></tr>
                </tbody>
              </table>
            )}
          </div>
        )}
      </div>
    </div>
  );
}

function DiffTip({ base, compare }: { base: number; compare: number }) {
  const d = compare - base;
  return (
    <table>
      <tbody>
        <tr><td>Base</td><td>{formatPercent(base)}</td></tr>
        <tr><td>Compare</td><td>{formatPercent(compare)}</td></tr>
        <tr><td>Change</td><td style={{ color: d > 0 ? '#bd271e' : d < 0 ? '#017d73' : undefined }}>
          {d > 0 ? '+' : ''}{(d * 100).toFixed(2)} pp {d > 0 ? '(slower)' : d < 0 ? '(faster)' : ''}
        </td></tr>
      </tbody>
    </table>
  );
}

function colorOf(l: Layout, i: number, matchFlags: Uint8Array | null, isAncestor: boolean): string {
  const f = l.frames[i];
  if (i === 0) return '#d3dae6';
  if (l.diff) return diffColor(f.base ?? 0, f.compare ?? 0);
  if (matchFlags) return matchFlags[i] ? '#e7664c' : '#e0e5ee';
  return frameColor(f.kind, f.name, isAncestor);
}

// KindLegend names the colors of the kinds drawn, shown once a flame graph
// holds frames other than native code (a plain native graph needs none).
function KindLegend({ kinds, testId }: { kinds: FrameKind[]; testId: string }) {
  if (kinds.length === 0 || (kinds.length === 1 && kinds[0] === 'native')) return null;
  const shown = KIND_ORDER.filter((k) => kinds.includes(k));
  return (
    <div className="ss-legend" data-test-subj={`${testId}-legend`}>
      {shown.map((k) => (
        <span key={k} className="ss-legend-item" data-kind={k}>
          <span className="ss-legend-swatch" style={{ background: kindSwatch(k) }} />
          {kindLabel(k)}
        </span>
      ))}
    </div>
  );
}

// diffColor: compare above base is red (slower), below is green (faster),
// saturated by the relative change.
function diffColor(base: number, compare: number): string {
  const max = Math.max(base, compare);
  if (max === 0) return '#e0e5ee';
  const rel = (compare - base) / max; // -1 .. 1
  const k = Math.min(1, Math.abs(rel) * 1.5);
  const neutral = [224, 229, 238];
  const target = rel > 0 ? [230, 70, 60] : [40, 180, 120];
  const c = neutral.map((n, j) => Math.round(n + (target[j] - n) * k));
  return `rgb(${c[0]}, ${c[1]}, ${c[2]})`;
}
