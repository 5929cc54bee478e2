// Time ranges as the date picker speaks them ("now-1h", "now/d", ISO dates),
// resolved once per refresh to absolute RFC 3339 so every request of one view
// covers exactly the same window.

const unitMs: Record<string, number> = {
  s: 1000,
  m: 60_000,
  h: 3_600_000,
  d: 86_400_000,
  w: 7 * 86_400_000,
};

// parseDateMath resolves expr at now; roundUp picks the end of a rounded unit
// (so "now/d" as an end means the end of today). Returns NaN when it cannot parse.
export function parseDateMath(expr: string, now: number, roundUp = false): number {
  const s = expr.trim();
  if (!s.startsWith('now')) {
    const t = Date.parse(s);
    return t;
  }
  let t = now;
  let rest = s.slice(3);
  const re = /^([+-])(\d+)([smhdwMy])|^\/([smhdwMy])/;
  while (rest.length > 0) {
    const m = re.exec(rest);
    if (!m) return NaN;
    rest = rest.slice(m[0].length);
    if (m[4]) {
      t = roundTo(t, m[4], roundUp);
      continue;
    }
    const n = Number(m[2]) * (m[1] === '-' ? -1 : 1);
    const u = m[3];
    if (u === 'M' || u === 'y') {
      const d = new Date(t);
      if (u === 'M') d.setUTCMonth(d.getUTCMonth() + n);
      else d.setUTCFullYear(d.getUTCFullYear() + n);
      t = d.getTime();
    } else {
      t += n * unitMs[u];
    }
  }
  return t;
}

function roundTo(t: number, unit: string, up: boolean): number {
  const d = new Date(t);
  switch (unit) {
    case 'y':
      d.setMonth(0, 1);
      d.setHours(0, 0, 0, 0);
      if (up) d.setFullYear(d.getFullYear() + 1);
      break;
    case 'M':
      d.setDate(1);
      d.setHours(0, 0, 0, 0);
      if (up) d.setMonth(d.getMonth() + 1);
      break;
    case 'w':
      d.setDate(d.getDate() - d.getDay());
      d.setHours(0, 0, 0, 0);
      if (up) d.setDate(d.getDate() + 7);
      break;
    case 'd':
      d.setHours(0, 0, 0, 0);
      if (up) d.setDate(d.getDate() + 1);
      break;
    default: {
      const ms = unitMs[unit];
      const r = Math.floor(t / ms) * ms;
      return up ? r + ms - 1 : r;
    }
  }
  return up ? d.getTime() - 1 : d.getTime();
}

export interface TimeRange {
  start: string;
  end: string;
}

export interface Resolved {
  from: string;
  to: string;
  fromMs: number;
  toMs: number;
}

export function resolve(r: TimeRange, now = Date.now()): Resolved | Error {
  const fromMs = parseDateMath(r.start, now);
  const toMs = parseDateMath(r.end, now, true);
  if (Number.isNaN(fromMs)) return new Error(`cannot read the start of the time range "${r.start}"`);
  if (Number.isNaN(toMs)) return new Error(`cannot read the end of the time range "${r.end}"`);
  if (fromMs >= toMs) return new Error('the time range ends before it starts: pick an end after the start');
  return { from: new Date(fromMs).toISOString(), to: new Date(toMs).toISOString(), fromMs, toMs };
}

export function formatDuration(ms: number): string {
  const s = ms / 1000;
  if (s < 120) return `${Math.round(s)}s`;
  if (s < 7200) return `${Math.round(s / 60)}m`;
  if (s < 172800) return `${Math.round(s / 3600)}h`;
  return `${Math.round(s / 86400)}d`;
}
