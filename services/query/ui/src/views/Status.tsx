// Loading, empty and error states shared by every panel.

import type { ReactNode } from 'react';
import { EuiCallOut, EuiEmptyPrompt, EuiFlexGroup, EuiFlexItem, EuiLoadingChart, EuiText } from '@opensearch-project/oui';
import { ApiError, describeError } from '../api';
import type { Loadable } from '../useApi';

export function ErrorCallOut({ error, title = 'The query API returned an error' }: { error: unknown; title?: string }) {
  return (
    <EuiCallOut title={title} color="danger" iconType="alert" size="s" data-test-subj="apiError">
      <p>{describeError(error)}</p>
    </EuiCallOut>
  );
}

export function Panel<T>({ state, empty, isEmpty, children, testId }: {
  state: Loadable<T>;
  empty: string;
  isEmpty: (d: T) => boolean;
  children: (d: T) => ReactNode;
  testId: string;
}) {
  if (state.error instanceof ApiError && state.error.parameter === 'query') {
    // The selector bar shows this one error once; the panels only point at it.
    return (
      <EuiText size="s" color="danger" data-test-subj={`${testId}-selectorError`}>
        <p>The selector is not valid: see the message under it.</p>
      </EuiText>
    );
  }
  if (state.error) return <ErrorCallOut error={state.error} />;
  if (state.loading && !state.data) {
    return (
      <EuiFlexGroup justifyContent="center" alignItems="center" style={{ minHeight: 120 }} data-test-subj={`${testId}-loading`}>
        <EuiFlexItem grow={false}><EuiLoadingChart size="l" /></EuiFlexItem>
      </EuiFlexGroup>
    );
  }
  if (!state.data) return null;
  if (isEmpty(state.data)) {
    return (
      <EuiEmptyPrompt iconType="visLine" titleSize="xs" title={<h3>{empty}</h3>}
        body={<p>Widen the time range or relax the selector.</p>} data-test-subj={`${testId}-empty`} />
    );
  }
  return <div style={{ opacity: state.loading ? 0.6 : 1 }}>{children(state.data)}</div>;
}
