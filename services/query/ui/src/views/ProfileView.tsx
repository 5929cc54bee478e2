// The main page: CPU and memory over time (for off-CPU: CPU, off-CPU and
// their sum, wall-clock time), the flame graph of the selection with its
// top-functions table, and the sandwich view of one function.

import { useMemo, useState } from 'react';
import {
  EuiBasicTable, EuiButton, EuiButtonGroup, EuiFieldSearch, EuiFlexGroup, EuiFlexItem, EuiPanel,
  EuiSpacer, EuiSwitch, EuiTitle, EuiText, EuiButtonEmpty, EuiCallOut, EuiSelect,
} from '@opensearch-project/oui';
import { NODE_CHOICES, TOP_SERIES } from '../api';
import type { Api, FlameResponse, SandwichResponse, TopFunction, TopResponse, SeriesResponse } from '../api';
import type { Resolved } from '../time';
import { useLoad } from '../useApi';
import { Panel, ErrorCallOut } from './Status';
import { TimeChart } from './TimeChart';
import { FlameGraph } from '../flame/FlameGraph';
import { foldedNote, formatPercent, formatValue, layoutTree, matcher } from '../flame/tree';
import { wallSeries } from '../series';

export interface ProfileProps {
  api: Api;
  type: string;
  query: string;
  range: Resolved;
  onZoom: (fromMs: number, toMs: number) => void;
  focusFunction: string | null;
  onFocusFunction: (name: string | null) => void;
  maxNodes: number | null; // null: the API's default
  onMaxNodes: (n: number | null) => void;
}

export function ProfileView({ api, type, query, range, onZoom, focusFunction, onFocusFunction, maxNodes, onMaxNodes }: ProfileProps) {
  const [groupBy, setGroupBy] = useState<'service' | 'host'>('service');
  const [icicle, setIcicle] = useState(true);
  const [search, setSearch] = useState('');
  const [downloadError, setDownloadError] = useState<unknown>(null);
  const common = { query, from: range.from, to: range.to };

  const cpu = useLoad<SeriesResponse>((s) => api.series({ ...common, type: 'cpu', group_by: groupBy, top: TOP_SERIES }, s), [api, query, range, groupBy]);
  const offcpu = type === 'offcpu';
  // Off-CPU replaces the memory chart with off-CPU time and wall-clock time.
  const mem = useLoad<SeriesResponse>((s) => api.series({ ...common, type: offcpu ? 'offcpu' : 'memory', group_by: groupBy, top: TOP_SERIES }, s), [api, query, range, groupBy, offcpu]);
  const wall = useMemo(
    () => (offcpu && cpu.data && mem.data && mem.data.type === 'offcpu' ? { ...mem, data: wallSeries(cpu.data, mem.data) } : null),
    [offcpu, cpu, mem],
  );
  const flame = useLoad<FlameResponse>((s) => api.flamegraph({ ...common, type, max_nodes: maxNodes ?? undefined }, s), [api, type, query, range, maxNodes]);
  const top = useLoad<TopResponse>((s) => api.top({ ...common, type, limit: 50 }, s), [api, type, query, range]);

  const layout = useMemo(() => (flame.data ? layoutTree(flame.data.root) : null), [flame.data]);
  const match = useMemo(() => matcher(search || focusFunction || ''), [search, focusFunction]);
  // The sandwich comes from the API: computed there from the whole merged
  // tree, its nodes are exact even where the flame graph folded them.
  const sw = useLoad<SandwichResponse>(
    focusFunction ? (s) => api.sandwich({ ...common, type, function: focusFunction }, s) : null,
    [api, type, query, range, focusFunction],
  );
  const swLayouts = useMemo(
    () => (sw.data ? { callers: layoutTree(sw.data.callers), callees: layoutTree(sw.data.callees) } : null),
    [sw.data],
  );

  const download = async () => {
    setDownloadError(null);
    try {
      const blob = await api.blob('pprof', { ...common, type });
      const a = document.createElement('a');
      a.href = URL.createObjectURL(blob);
      a.download = `stackstream-${type}.pb.gz`;
      a.click();
      setTimeout(() => URL.revokeObjectURL(a.href), 1000);
    } catch (e) {
      setDownloadError(e);
    }
  };

  const columns = [
    {
      field: 'name', name: 'Function', truncateText: true,
      render: (name: string) => (
        <EuiButtonEmpty size="xs" flush="left" onClick={() => onFocusFunction(name)} data-test-subj="topFunction">
          {name}
        </EuiButtonEmpty>
      ),
    },
    { field: 'self', name: 'Self', width: '90px', render: (v: number) => formatValue(v, top.data?.unit ?? '') },
    { field: 'self_share', name: 'Self %', width: '70px', render: (v: number) => formatPercent(v) },
    { field: 'total_share', name: 'Total %', width: '70px', render: (v: number) => formatPercent(v) },
  ];

  return (
    <>
      <EuiFlexGroup alignItems="center" gutterSize="m" responsive={false}>
        <EuiFlexItem grow={false}>
          <EuiButtonGroup legend="Group series by" idSelected={groupBy} buttonSize="compressed"
            options={[{ id: 'service', label: 'per service' }, { id: 'host', label: 'per host' }]}
            onChange={(id) => setGroupBy(id as 'service' | 'host')} data-test-subj="groupBy" />
        </EuiFlexItem>
        <EuiFlexItem grow={false}>
          <EuiText size="xs" color="subdued">Drag across a chart to zoom the time range.</EuiText>
        </EuiFlexItem>
      </EuiFlexGroup>
      <EuiSpacer size="s" />
      <EuiFlexGroup gutterSize="m">
        <EuiFlexItem>
          <EuiPanel paddingSize="s">
            <EuiTitle size="xxs"><h3>CPU (cores)</h3></EuiTitle>
            <Panel state={cpu} testId="cpuChart" empty="No CPU data in this range" isEmpty={(d) => !d.series?.length}>
              {(d) => <TimeChart data={d} fromMs={range.fromMs} toMs={range.toMs} testId="cpu-chart" onZoom={onZoom} groupBy={groupBy} />}
            </Panel>
          </EuiPanel>
        </EuiFlexItem>
        <EuiFlexItem>
          <EuiPanel paddingSize="s">
            {offcpu ? (
              <>
                <EuiTitle size="xxs"><h3>Off-CPU (threads blocked)</h3></EuiTitle>
                <Panel state={mem} testId="offcpuChart" empty="No off-CPU data in this range" isEmpty={(d) => !d.series?.length}>
                  {(d) => <TimeChart data={d} fromMs={range.fromMs} toMs={range.toMs} testId="offcpu-chart" onZoom={onZoom} groupBy={groupBy} />}
                </Panel>
              </>
            ) : (
              <>
                <EuiTitle size="xxs"><h3>Memory (resident)</h3></EuiTitle>
                <Panel state={mem} testId="memChart" empty="No memory data in this range" isEmpty={(d) => !d.series?.length}>
                  {(d) => <TimeChart data={d} fromMs={range.fromMs} toMs={range.toMs} testId="memory-chart" onZoom={onZoom} groupBy={groupBy} />}
                </Panel>
              </>
            )}
          </EuiPanel>
        </EuiFlexItem>
        {wall && (
          <EuiFlexItem>
            <EuiPanel paddingSize="s">
              <EuiTitle size="xxs"><h3>Wall clock (CPU + off-CPU, threads)</h3></EuiTitle>
              <Panel state={wall} testId="wallChart" empty="No data in this range" isEmpty={(d) => !d.series?.length}>
                {(d) => <TimeChart data={d} fromMs={range.fromMs} toMs={range.toMs} testId="wall-chart" onZoom={onZoom} groupBy={groupBy} />}
              </Panel>
            </EuiPanel>
          </EuiFlexItem>
        )}
      </EuiFlexGroup>
      <EuiSpacer size="m" />
      <EuiFlexGroup gutterSize="m" alignItems="flexStart">
        <EuiFlexItem grow={3} style={{ minWidth: 0 }}>
          <EuiPanel paddingSize="s">
            <EuiFlexGroup alignItems="center" gutterSize="m" responsive={false}>
              <EuiFlexItem grow={false}>
                <EuiTitle size="xxs"><h3>Flame graph ({type})</h3></EuiTitle>
              </EuiFlexItem>
              <EuiFlexItem>
                <EuiFieldSearch compressed fullWidth placeholder="Highlight functions (substring or /regex/)"
                  value={search} onChange={(e) => setSearch(e.target.value)} data-test-subj="flameSearch" />
              </EuiFlexItem>
              <EuiFlexItem grow={false}>
                <NodesSelect value={maxNodes} onChange={onMaxNodes} />
              </EuiFlexItem>
              <EuiFlexItem grow={false}>
                <EuiSwitch compressed label="Icicle" checked={icicle} onChange={(e) => setIcicle(e.target.checked)} data-test-subj="icicleToggle" />
              </EuiFlexItem>
              <EuiFlexItem grow={false}>
                <EuiButton size="s" iconType="download" onClick={download} data-test-subj="downloadPprof">pprof</EuiButton>
              </EuiFlexItem>
            </EuiFlexGroup>
            {downloadError != null && <ErrorCallOut error={downloadError} title="Cannot download the profile" />}
            {flame.data?.truncated && (
              <EuiCallOut size="s" color="warning" iconType="alert" title="This flame graph is truncated: the selection has more stacks than the per-request limit. Narrow the range or the selector for the full picture." />
            )}
            {flame.data && foldedNote(flame.data.folded) && (
              <EuiText size="xs" color="subdued" data-test-subj="flameFolded"><p>{foldedNote(flame.data.folded)} Grey in the graph; choose more nodes for more detail.</p></EuiText>
            )}
            <Panel state={flame} testId="flame" empty="No profiles in this range" isEmpty={(d) => !d.total}>
              {(d) => (
                <FlameGraph layout={layout!} unit={d.unit} match={match} icicle={icicle}
                  onSandwich={(n) => onFocusFunction(n)} />
              )}
            </Panel>
          </EuiPanel>
        </EuiFlexItem>
        <EuiFlexItem grow={2} style={{ minWidth: 0 }}>
          <EuiPanel paddingSize="s">
            <EuiTitle size="xxs"><h3>Top functions</h3></EuiTitle>
            <Panel state={top} testId="top" empty="No functions in this range" isEmpty={(d) => !d.functions?.length}>
              {(d) => (
                <EuiBasicTable<TopFunction> items={d.functions.slice(0, 25)} columns={columns} compressed
                  tableLayout="auto" data-test-subj="topTable"
                  rowProps={(f: TopFunction) => ({ className: f.name === focusFunction ? 'ss-row-selected' : '' })} />
              )}
            </Panel>
          </EuiPanel>
        </EuiFlexItem>
      </EuiFlexGroup>
      {focusFunction && (
        <>
          <EuiSpacer size="m" />
          <EuiPanel paddingSize="s" data-test-subj="sandwich">
            <EuiFlexGroup alignItems="center" responsive={false}>
              <EuiFlexItem>
                <EuiTitle size="xxs"><h3>Sandwich: {focusFunction}</h3></EuiTitle>
              </EuiFlexItem>
              <EuiFlexItem grow={false}>
                <EuiButtonEmpty size="xs" iconType="cross" onClick={() => onFocusFunction(null)} data-test-subj="closeSandwich">Close</EuiButtonEmpty>
              </EuiFlexItem>
            </EuiFlexGroup>
            <Panel state={sw} testId="sandwichPanel" empty={`${focusFunction} does not appear in this selection.`} isEmpty={(d) => d.callers.total === 0}>
              {(d) => swLayouts && (
                <>
                  <EuiText size="xs" color="subdued"><p>Callers (above)</p></EuiText>
                  <FlameGraph layout={swLayouts.callers} unit={d.unit} icicle={false} testId="sandwich-callers" />
                  <EuiText size="xs" color="subdued"><p>Callees (below)</p></EuiText>
                  <FlameGraph layout={swLayouts.callees} unit={d.unit} icicle testId="sandwich-callees" />
                </>
              )}
            </Panel>
          </EuiPanel>
        </>
      )}
    </>
  );
}

// NodesSelect picks the flame graph's node limit (max_nodes); a value set in
// the URL that is not one of the choices is offered as it is.
function NodesSelect({ value, onChange }: { value: number | null; onChange: (n: number | null) => void }) {
  const choices = value && !NODE_CHOICES.includes(value) ? [...NODE_CHOICES, value].sort((a, b) => a - b) : NODE_CHOICES;
  return (
    <EuiSelect compressed aria-label="Flame graph nodes" data-test-subj="maxNodes" value={value ? String(value) : ''}
      options={[{ value: '', text: 'default nodes' }, ...choices.map((n) => ({ value: String(n), text: `${n.toLocaleString('en-US')} nodes` }))]}
      onChange={(e) => onChange(e.target.value ? Number(e.target.value) : null)} />
  );
}
