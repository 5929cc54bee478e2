import { useEffect, useState } from 'react';

export interface Loadable<T> {
  loading: boolean;
  error: unknown;
  data: T | null;
}

// useLoad runs load whenever deps change, aborting the previous request, and
// reports loading, error and data. A null load leaves the state idle.
export function useLoad<T>(load: ((signal: AbortSignal) => Promise<T>) | null, deps: unknown[]): Loadable<T> {
  const [state, setState] = useState<Loadable<T>>({ loading: !!load, error: null, data: null });
  useEffect(() => {
    if (!load) {
      setState({ loading: false, error: null, data: null });
      return;
    }
    const ac = new AbortController();
    setState((s) => ({ loading: true, error: null, data: s.data }));
    load(ac.signal).then(
      (data) => !ac.signal.aborted && setState({ loading: false, error: null, data }),
      (error) => !ac.signal.aborted && setState({ loading: false, error, data: null }),
    );
    return () => ac.abort();
  }, deps);
  return state;
}
