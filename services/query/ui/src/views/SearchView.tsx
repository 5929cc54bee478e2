// Keyword search over functions, services, hosts and label values. Picking a
// function shows its trend and the flame graph focused on it; picking a
// service, host or label value narrows the selector to it.

import { useMemo, useState } from 'react';
import {
  EuiBadge, EuiBasicTable, EuiFieldSearch, EuiFlexGroup, EuiFlexItem, EuiPanel, EuiSpacer, EuiTitle, EuiButtonEmpty, EuiText,
} from '@opensearch-project/oui';
import type { Api, FlameResponse, SearchResponse, SearchResult, SeriesResponse } from '../api';
import { functionTrend, trendIsEmpty } from '../trend';
import type { Resolved } from '../time';
import { useLoad } from '../useApi';
import { Panel } from './Status';
import { TimeChart } from './TimeChart';
import { FlameGraph } from '../flame/FlameGraph';
import { formatPercent, layoutTree, matcher } from '../flame/tree';

export interface SearchProps {
  api: Api;
  type: string;
  query: string;
  range: Resolved;
  onZoom: (fromMs: number, toMs: number) => void;
  onSelector: (selector: string) => void;
  onShowInProfile: (fn: string) => void;
}

export function SearchView({ api, type, query, range, onZoom, onSelector, onShowInProfile }: SearchProps) {
  const [q, setQ] = useState('');
  const [submitted, setSubmitted] = useState('');
  const [picked, setPicked] = useState<string | null>(null);

  const results = useLoad<SearchResponse>(
    submitted ? (s) => api.search({ q: submitted, from: range.from, to: range.to }, s) : null,
    [api, submitted, range],
  );
  const trend = useLoad<SeriesResponse>(
    picked ? (s) => functionTrend(api, type, query, range, picked, s) : null,
    [api, type, query, range, picked],
  );
  const flame = useLoad<FlameResponse>(
    picked ? (s) => api.flamegraph({ type, query, from: range.from, to: range.to }, s) : null,
    [api, type, query, range, picked],
  );
  const layout = useMemo(() => (flame.data ? layoutTree(flame.data.root) : null), [flame.data]);
  const match = useMemo(() => matcher(picked ?? ''), [picked]);

  const pick = (r: SearchResult) => {
    if (r.kind === 'function') {
      setPicked(r.name);
      return;
    }
    const label = r.kind === 'label' ? r.label! : r.kind;
    onSelector(`{${label}="${r.name.replace(/["\\]/g, '\\$&')}"}`);
  };

  const columns = [
    { field: 'kind', name: 'Kind', width: '110px', render: (k: string, r: SearchResult) => <EuiBadge color={kindColor(k)}>{k === 'label' ? r.label : k}</EuiBadge> },
    {
      field: 'name', name: 'Name',
      render: (n: string, r: SearchResult) => (
        <EuiButtonEmpty size="xs" flush="left" onClick={() => pick(r)} data-test-subj={`searchResult-${r.kind}`}>{n}</EuiButtonEmpty>
      ),
    },
    { field: 'share', name: 'CPU share', width: '100px', render: (v: number) => formatPercent(v) },
  ];

  return (
    <>
      <EuiFieldSearch fullWidth placeholder="Search functions, services, hosts and label values (Enter)" value={q}
        onChange={(e) => setQ(e.target.value)} onSearch={(v) => { setSubmitted(v.trim()); setPicked(null); }}
        isClearable data-test-subj="keywordSearch" />
      <EuiSpacer size="m" />
      <EuiFlexGroup gutterSize="m" alignItems="flexStart">
        <EuiFlexItem grow={2} style={{ minWidth: 0 }}>
          <EuiPanel paddingSize="s">
            <EuiTitle size="xxs"><h3>Results</h3></EuiTitle>
            {!submitted ? (
              <EuiText size="s" color="subdued"><p>Type a keyword such as a function name, a service or a host, then press Enter.</p></EuiText>
            ) : (
              <Panel state={results} testId="search" empty={`Nothing matches "${submitted}" in this range`} isEmpty={(d) => !d.results?.length}>
                {(d) => <EuiBasicTable<SearchResult> items={d.results} columns={columns} compressed data-test-subj="searchResults" />}
              </Panel>
            )}
          </EuiPanel>
        </EuiFlexItem>
        <EuiFlexItem grow={3} style={{ minWidth: 0 }}>
          {picked && (
            <EuiPanel paddingSize="s" data-test-subj="functionPanel">
              <EuiFlexGroup alignItems="center" responsive={false}>
                <EuiFlexItem><EuiTitle size="xxs"><h3>Trend of {picked}</h3></EuiTitle></EuiFlexItem>
                <EuiFlexItem grow={false}>
                  <EuiButtonEmpty size="xs" iconType="visArea" onClick={() => onShowInProfile(picked)} data-test-subj="showInProfile">
                    Open in profile view
                  </EuiButtonEmpty>
                </EuiFlexItem>
              </EuiFlexGroup>
              <Panel state={trend} testId="trend" empty="No samples of this function in the range" isEmpty={trendIsEmpty}>
                {(d) => <TimeChart data={d} fromMs={range.fromMs} toMs={range.toMs} height={160} testId="trend-chart" onZoom={onZoom} />}
              </Panel>
              <EuiSpacer size="s" />
              <Panel state={flame} testId="searchFlame" empty="No profiles in this range" isEmpty={(d) => !d.total}>
                {(d) => <FlameGraph layout={layout!} unit={d.unit} match={match} focusName={picked} testId="search-flamegraph" />}
              </Panel>
            </EuiPanel>
          )}
        </EuiFlexItem>
      </EuiFlexGroup>
    </>
  );
}

function kindColor(k: string): string {
  switch (k) {
    case 'function': return 'primary';
    case 'service': return 'accent';
    case 'host': return 'warning';
    default: return 'hollow';
  }
}
