// App holds the page state (profile type, selector, time range, tab) in the
// URL, so a view can be shared as a link, and wires the views to the API.

import { useCallback, useEffect, useMemo, useState } from 'react';
import {
  EuiFieldPassword, EuiFlexGroup, EuiFlexItem, EuiHeader, EuiHeaderSectionItem, EuiPage, EuiPageBody,
  EuiSelect, EuiSpacer, EuiSuperDatePicker, EuiTab, EuiTabs, EuiText, EuiTitle,
} from '@opensearch-project/oui';
import { Api, ApiError, describeError, type ConfigResponse } from './api';
import { resolve, type TimeRange } from './time';
import { SelectorBar } from './views/SelectorBar';
import { ProfileView } from './views/ProfileView';
import { SearchView } from './views/SearchView';
import { DiffView } from './views/DiffView';
import { ErrorCallOut } from './views/Status';

type Tab = 'profile' | 'search' | 'diff';
const TOKEN_KEY = 'stackstream.token';

const PRESETS = [
  { start: 'now-15m', end: 'now', label: 'Last 15 minutes' },
  { start: 'now-1h', end: 'now', label: 'Last 1 hour' },
  { start: 'now-6h', end: 'now', label: 'Last 6 hours' },
  { start: 'now-24h', end: 'now', label: 'Last 24 hours' },
  { start: 'now-7d', end: 'now', label: 'Last 7 days' },
  { start: 'now/d', end: 'now/d', label: 'Today' },
];

interface PageState {
  tab: Tab;
  type: string;
  query: string;
  start: string;
  end: string;
  fn: string | null;
  nodes: number | null; // the flame graph's max_nodes; null for the API's default
}

function readURL(): PageState {
  const p = new URLSearchParams(window.location.search);
  const tab = p.get('tab');
  return {
    tab: tab === 'search' || tab === 'diff' ? tab : 'profile',
    type: p.get('type') || 'cpu',
    query: p.get('query') || '',
    start: p.get('from') || 'now-1h',
    end: p.get('to') || 'now',
    fn: p.get('fn'),
    nodes: nodesOf(p.get('nodes')),
  };
}

// nodesOf reads the `nodes` URL parameter: a whole number from 1 to the
// API's 100000, else the API's default.
function nodesOf(v: string | null): number | null {
  const n = Number(v);
  return v && Number.isInteger(n) && n >= 1 && n <= 100000 ? n : null;
}

function writeURL(s: PageState) {
  const p = new URLSearchParams();
  if (s.tab !== 'profile') p.set('tab', s.tab);
  if (s.type !== 'cpu') p.set('type', s.type);
  if (s.query) p.set('query', s.query);
  if (s.start !== 'now-1h') p.set('from', s.start);
  if (s.end !== 'now') p.set('to', s.end);
  if (s.fn) p.set('fn', s.fn);
  if (s.nodes) p.set('nodes', String(s.nodes));
  const qs = p.toString();
  window.history.replaceState(null, '', window.location.pathname + (qs ? '?' + qs : ''));
}

export function App() {
  const [state, setState] = useState<PageState>(readURL);
  const [refresh, setRefresh] = useState(0);
  const [token, setToken] = useState(() => window.localStorage.getItem(TOKEN_KEY) ?? '');
  const [config, setConfig] = useState<ConfigResponse | null>(null);
  const api = useMemo(() => new Api(() => token), [token]);
  const update = useCallback((p: Partial<PageState>) => setState((s) => ({ ...s, ...p })), []);

  useEffect(() => writeURL(state), [state]);
  useEffect(() => {
    api.config().then(setConfig, () => setConfig(null));
  }, [api]);

  // Resolve relative times once per change or refresh (refresh is a
  // dependency on purpose), so every panel asks for the same window.
  const range = useMemo(() => resolve({ start: state.start, end: state.end }), [state.start, state.end, refresh]);

  // Check the selector once per change (a one-value label query), so a bad
  // selector is explained under the bar instead of in every panel.
  const [selectorError, setSelectorError] = useState<string | null>(null);
  useEffect(() => {
    setSelectorError(null);
    if (!state.query || range instanceof Error) return;
    const ac = new AbortController();
    api.labelValues('service', ac.signal, { query: state.query, from: range.from, to: range.to, limit: 1 }).catch((e) => {
      if (e instanceof ApiError && e.parameter === 'query') setSelectorError(describeError(e));
    });
    return () => ac.abort();
  }, [api, state.query, range]);

  const onZoom = useCallback((fromMs: number, toMs: number) => {
    update({ start: new Date(fromMs).toISOString(), end: new Date(toMs).toISOString() });
  }, [update]);

  const onTimeChange = ({ start, end }: TimeRange) => {
    update({ start, end });
    setRefresh((r) => r + 1);
  };

  return (
    <>
      <EuiHeader position="static">
        <EuiHeaderSectionItem border="right">
          <EuiTitle size="xs"><h1 style={{ padding: '0 12px' }}>stackstream</h1></EuiTitle>
        </EuiHeaderSectionItem>
        <EuiHeaderSectionItem>
          <EuiText size="xs" color="subdued" style={{ padding: '0 12px' }}>
            continuous profiling{config?.version ? ` · ${config.version}` : ''}
          </EuiText>
        </EuiHeaderSectionItem>
        {config?.auth && (
          <EuiHeaderSectionItem>
            <EuiFieldPassword compressed type="dual" placeholder="API token" value={token} aria-label="API token"
              data-test-subj="apiToken"
              onChange={(e) => {
                setToken(e.target.value);
                window.localStorage.setItem(TOKEN_KEY, e.target.value);
              }} />
          </EuiHeaderSectionItem>
        )}
      </EuiHeader>
      <EuiPage paddingSize="m">
        <EuiPageBody>
          <EuiFlexGroup gutterSize="s" alignItems="flexStart" wrap>
            <EuiFlexItem grow={false} style={{ width: 130 }}>
              <EuiSelect compressed aria-label="Profile type" value={state.type} data-test-subj="profileType"
                options={[
                  { value: 'cpu', text: 'CPU' }, { value: 'memory', text: 'Memory' },
                  { value: 'heap', text: 'Heap' }, { value: 'alloc', text: 'Allocations' },
                  { value: 'offcpu', text: 'Off-CPU' },
                ]}
                onChange={(e) => update({ type: e.target.value })} />
            </EuiFlexItem>
            <EuiFlexItem style={{ minWidth: 300 }}>
              <SelectorBar api={api} value={state.query} error={selectorError} onSubmit={(query) => update({ query })} />
            </EuiFlexItem>
            <EuiFlexItem grow={false}>
              <EuiSuperDatePicker compressed start={state.start} end={state.end} commonlyUsedRanges={PRESETS}
                onTimeChange={onTimeChange} onRefresh={() => setRefresh((r) => r + 1)} data-test-subj="timeRange" />
            </EuiFlexItem>
          </EuiFlexGroup>
          <EuiSpacer size="s" />
          <EuiTabs size="s">
            {(['profile', 'search', 'diff'] as Tab[]).map((t) => (
              <EuiTab key={t} isSelected={state.tab === t} onClick={() => update({ tab: t })} data-test-subj={`tab-${t}`}>
                {t === 'profile' ? 'Profile' : t === 'search' ? 'Search' : 'Diff'}
              </EuiTab>
            ))}
          </EuiTabs>
          <EuiSpacer size="m" />
          {range instanceof Error ? (
            <ErrorCallOut error={range} title="Invalid time range" />
          ) : state.tab === 'profile' ? (
            <ProfileView api={api} type={state.type} query={state.query} range={range} onZoom={onZoom}
              focusFunction={state.fn} onFocusFunction={(fn) => update({ fn })}
              maxNodes={state.nodes} onMaxNodes={(nodes) => update({ nodes })} />
          ) : state.tab === 'search' ? (
            <SearchView api={api} type={state.type} query={state.query} range={range} onZoom={onZoom}
              onSelector={(query) => update({ query, tab: 'profile' })}
              onShowInProfile={(fn) => update({ fn, tab: 'profile' })} />
          ) : (
            <DiffView api={api} type={state.type} query={state.query} range={range} />
          )}
        </EuiPageBody>
      </EuiPage>
    </>
  );
}
