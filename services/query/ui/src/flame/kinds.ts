// Frame kinds (schemas/record/frames.go): the language or runtime a frame
// belongs to. The API sends `kind` for every frame that is not native code;
// each kind has its own hue range, so Python under native under kernel reads
// at a glance, and frames within a kind vary in shade by package.

import { OTHER_NODE } from '../api.js';

export type FrameKind = 'native' | 'kernel' | 'python' | 'java' | 'js' | 'jit';

interface KindStyle {
  label: string;
  hue: number; // start of the kind's hue range
  spread: number; // width of the range
}

// Hues at least 25 degrees apart between kinds: orange native (amber for the
// Go runtime), steel-blue kernel, green Python, purple Java, pink JS, teal JIT.
const STYLES: Record<FrameKind, KindStyle> = {
  native: { label: 'Native', hue: 15, spread: 33 },
  kernel: { label: 'Kernel', hue: 205, spread: 12 },
  python: { label: 'Python', hue: 115, spread: 20 },
  java: { label: 'Java', hue: 268, spread: 16 },
  js: { label: 'JS', hue: 318, spread: 16 },
  jit: { label: 'JIT', hue: 168, spread: 10 },
};

export const KIND_ORDER: FrameKind[] = ['native', 'kernel', 'python', 'java', 'js', 'jit'];

// kindOf maps the API's kind (absent for native code) to a FrameKind; a kind
// this UI does not know yet is drawn as native rather than not at all.
export function kindOf(kind: string | undefined): FrameKind {
  return kind && kind in STYLES ? (kind as FrameKind) : 'native';
}

export function kindLabel(kind: FrameKind): string {
  return STYLES[kind].label;
}

function hash(s: string): number {
  let h = 2166136261;
  for (let i = 0; i < s.length; i++) h = Math.imul(h ^ s.charCodeAt(i), 16777619);
  return h >>> 0;
}

// Frames of one package share a hue, so a reader sees modules at a glance.
function packageOf(name: string): string {
  const paren = name.indexOf('(');
  const base = paren > 0 ? name.slice(0, paren) : name;
  const slash = base.lastIndexOf('/');
  const dot = base.indexOf('.', slash + 1);
  return dot > 0 ? base.slice(0, dot) : base;
}

// frameColor is the fill of a frame: its kind's hue range, the package
// choosing the hue within it and the name the lightness; dim (the ancestors
// of a zoomed frame) lowers the saturation.
export function frameColor(kind: FrameKind, name: string, dim: boolean): string {
  // The API's [other] nodes (nodes folded to max_nodes) are grey.
  if (name === OTHER_NODE) return dim ? 'hsl(220, 6%, 84%)' : 'hsl(220, 9%, 76%)';
  const s = STYLES[kind];
  let hue = s.hue + (hash(packageOf(name)) % s.spread);
  if (kind === 'native' && name.startsWith('runtime.')) hue = 50 + (hash(name) % 8);
  const light = 62 + ((hash(name) >> 3) % 12);
  return `hsl(${hue}, ${dim ? 40 : 75}%, ${light}%)`;
}

// kindSwatch is the legend's color of a kind: the middle of its range.
export function kindSwatch(kind: FrameKind): string {
  const s = STYLES[kind];
  return `hsl(${s.hue + Math.floor(s.spread / 2)}, 75%, 66%)`;
}

// kindHue is the range of hues frameColor gives a kind, for the tests.
export function kindHues(kind: FrameKind): [number, number] {
  const s = STYLES[kind];
  return kind === 'native' ? [s.hue, 58] : [s.hue, s.hue + s.spread - 1];
}
