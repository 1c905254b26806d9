// Module hooks that let plain Node load zotbox.js: the WASI and `zot:host`
// imports, which only a component has, become stubs. The `zot:host` calls go
// to `globalThis.zotHost`, which a test sets to what the host would answer.

const stubs = {
  'wasi:cli/stdin@0.2.12':
    'export const getStdin = () => { throw new Error("no WASI stdin under node"); };',
  'wasi:cli/stdout@0.2.12':
    'export const getStdout = () => { throw new Error("no WASI stdout under node"); };',
  'wasi:cli/stderr@0.2.12':
    'export const getStderr = () => { throw new Error("no WASI stderr under node"); };',
  'zot:host/fs@0.1.0': ['read', 'write', 'list', 'stat']
    .map((f) => `export const ${f} = (...a) => globalThis.zotHost.fs.${f}(...a);`)
    .join('\n'),
  'zot:host/http@0.1.0': 'export const fetch = (...a) => globalThis.zotHost.http.fetch(...a);',
  'zot:host/shell@0.1.0': 'export const run = (...a) => globalThis.zotHost.shell.run(...a);',
};

export async function resolve(specifier, context, next) {
  if (Object.hasOwn(stubs, specifier)) {
    return {
      url: `data:text/javascript,${encodeURIComponent(stubs[specifier])}`,
      shortCircuit: true,
    };
  }
  return next(specifier, context);
}
