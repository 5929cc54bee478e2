// Differential flame graph of two time ranges or two selections: red where
// the compare side spends a larger share than the base (slower), green where
// it spends less (faster).

import { useMemo, useState } from 'react';
import {
  EuiButton, EuiButtonGroup, EuiFieldText, EuiFlexGroup, EuiFlexItem, EuiFormRow, EuiPanel, EuiSpacer,
  EuiSuperDatePicker, EuiText, EuiTitle, EuiHealth,
} from '@opensearch-project/oui';
import type { Api, DiffResponse, Params } from '../api';
import { resolve, type Resolved, type TimeRange } from '../time';
import { useLoad } from '../useApi';
import { Panel, ErrorCallOut } from './Status';
import { FlameGraph } from '../flame/FlameGraph';
import { foldedNote, layoutDiff } from '../flame/tree';

export interface DiffProps {
  api: Api;
  type: string;
  query: string;
  range: Resolved;
}

type Mode = 'ranges' | 'selections';

export function DiffView({ api, type, query, range }: DiffProps) {
  const [mode, setMode] = useState<Mode>('ranges');
  const len = range.toMs - range.fromMs;
  const [baseRange, setBaseRange] = useState<TimeRange>({
    start: new Date(range.fromMs - len).toISOString(),
    end: new Date(range.fromMs).toISOString(),
  });
  const [baseSel, setBaseSel] = useState(query);
  const [compareSel, setCompareSel] = useState(query);
  const [params, setParams] = useState<Params | null>(null);
  const [formError, setFormError] = useState<string | null>(null);

  const run = () => {
    setFormError(null);
    if (mode === 'ranges') {
      const b = resolve(baseRange);
      if (b instanceof Error) {
        setFormError(b.message);
        return;
      }
      setParams({
        type, base: query, compare: query, from: range.from, to: range.to,
        base_from: b.from, base_to: b.to, compare_from: range.from, compare_to: range.to,
      });
    } else {
      setParams({ type, base: baseSel, compare: compareSel, from: range.from, to: range.to });
    }
  };

  const diff = useLoad<DiffResponse>(params ? (s) => api.diff(params, s) : null, [api, params]);
  const layout = useMemo(() => (diff.data ? layoutDiff(diff.data.root) : null), [diff.data]);

  return (
    <>
      <EuiFlexGroup alignItems="flexEnd" gutterSize="m" wrap>
        <EuiFlexItem grow={false}>
          <EuiFormRow label="Compare">
            <EuiButtonGroup legend="Diff mode" idSelected={mode} buttonSize="compressed"
              options={[{ id: 'ranges', label: 'Two ranges' }, { id: 'selections', label: 'Two selections' }]}
              onChange={(id) => setMode(id as Mode)} data-test-subj="diffMode" />
          </EuiFormRow>
        </EuiFlexItem>
        {mode === 'ranges' ? (
          <EuiFlexItem grow={false}>
            <EuiFormRow label="Base range (compare: the page's range)">
              <EuiSuperDatePicker compressed start={baseRange.start} end={baseRange.end} showUpdateButton={false}
                onTimeChange={({ start, end }) => setBaseRange({ start, end })} data-test-subj="diffBaseRange" />
            </EuiFormRow>
          </EuiFlexItem>
        ) : (
          <>
            <EuiFlexItem>
              <EuiFormRow label="Base selector" fullWidth>
                <EuiFieldText compressed fullWidth value={baseSel} onChange={(e) => setBaseSel(e.target.value)}
                  placeholder='{service="checkout"}' data-test-subj="diffBaseSelector" />
              </EuiFormRow>
            </EuiFlexItem>
            <EuiFlexItem>
              <EuiFormRow label="Compare selector" fullWidth>
                <EuiFieldText compressed fullWidth value={compareSel} onChange={(e) => setCompareSel(e.target.value)}
                  placeholder='{service="web"}' data-test-subj="diffCompareSelector" />
              </EuiFormRow>
            </EuiFlexItem>
          </>
        )}
        <EuiFlexItem grow={false}>
          <EuiButton size="s" fill iconType="merge" onClick={run} data-test-subj="runDiff">Compare</EuiButton>
        </EuiFlexItem>
      </EuiFlexGroup>
      <EuiSpacer size="m" />
      {formError && <ErrorCallOut error={new Error(formError)} title="Cannot compare" />}
      <EuiPanel paddingSize="s">
        <EuiFlexGroup alignItems="center" gutterSize="m" responsive={false}>
          <EuiFlexItem grow={false}><EuiTitle size="xxs"><h3>Differential flame graph</h3></EuiTitle></EuiFlexItem>
          <EuiFlexItem grow={false}><EuiHealth color="#e6463c">slower (larger share in compare)</EuiHealth></EuiFlexItem>
          <EuiFlexItem grow={false}><EuiHealth color="#28b478">faster (smaller share in compare)</EuiHealth></EuiFlexItem>
        </EuiFlexGroup>
        {!params ? (
          <EuiText size="s" color="subdued"><p>Choose what to compare, then press Compare.</p></EuiText>
        ) : (
          <Panel state={diff} testId="diff" empty="Neither side has profiles" isEmpty={(d) => !d.base_total && !d.compare_total}>
            {(d) => (
              <>
                <EuiText size="xs" color="subdued" data-test-subj="diffTotals">
                  <p>Base total {d.base_total.toLocaleString('en-US')} · compare total {d.compare_total.toLocaleString('en-US')} (widths and colors use each side's share of its own total)</p>
                </EuiText>
                {d.truncated && (
                  <EuiText size="xs" color="warning"><p>Truncated: the selections have more stacks than the per-request limit; narrow them for the full picture.</p></EuiText>
                )}
                {foldedNote(d.folded) && (
                  <EuiText size="xs" color="subdued" data-test-subj="diffFolded"><p>{foldedNote(d.folded)}</p></EuiText>
                )}
                <FlameGraph layout={layout!} unit="share" testId="diff-flamegraph" />
              </>
            )}
          </Panel>
        )}
      </EuiPanel>
    </>
  );
}
