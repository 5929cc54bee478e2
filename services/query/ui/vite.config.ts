import { defineConfig, type Plugin } from 'vite';

// `npm run dev` proxies /api to a running stackstream-query
// (STACKSTREAM_UI_API, default http://127.0.0.1:8080); with
// STACKSTREAM_UI_MOCK=1 it (and `vite preview`) answers from mock/ instead. The mock
// is server middleware only: it never reaches the build.
const api = process.env.STACKSTREAM_UI_API ?? 'http://127.0.0.1:8080';
const useMock = process.env.STACKSTREAM_UI_MOCK === '1';

function mockApi(): Plugin {
  return {
    name: 'stackstream-mock-api',
    async configureServer(server) {
      server.middlewares.use(await mockMiddleware());
    },
    async configurePreviewServer(server) {
      server.middlewares.use(await mockMiddleware());
    },
  };
}

async function mockMiddleware() {
  const { handle } = await import('./mock/mock.mjs');
  return (req: import('node:http').IncomingMessage, res: import('node:http').ServerResponse, next: () => void) => {
    if (!req.url?.startsWith('/api/v1/')) return next();
    const url = new URL(req.url, 'http://localhost');
    const { status, body, type } = handle(url.pathname, url.searchParams);
    res.statusCode = status;
    res.setHeader('Content-Type', type ?? 'application/json');
    res.end(typeof body === 'string' ? body : JSON.stringify(body));
  };
}

export default defineConfig({
  base: '/',
  // Some OUI dependencies still read Node's `global`.
  define: { global: 'globalThis' },
  plugins: useMock ? [mockApi()] : [],
  oxc: { jsx: { runtime: 'automatic' } },
  server: useMock ? {} : { proxy: { '/api': api } },
  build: {
    outDir: 'dist',
    emptyOutDir: true,
    sourcemap: false,
    chunkSizeWarningLimit: 2000,
    assetsInlineLimit: 0,
  },
});
