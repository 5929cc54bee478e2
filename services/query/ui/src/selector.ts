// Completion in the selector bar ({service="checkout",host=~"web-.*"}): what
// is being typed at the cursor, and the text after picking a suggestion.
// Pure functions, unit-tested in tests/unit.

export interface Completion {
  kind: 'label' | 'value';
  label: string; // the label whose name or value is being typed
  prefix: string;
  start: number; // where the replaced text starts
}

// completionAt says what is being typed at the cursor.
export function completionAt(text: string, cursor: number): Completion | null {
  const before = text.slice(0, cursor);
  const open = Math.max(before.lastIndexOf('{'), before.lastIndexOf(','));
  if (open < 0) {
    return before.trim() === '' ? { kind: 'label', label: '', prefix: '', start: cursor } : null;
  }
  const seg = before.slice(open + 1);
  let m = /^\s*([A-Za-z_][\w.]*)?$/.exec(seg);
  if (m) {
    const prefix = m[1] ?? '';
    return { kind: 'label', label: prefix, prefix, start: cursor - prefix.length };
  }
  m = /^\s*([A-Za-z_][\w.]*)\s*(=~|!=|!~|=)\s*"([^"]*)$/.exec(seg);
  if (m) return { kind: 'value', label: m[1], prefix: m[3], start: cursor - m[3].length };
  return null;
}

// applyCompletion inserts choice and returns the new text and cursor.
export function applyCompletion(text: string, cursor: number, c: Completion, choice: string): [string, number] {
  let head = text.slice(0, c.start);
  let tail = text.slice(cursor);
  if (c.kind === 'label') {
    if (!head.includes('{')) head = head.trimEnd() + '{';
    const ins = `${choice}="`;
    if (!tail.includes('}')) tail = '"}' + tail;
    else if (!tail.startsWith('"')) tail = '"' + tail;
    return [head + ins + tail, head.length + ins.length];
  }
  const ins = choice.replace(/["\\]/g, '\\$&');
  if (tail.startsWith('"')) tail = tail.slice(1);
  const rest = tail.includes('}') ? tail : '}' + tail;
  const out = head + ins + '"' + rest;
  return [out, head.length + ins.length + 1];
}

// VALUE_SUGGESTIONS bounds the values asked for and listed per keystroke.
export const VALUE_SUGGESTIONS = 50;

// valuesQuery is the selector asking /labels/{label}/values for the values
// starting with prefix (any case), so completion finds any of thousands of
// hosts without loading them all; '' when every value is wanted.
export function valuesQuery(label: string, prefix: string): string {
  if (!prefix) return '';
  const p = prefix.slice(0, 100).replace(/[\\.+*?()|[\]{}^$]/g, '\\$&');
  const re = `(?i)${p}.*`;
  return `{${label}=~"${re.replace(/["\\]/g, '\\$&')}"}`;
}
