// Client for the query API (/api/v1, shapes in docs/UI.md and schemas/api).
// Every request goes through get(), which turns HTTP errors into ApiError with
// the server's readable message.

export type ProfileType = 'cpu' | 'memory' | 'heap' | 'alloc' | 'offcpu';

export interface SeriesResponse {
  type: string;
  unit: string;
  step_seconds: number;
  // Groups in the selection: the lines plus those summed in "other".
  total_series?: number;
  series: SeriesLine[];
}

// One line; "other" (no labels) is the sum of `folded` groups not shown.
export interface SeriesLine {
  labels: Record<string, string>;
  other?: boolean;
  folded?: number;
  points: [number, number][];
}

// TOP_SERIES is how many lines a chart asks for; the rest is one "other".
export const TOP_SERIES = 10;

export interface FlameNode {
  name: string;
  kind?: string; // kernel, python, java, js, jit; absent for native code
  self: number;
  total: number;
  children?: FlameNode[];
}

export interface FlameResponse {
  type: string;
  unit: string;
  total: number;
  truncated: boolean;
  // How many [other] nodes sum the nodes left out by max_nodes (their
  // values are exact); 0 when every node is shown.
  folded?: number;
  root: FlameNode;
}

// OTHER_NODE names a node summing its parent's children left out by max_nodes.
export const OTHER_NODE = '[other]';

// NODE_CHOICES are the flame graph sizes offered; the API's default
// (STACKSTREAM_QUERY_MAX_NODES) applies when none is chosen.
export const NODE_CHOICES = [1000, 5000, 20000, 100000];

// SandwichResponse is /api/v1/sandwich: the callers (a tree rooted at the
// function whose children are its callers) and callees of one function,
// from the whole merged tree.
export interface SandwichResponse {
  type: string;
  unit: string;
  total: number;
  truncated: boolean;
  callers: FlameNode;
  callees: FlameNode;
}

export interface TopFunction {
  name: string;
  self: number;
  total: number;
  self_share: number;
  total_share: number;
}

export interface TopResponse {
  type: string;
  unit: string;
  total: number;
  functions: TopFunction[];
}

export interface SearchResult {
  kind: 'function' | 'service' | 'host' | 'label';
  name: string;
  label?: string;
  share: number;
}

export interface SearchResponse {
  query: string;
  results: SearchResult[];
}

export interface DiffNode {
  name: string;
  kind?: string;
  base: number;
  compare: number;
  children?: DiffNode[];
}

export interface DiffResponse {
  type: string;
  truncated?: boolean;
  folded?: number; // [other] nodes, as in FlameResponse
  base_total: number;
  compare_total: number;
  root: DiffNode;
}

export interface ConfigResponse {
  auth: boolean;
  version?: string;
}

export class ApiError extends Error {
  constructor(
    message: string,
    readonly status: number,
    readonly parameter?: string,
  ) {
    super(message);
  }
}

export type Params = Record<string, string | number | undefined>;

export function queryString(params: Params): string {
  const q = new URLSearchParams();
  for (const [k, v] of Object.entries(params)) {
    if (v !== undefined && v !== '') q.set(k, String(v));
  }
  return q.toString();
}

// MAX_GET_URL is the longest URL sent as a GET; longer requests are POSTs.
export const MAX_GET_URL = 16 * 1024;

export class Api {
  constructor(
    private token: () => string,
    private base = '',
  ) {}

  url(path: string, params: Params = {}): string {
    const qs = queryString(params);
    return `${this.base}/api/v1/${path}${qs ? '?' + qs : ''}`;
  }

  private headers(): HeadersInit {
    const t = this.token();
    return t ? { Authorization: `Bearer ${t}` } : {};
  }

  // request is a GET, or a POST of the same parameters as a form when the
  // URL would pass the API's 32 KiB limit (a selector listing thousands of
  // hosts).
  private request(path: string, params: Params, signal?: AbortSignal): Promise<Response> {
    const url = this.url(path, params);
    if (url.length <= MAX_GET_URL) return fetch(url, { headers: this.headers(), signal });
    return fetch(this.url(path), {
      method: 'POST',
      headers: { ...this.headers(), 'Content-Type': 'application/x-www-form-urlencoded' },
      body: queryString(params),
      signal,
    });
  }

  async get<T>(path: string, params: Params = {}, signal?: AbortSignal): Promise<T> {
    let resp: Response;
    try {
      resp = await this.request(path, params, signal);
    } catch (e) {
      if ((e as Error).name === 'AbortError') throw e;
      throw new ApiError(`cannot reach the query API: ${(e as Error).message}`, 0);
    }
    if (!resp.ok) throw await errorOf(resp);
    return (await resp.json()) as T;
  }

  async blob(path: string, params: Params = {}): Promise<Blob> {
    const resp = await this.request(path, params);
    if (!resp.ok) throw await errorOf(resp);
    return resp.blob();
  }

  config = (signal?: AbortSignal) => this.get<ConfigResponse>('config', {}, signal);
  labels = (signal?: AbortSignal) => this.get<{ labels: string[] }>('labels', {}, signal);
  labelValues = (name: string, signal?: AbortSignal, p: Params = {}) =>
    this.get<{ label: string; values: string[] }>(`labels/${encodeURIComponent(name)}/values`, p, signal);
  series = (p: Params, signal?: AbortSignal) => this.get<SeriesResponse>('series', p, signal);
  flamegraph = (p: Params, signal?: AbortSignal) => this.get<FlameResponse>('flamegraph', p, signal);
  top = (p: Params, signal?: AbortSignal) => this.get<TopResponse>('top', p, signal);
  sandwich = (p: Params, signal?: AbortSignal) => this.get<SandwichResponse>('sandwich', p, signal);
  search = (p: Params, signal?: AbortSignal) => this.get<SearchResponse>('search', p, signal);
  diff = (p: Params, signal?: AbortSignal) => this.get<DiffResponse>('diff', p, signal);
}

async function errorOf(resp: Response): Promise<ApiError> {
  const text = await resp.text().catch(() => '');
  try {
    const body = JSON.parse(text) as { error?: string; parameter?: string };
    if (body.error) return new ApiError(body.error, resp.status, body.parameter);
  } catch {
    // not JSON: fall through to the status line
  }
  const detail = text.trim().slice(0, 200);
  return new ApiError(`HTTP ${resp.status} ${resp.statusText}${detail ? ': ' + detail : ''}`, resp.status);
}

export function describeError(e: unknown): string {
  if (e instanceof ApiError) {
    if (e.status === 401) return `${e.message} (set an API token in the header bar)`;
    return e.message;
  }
  return e instanceof Error ? e.message : String(e);
}
