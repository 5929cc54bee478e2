// SelectorBar edits a label selector ({service="checkout",host=~"web-.*"})
// with completion: label names from /labels where a name is expected, values
// from /labels/{name}/values inside quotes.

import { useEffect, useRef, useState } from 'react';
import { EuiFieldText, EuiIcon } from '@opensearch-project/oui';
import type { Api } from '../api';

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

export function SelectorBar({ api, value, onSubmit }: { api: Api; value: string; onSubmit: (v: string) => void }) {
  const [text, setText] = useState(value);
  const [labels, setLabels] = useState<string[]>([]);
  const [values, setValues] = useState<Record<string, string[]>>({});
  const [cursor, setCursor] = useState(0);
  const [open, setOpen] = useState(false);
  const [active, setActive] = useState(0);
  const inputRef = useRef<HTMLInputElement | null>(null);

  useEffect(() => setText(value), [value]);

  useEffect(() => {
    const ac = new AbortController();
    api.labels(ac.signal).then((r) => setLabels(r.labels ?? []), () => {});
    return () => ac.abort();
  }, [api]);

  const comp = open ? completionAt(text, cursor) : null;
  useEffect(() => {
    if (comp?.kind !== 'value' || values[comp.label]) return;
    const name = comp.label;
    api.labelValues(name).then(
      (r) => setValues((v) => ({ ...v, [name]: r.values ?? [] })),
      () => setValues((v) => ({ ...v, [name]: [] })),
    );
  }, [comp?.kind, comp?.label, api, values]);

  const pool = comp ? (comp.kind === 'label' ? labels : values[comp.label] ?? []) : [];
  const suggestions = comp
    ? pool.filter((s) => s.toLowerCase().startsWith(comp.prefix.toLowerCase())).slice(0, 12)
    : [];

  const choose = (s: string) => {
    if (!comp) return;
    const [t, c] = applyCompletion(text, cursor, comp, s);
    setText(t);
    setCursor(c);
    setActive(0);
    requestAnimationFrame(() => {
      inputRef.current?.focus();
      inputRef.current?.setSelectionRange(c, c);
    });
  };

  const onKeyDown = (e: React.KeyboardEvent<HTMLInputElement>) => {
    if (open && suggestions.length > 0) {
      if (e.key === 'ArrowDown') {
        setActive((a) => (a + 1) % suggestions.length);
        e.preventDefault();
        return;
      }
      if (e.key === 'ArrowUp') {
        setActive((a) => (a - 1 + suggestions.length) % suggestions.length);
        e.preventDefault();
        return;
      }
      if (e.key === 'Tab') {
        choose(suggestions[Math.min(active, suggestions.length - 1)]);
        e.preventDefault();
        return;
      }
    }
    if (e.key === 'Enter') {
      setOpen(false);
      onSubmit(text.trim());
    }
    if (e.key === 'Escape') setOpen(false);
  };

  return (
    <div className="ss-selector">
      <EuiFieldText
        inputRef={(el) => {
          inputRef.current = el;
        }}
        fullWidth
        compressed
        prepend={<EuiIcon type="filter" />}
        placeholder='{service="checkout",host=~"web-.*"}   (Enter to apply, Tab to complete)'
        value={text}
        data-test-subj="selectorInput"
        aria-label="Label selector"
        onChange={(e) => {
          setText(e.target.value);
          setCursor(e.target.selectionStart ?? e.target.value.length);
          setOpen(true);
          setActive(0);
        }}
        onKeyUp={(e) => {
          // Completion keys place the caret themselves (see choose).
          if (!['Tab', 'ArrowUp', 'ArrowDown', 'Enter', 'Escape'].includes(e.key)) {
            setCursor(e.currentTarget.selectionStart ?? 0);
          }
        }}
        onClick={(e) => {
          setCursor(e.currentTarget.selectionStart ?? 0);
          setOpen(true);
        }}
        onFocus={() => setOpen(true)}
        onBlur={() => setTimeout(() => setOpen(false), 150)}
        onKeyDown={onKeyDown}
      />
      {open && suggestions.length > 0 && (
        <ul className="ss-suggest" role="listbox" data-testid="selector-suggestions">
          {suggestions.map((s, i) => (
            <li key={s} role="option" aria-selected={i === active} className={i === active ? 'active' : ''}
              onMouseDown={(e) => {
                e.preventDefault();
                choose(s);
              }}>
              <span className="ss-suggest-kind">{comp!.kind === 'label' ? 'label' : comp!.label}</span> {s}
            </li>
          ))}
        </ul>
      )}
    </div>
  );
}
