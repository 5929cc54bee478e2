// The flame graph model: the API's nested tree flattened into rows of frames
// with their horizontal position as a fraction of the root, so drawing and hit
// testing are array scans instead of tree walks. The sandwich view's two
// trees come from the API (/api/v1/sandwich), exact however the flame graph
// was folded.

import { OTHER_NODE, type DiffNode, type FlameNode } from '../api.js';
import { kindOf, type FrameKind } from './kinds.js';

export interface Frame {
  name: string;
  kind: FrameKind;
  depth: number;
  x: number; // start, fraction of the root's width
  w: number; // width, fraction of the root's width
  self: number;
  total: number;
  parent: number; // index into Layout.frames, -1 for the root
  // Diff trees only: shares of the base and compare totals.
  base?: number;
  compare?: number;
}

export interface Layout {
  frames: Frame[];
  rows: number[][]; // frame indexes per depth, ordered by x
  total: number;
  maxDepth: number;
  diff: boolean;
  kinds: FrameKind[]; // the kinds of the frames below the root, in order of first appearance
}

function kindsOf(frames: Frame[]): FrameKind[] {
  const seen = new Set<FrameKind>();
  for (let i = 1; i < frames.length; i++) seen.add(frames[i].kind);
  return [...seen];
}

export function layoutTree(root: FlameNode): Layout {
  const frames: Frame[] = [];
  const rows: number[][] = [];
  const total = root.total || 0;
  const visit = (n: FlameNode, depth: number, x: number, parent: number) => {
    const w = total > 0 ? n.total / total : 0;
    const i = frames.length;
    frames.push({ name: n.name, kind: kindOf(n.kind), depth, x, w, self: n.self, total: n.total, parent });
    (rows[depth] ??= []).push(i);
    let cx = x;
    for (const c of n.children ?? []) {
      visit(c, depth + 1, cx, i);
      cx += total > 0 ? c.total / total : 0;
    }
  };
  visit(root, 0, 0, -1);
  return { frames, rows, total, maxDepth: rows.length - 1, diff: false, kinds: kindsOf(frames) };
}

// layoutDiff sizes each frame by the mean of its base and compare shares, so a
// function that vanished or appeared is still visible.
export function layoutDiff(root: DiffNode): Layout {
  const frames: Frame[] = [];
  const rows: number[][] = [];
  const width = (n: DiffNode) => (n.base + n.compare) / 2;
  const rootW = width(root) || 1;
  const visit = (n: DiffNode, depth: number, x: number, parent: number) => {
    const w = width(n) / rootW;
    const i = frames.length;
    const childSum = (n.children ?? []).reduce((s, c) => s + width(c), 0);
    frames.push({
      name: n.name, kind: kindOf(n.kind), depth, x, w, parent,
      self: Math.max(0, width(n) - childSum), total: width(n),
      base: n.base, compare: n.compare,
    });
    (rows[depth] ??= []).push(i);
    let cx = x;
    for (const c of n.children ?? []) {
      visit(c, depth + 1, cx, i);
      cx += width(c) / rootW;
    }
  };
  visit(root, 0, 0, -1);
  return { frames, rows, total: 1, maxDepth: rows.length - 1, diff: true, kinds: kindsOf(frames) };
}

// frameAt finds the frame of row depth covering fraction x (binary search).
export function frameAt(l: Layout, depth: number, x: number): number {
  const row = l.rows[depth];
  if (!row) return -1;
  let lo = 0;
  let hi = row.length - 1;
  while (lo <= hi) {
    const mid = (lo + hi) >> 1;
    const f = l.frames[row[mid]];
    if (x < f.x) hi = mid - 1;
    else if (x >= f.x + f.w) lo = mid + 1;
    else return row[mid];
  }
  return -1;
}

export function ancestors(l: Layout, i: number): number[] {
  const out: number[] = [];
  for (let p = l.frames[i]?.parent ?? -1; p >= 0; p = l.frames[p].parent) out.push(p);
  return out;
}

// matcher returns a predicate for the search box: a case-insensitive
// substring, or a regular expression when written as /re/.
export function matcher(q: string): ((name: string) => boolean) | null {
  const s = q.trim();
  if (!s) return null;
  if (s.length > 2 && s.startsWith('/') && s.endsWith('/')) {
    try {
      const re = new RegExp(s.slice(1, -1), 'i');
      return (n) => re.test(n);
    } catch {
      // an unfinished expression: fall back to a substring
    }
  }
  const lower = s.toLowerCase();
  return (n) => n.toLowerCase().includes(lower);
}

// matchedShare is the fraction of the root covered by matching frames,
// counting nested matches once.
export function matchedShare(l: Layout, match: (n: string) => boolean): number {
  let share = 0;
  const covered = new Uint8Array(l.frames.length);
  l.frames.forEach((f, i) => {
    if (f.parent >= 0 && covered[f.parent]) {
      covered[i] = 1;
      return;
    }
    if (match(f.name) && f.depth > 0) {
      covered[i] = 1;
      share += f.w;
    }
  });
  return share;
}

// functionTotals sums self and total per function name over the tree
// (recursion counted once), for the top table when only a tree is at hand.
export function functionTotals(root: FlameNode): Map<string, { self: number; total: number }> {
  const out = new Map<string, { self: number; total: number }>();
  const onPath = new Map<string, number>();
  const walk = (n: FlameNode, depth: number) => {
    if (depth > 0) {
      const e = out.get(n.name) ?? { self: 0, total: 0 };
      e.self += n.self;
      if (!onPath.get(n.name)) e.total += n.total;
      out.set(n.name, e);
      onPath.set(n.name, (onPath.get(n.name) ?? 0) + 1);
    }
    for (const c of n.children ?? []) walk(c, depth + 1);
    if (depth > 0) onPath.set(n.name, onPath.get(n.name)! - 1);
  };
  walk(root, 0);
  return out;
}

export function formatValue(v: number, unit: string): string {
  switch (unit) {
    case 'nanoseconds': {
      if (v >= 3.6e12) return `${(v / 3.6e12).toFixed(2)} h`;
      if (v >= 6e10) return `${(v / 6e10).toFixed(2)} min`;
      if (v >= 1e9) return `${(v / 1e9).toFixed(2)} s`;
      if (v >= 1e6) return `${(v / 1e6).toFixed(2)} ms`;
      if (v >= 1e3) return `${(v / 1e3).toFixed(2)} µs`;
      return `${v} ns`;
    }
    case 'bytes': {
      const units = ['B', 'KiB', 'MiB', 'GiB', 'TiB'];
      let i = 0;
      let x = v;
      while (x >= 1024 && i < units.length - 1) {
        x /= 1024;
        i++;
      }
      return `${i === 0 ? x : x.toFixed(2)} ${units[i]}`;
    }
    case 'cores':
      return `${v.toFixed(2)} cores`;
    case 'threads':
      return `${v.toFixed(2)} threads`;
    case 'share':
      return formatPercent(v);
    default:
      return Number.isInteger(v) ? v.toLocaleString('en-US') : v.toFixed(3);
  }
}

export function formatPercent(f: number): string {
  const p = f * 100;
  if (p === 0) return '0%';
  if (p < 0.01) return '<0.01%';
  return `${p < 10 ? p.toFixed(2) : p.toFixed(1)}%`;
}

// foldedNote tells how a flame graph was folded to its node limit (the
// API's `folded`: how many [other] nodes it holds), or '' when every node
// is shown.
export function foldedNote(folded: number | undefined): string {
  const n = folded ?? 0;
  if (n <= 0) return '';
  return `Lighter nodes are summed into ${n.toLocaleString('en-US')} ${OTHER_NODE} ${n === 1 ? 'node' : 'nodes'} (exact values).`;
}
