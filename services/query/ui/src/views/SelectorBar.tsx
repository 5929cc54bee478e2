// SelectorBar edits a label selector ({service="checkout",host=~"web-.*"})
// with completion: label names from /labels where a name is expected, values
// from /labels/{name}/values inside quotes (those starting with what is
// typed, at most VALUE_SUGGESTIONS per request).

import { useEffect, useRef, useState } from 'react';
import { EuiCallOut, EuiFieldText, EuiIcon } from '@opensearch-project/oui';
import type { Api } from '../api';
import { VALUE_SUGGESTIONS, applyCompletion, completionAt, valuesQuery } from '../selector';

export function SelectorBar({ api, value, onSubmit, error }: {
  api: Api;
  value: string;
  onSubmit: (v: string) => void;
  error?: string | null;
}) {
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
  // Values are asked for as they are typed: the first VALUE_SUGGESTIONS
  // starting with the prefix (the API filters), so a label with thousands
  // of values (hosts) completes any of them. Keyed by label and prefix.
  const valueKey = comp?.kind === 'value' ? `${comp.label}\u0000${comp.prefix.toLowerCase()}` : '';
  useEffect(() => {
    if (!comp || comp.kind !== 'value' || values[valueKey]) return;
    const key = valueKey;
    const ac = new AbortController();
    const timer = setTimeout(() => {
      api.labelValues(comp.label, ac.signal, { query: valuesQuery(comp.label, comp.prefix), limit: VALUE_SUGGESTIONS }).then(
        (r) => setValues((v) => ({ ...v, [key]: r.values ?? [] })),
        () => {},
      );
    }, 150);
    return () => {
      clearTimeout(timer);
      ac.abort();
    };
  }, [valueKey, api, values]); // eslint-disable-line react-hooks/exhaustive-deps

  const pool = comp ? (comp.kind === 'label' ? labels : values[valueKey] ?? []) : [];
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
        isInvalid={!!error}
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
      {error && (
        <EuiCallOut size="s" color="danger" iconType="alert" title={error} data-test-subj="apiError" className="ss-selector-error" />
      )}
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
