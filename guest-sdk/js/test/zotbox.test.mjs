// Tests of zotbox.js under plain Node: frames in, frames out.
//
// Run: node --import ./register.mjs --test zotbox.test.mjs (in this folder;
// the Rust e2e test `langs::the_js_guest_library_passes_its_tests` runs it).

import assert from 'node:assert/strict';
import { test } from 'node:test';

import {
  CapabilityError,
  Extension,
  Level,
  Response,
  ToolOutput,
  Verdict,
  fs,
  parseInReadOrder,
  schema,
  validate,
} from '../zotbox.js';

const encoder = new TextEncoder();

/** Runs `extension` over `input` in chunks of `chunk` bytes; returns the
 * frames written and the log lines. */
function session(extension, input, chunk = 1 << 16) {
  const bytes = encoder.encode(input);
  let at = 0;
  const written = [];
  const log = [];
  extension.runWith(
    () => {
      if (at >= bytes.length) return null;
      const part = bytes.subarray(at, at + chunk);
      at += chunk;
      return part;
    },
    (line) => written.push(JSON.parse(line)),
    (line) => log.push(line),
  );
  return { written, log };
}

const lines = (...frames) =>
  frames.map((f) => (typeof f === 'string' ? f : JSON.stringify(f))).join('\n') + '\n';

/** An `event_intercept` of bash whose arguments are written as they are. */
const rawCheck = (id, args) =>
  `{"type":"event_intercept","id":"${id}","event":"tool_call","tool_name":"bash","tool_args":${args}}`;

/** The frames after the registration. */
function answers(extension, ...frames) {
  return session(extension, lines(...frames)).written.slice(extension.registration().length);
}

function weather() {
  return new Extension('weather', '1.0.0').tool(
    'weather',
    'the weather',
    schema.object(
      {
        city: schema.string('the city'),
        units: schema.oneOf(['celsius', 'fahrenheit']),
        days: schema.integer(),
        tags: schema.array(schema.string()),
      },
      ['city'],
    ),
    (ctx, { city }) => {
      ctx.notify(Level.info, `looking up ${city}`);
      return ToolOutput.text(`${city}: 1°C`);
    },
  );
}

test('a full extension says hello, registers, subscribes and is ready', () => {
  const extension = weather()
    .command('hi', 'say hi', () => 'hi')
    .interceptToolCall(() => Verdict.allow())
    .on('turn_end', () => {});
  const { written } = session(extension, '');
  assert.deepEqual(
    written.map((f) => f.type),
    ['hello', 'register_command', 'register_tool', 'subscribe', 'ready'],
  );
  assert.deepEqual(written[0], {
    type: 'hello',
    name: 'weather',
    version: '1.0.0',
    capabilities: ['commands', 'tools', 'events'],
  });
  assert.deepEqual(written[3], { type: 'subscribe', events: ['turn_end'], intercept: ['tool_call'] });
});

test('typed arguments reach the handler, its note first, whatever the chunking', () => {
  const input = lines({ type: 'tool_call', id: '1', name: 'weather', args: { city: 'Zürich' } });
  for (const chunk of [1, 3, 1 << 16]) {
    const { written } = session(weather(), input, chunk);
    assert.deepEqual(written.slice(-2), [
      { type: 'notify', level: 'info', message: 'looking up Zürich' },
      { type: 'tool_result', id: '1', content: [{ type: 'text', text: 'Zürich: 1°C' }] },
    ]);
  }
});

test('arguments that do not fit the schema never reach the handler', () => {
  const cases = [
    [undefined, 'missing field `city`'],
    [{}, 'missing field `city`'],
    [{ city: 3 }, '`city` must be a string'],
    [{ city: 'Oslo', units: 'kelvin' }, '`units` must be one of `celsius`, `fahrenheit`'],
    [{ city: 'Oslo', days: 1.5 }, '`days` must be an integer'],
    [{ city: 'Oslo', tags: ['a', 2] }, '`tags[1]` must be a string'],
    [[1], '`the arguments` must be an object'],
  ];
  for (const [args, problem] of cases) {
    const got = answers(weather(), { type: 'tool_call', id: '7', name: 'weather', args });
    assert.deepEqual(got, [
      {
        type: 'tool_result',
        id: '7',
        content: [{ type: 'text', text: `invalid arguments for tool \`weather\`: ${problem}` }],
        is_error: true,
      },
    ]);
  }
});

test('an unknown tool, a throwing handler and a Promise are error results', () => {
  const extension = new Extension('x', '1')
    .toolJson('boom', 'd', {}, () => {
      throw new Error('kaput');
    })
    .toolJson('later', 'd', {}, async () => 'never');
  const got = answers(
    extension,
    { type: 'tool_call', id: '1', name: 'nope' },
    { type: 'tool_call', id: '2', name: 'boom' },
    { type: 'tool_call', id: '3', name: 'later' },
  );
  assert.deepEqual(
    got.map((f) => [f.id, f.content[0].text, f.is_error]),
    [
      ['1', 'unknown tool `nope`', true],
      ['2', 'tool `boom`: kaput', true],
      ['3', 'tool `later`: handler returned a Promise; handlers run synchronously', true],
    ],
  );
});

test('each response kind has its frame', () => {
  const cases = [
    [Response.prompt('p'), { action: 'prompt', prompt: 'p' }],
    [Response.insert('i'), { action: 'insert', insert: 'i' }],
    [Response.display('d'), { action: 'display', display: 'd' }],
    [Response.noop(), { action: 'noop' }],
    [Response.error('e'), { action: 'noop', error: 'e' }],
    [Response.display('d').withError('e'), { action: 'display', display: 'd', error: 'e' }],
    [
      Response.openPanel({ id: 'p', title: 'Notes', lines: ['one'], footer: 'q' }),
      { action: 'open_panel', open_panel: { id: 'p', title: 'Notes', lines: ['one'], footer: 'q' } },
    ],
    ['plain', { action: 'display', display: 'plain' }],
  ];
  for (const [response, fields] of cases) {
    const extension = new Extension('x', '1').command('c', 'd', () => response);
    const got = answers(extension, { type: 'command_invoked', id: '9', name: 'c', args: 'x' });
    assert.deepEqual(got, [{ type: 'command_response', id: '9', ...fields }]);
  }
});

test('the first block wins and rewrites chain', () => {
  const extension = new Extension('g', '1')
    .interceptToolCall((ctx, tool, args) => Verdict.rewrite({ ...args, n: (args.n ?? 0) + 1 }))
    .interceptToolCall((ctx, tool, args) => Verdict.rewrite({ ...args, n: args.n * 10 }))
    .interceptToolCall((ctx, tool, args) =>
      String(args.command).includes('rm') ? Verdict.block('no rm') : Verdict.allow(),
    );
  const ask = { type: 'event_intercept', event: 'tool_call', tool_name: 'bash' };
  const got = answers(
    extension,
    { ...ask, id: '1', tool_args: { command: 'ls' } },
    { ...ask, id: '2', tool_args: { command: 'rm -rf /' } },
  );
  assert.deepEqual(got, [
    { type: 'event_intercept_response', id: '1', block: false, modified_args: { command: 'ls', n: 10 } },
    { type: 'event_intercept_response', id: '2', block: true, reason: 'no rm' },
  ]);
});

test('turn_start and assistant_message intercepts', () => {
  const extension = new Extension('g', '1')
    .interceptTurnStart((ctx, step) => (step > 3 ? Verdict.block('enough') : Verdict.allow()))
    .interceptAssistantMessage((ctx, text) => Verdict.replaceText(text.replace('secret', '[redacted]')));
  const got = answers(
    extension,
    { type: 'event_intercept', id: '1', event: 'turn_start', step: 2 },
    { type: 'event_intercept', id: '2', event: 'turn_start', step: 4 },
    { type: 'event_intercept', id: '3', event: 'assistant_message', text: 'the secret is 42' },
  );
  assert.deepEqual(got, [
    { type: 'event_intercept_response', id: '1', block: false },
    { type: 'event_intercept_response', id: '2', block: true, reason: 'enough' },
    { type: 'event_intercept_response', id: '3', block: false, replace_text: 'the [redacted] is 42' },
  ]);
});

test("a guard of zot's own tools sees what they will read", () => {
  // zot's tools read keys in any case, the last one winning (Go's
  // encoding/json); natively zot hands the guard the model's spelling.
  const extension = new Extension('g', '1').interceptToolCall((ctx, tool, args) =>
    String(args.command).includes('rm -rf') ? Verdict.block('no') : Verdict.allow(),
  );
  const check = (id, tool, args) => ({ type: 'event_intercept', id, event: 'tool_call', tool_name: tool, tool_args: args });
  const got = answers(
    extension,
    check('1', 'bash', { Command: 'rm -rf /' }),
    check('2', 'bash', { command: 'ls', COMMAND: 'rm -rf /' }),
    check('3', 'bash', { COMMAND: 'rm -rf /', command: 'ls' }),
    // An extension's tool may read its keys by their case.
    check('4', 'deploy', { command: 'ls', COMMAND: 'rm -rf /' }),
    // A key written again after another spelling is the last one
    // (`JSON.parse` keeps it where it first stood), both ways round.
    rawCheck('5', '{"command":"ls","COMMAND":"ls","command":"rm -rf /"}'),
    rawCheck('6', '{"command":"rm -rf /","COMMAND":"rm -rf /","command":"ls"}'),
    // A `null` after the value leaves it: Go ignores it for a string.
    rawCheck('7', '{"command":"rm -rf /","command":null}'),
    rawCheck('8', '{"command":"rm -rf /","COMMAND":null}'),
    rawCheck('9', '{"command":null,"Command":"rm -rf /","command":null}'),
    // zot's other shell tool reads its keys the same way.
    check('10', 'powershell', { COMMAND: 'rm -rf /' }),
  );
  assert.deepEqual(got, [
    { type: 'event_intercept_response', id: '1', block: true, reason: 'no' },
    { type: 'event_intercept_response', id: '2', block: true, reason: 'no' },
    { type: 'event_intercept_response', id: '3', block: false },
    { type: 'event_intercept_response', id: '4', block: false },
    { type: 'event_intercept_response', id: '5', block: true, reason: 'no' },
    { type: 'event_intercept_response', id: '6', block: false },
    { type: 'event_intercept_response', id: '7', block: true, reason: 'no' },
    { type: 'event_intercept_response', id: '8', block: true, reason: 'no' },
    { type: 'event_intercept_response', id: '9', block: true, reason: 'no' },
    { type: 'event_intercept_response', id: '10', block: true, reason: 'no' },
  ]);
});

test('an answer JSON cannot hold is answered as a failure, and the session goes on', () => {
  // A handler's rewrite holding a BigInt made `JSON.stringify` throw out of
  // the session: the extension ended, a guard among them.
  const extension = new Extension('g', '1')
    .tool('echo', 'echo', schema.object({}), () => ToolOutput.text('ok'))
    .interceptToolCall(() => Verdict.rewrite({ command: 10n }));
  const got = answers(
    extension,
    rawCheck('1', '{"command":"ls"}'),
    { type: 'tool_call', id: '2', name: 'echo', args: {} },
  );
  // (The engine's own words for the BigInt differ between engines.)
  assert.ok(got[0].reason.startsWith("the extension's answer could not be written as JSON ("), got[0].reason);
  assert.deepEqual(got, [
    { type: 'event_intercept_response', id: '1', block: true, reason: got[0].reason },
    { type: 'tool_result', id: '2', content: [{ type: 'text', text: 'ok' }] },
  ]);
});

test('a line read in the order its keys were written parses as JSON.parse does, or not at all', () => {
  for (const text of ['[1, 2.5e-3, {"a": [true, false, null]}, "\\u00e9\\n"]', '{}', ' [] ', '"x"', '-0']) {
    assert.deepEqual(parseInReadOrder(text), JSON.parse(text), text);
  }
  assert.deepEqual(Object.keys(parseInReadOrder('{"x":1,"y":2,"x":3}')), ['y', 'x']);
  assert.deepEqual(parseInReadOrder('{"x":1,"y":2,"x":3}'), { y: 2, x: 3 });
  // A `null` is no writing where a value was written (Go keeps the value).
  assert.deepEqual(Object.keys(parseInReadOrder('{"x":1,"y":2,"x":null}')), ['x', 'y']);
  assert.deepEqual(parseInReadOrder('{"x":null,"y":2,"x":3,"x":null}'), { y: 2, x: 3 });
  assert.deepEqual(parseInReadOrder('{"x":null,"x":null}'), { x: null });
  // `__proto__` is a field, as with `JSON.parse`, never the prototype.
  const own = parseInReadOrder('{"__proto__":{"polluted":1}}');
  assert.equal(Object.getPrototypeOf(own), Object.prototype);
  assert.deepEqual(Object.keys(own), ['__proto__']);
  for (const bad of ['{"a":1,}', '{"a" 1}', 'tru', '"x" y', '[1 2]', '"\\x"', '[', '01']) {
    assert.throws(() => parseInReadOrder(bad), SyntaxError, bad);
  }
  assert.throws(() => parseInReadOrder('['.repeat(200) + ']'.repeat(200)), /nested deeper than 128/);
});

test("validate reads an object's own fields, not its prototype's", () => {
  const closed = { type: 'object', properties: { text: { type: 'string' } }, additionalProperties: false };
  for (const field of ['constructor', 'toString', '__proto__']) {
    const args = JSON.parse(`{"${field}": 1}`);
    assert.equal(validate(closed, args), `unknown field \`${field}\``);
  }
  const needs = { type: 'object', required: ['valueOf'] };
  assert.equal(validate(needs, {}), 'missing field `valueOf`');
  assert.equal(validate(needs, { valueOf: 1 }), null);
});

test('a lone surrogate is written as U+FFFD, never as an escape a reader refuses', () => {
  const extension = new Extension('g', '1').interceptToolCall((ctx, tool, args) =>
    Verdict.block(`refused: ${args.command.slice(0, 6)}`),
  );
  const got = answers(extension, {
    type: 'event_intercept', id: '1', event: 'tool_call', tool_name: 'bash',
    tool_args: { command: 'echo \u{1F600}' },
  });
  assert.deepEqual(got, [
    { type: 'event_intercept_response', id: '1', block: true, reason: 'refused: echo \ufffd' },
  ]);
});

test('a throwing guard blocks, and a verdict out of place is ignored', () => {
  // A guard that cannot decide refuses: the call it choked on is the one to stop.
  const extension = new Extension('g', '1')
    .interceptToolCall(() => Verdict.replaceText('x'))
    .interceptToolCall(() => {
      throw new Error('oops');
    });
  const { written, log } = session(
    extension,
    lines({ type: 'event_intercept', id: '1', event: 'tool_call', tool_name: 't' }),
  );
  assert.deepEqual(written.at(-1), {
    type: 'event_intercept_response', id: '1', block: true,
    reason: 'the `tool_call` interceptor failed (oops); blocked to be safe',
  });
  assert.deepEqual(log, [
    'g: ignored a `replace_text` verdict on a `tool_call` intercept, which does not allow it',
    'g: `tool_call` interceptor failed, blocking: oops',
  ]);
  // Another kind's interceptor that throws still allows.
  const turns = new Extension('g', '1').interceptTurnStart(() => {
    throw new Error('oops');
  });
  const turn = session(turns, lines({ type: 'event_intercept', id: '2', event: 'turn_start', step: 1 }));
  assert.deepEqual(turn.written.at(-1), { type: 'event_intercept_response', id: '2', block: false });
});

test('a check that cannot be read is answered with a block', () => {
  const extension = new Extension('g', '1').interceptToolCall(() => Verdict.allow());
  const got = answers(
    extension,
    '{"type":"event_intercept","id":"k1","event":"tool_call","tool_args":{"command":"rm -rf /"',
  );
  assert.equal(got.length, 1);
  assert.equal(got[0].id, 'k1');
  assert.equal(got[0].block, true);
  assert.match(got[0].reason, /^extension `g` could not read the request: not JSON: /);
});

test('a frame over the cap is answered and the next one read', () => {
  const extension = new Extension('g', '1').interceptToolCall(() => Verdict.allow());
  const huge = `{"type":"event_intercept","id":"big","event":"tool_call","tool_args":{"x":"${'a'.repeat(
    4 * 1024 * 1024,
  )}"}}`;
  const next = { type: 'event_intercept', id: 'next', event: 'tool_call', tool_name: 't' };
  for (const chunk of [4096, 1 << 16, 1 << 23]) {
    const { written } = session(extension, lines(huge, next), chunk);
    const got = written.slice(extension.registration().length);
    assert.deepEqual(
      got.map((f) => [f.id, f.block]),
      [
        ['big', true],
        ['next', false],
      ],
    );
    assert.equal(
      got[0].reason,
      'extension `g` could not read the request: a frame over the 4194304-byte cap',
    );
  }
});

test('events, notes, panels and shutdown', () => {
  const seen = [];
  const extension = new Extension('p', '1')
    .on(['turn_end'], (ctx, event) => seen.push(event.event))
    .onPanelKey((ctx, id, key, text) => ctx.renderPanel({ id, title: 'Notes', lines: [`${key}:${text}`] }))
    .onPanelClose((ctx) => ctx.clearNotes());
  const got = answers(
    extension,
    { type: 'hello_ack', cwd: '/ws' },
    { type: 'event', event: 'turn_end', stop: 'end' },
    { type: 'event', event: 'turn_start', step: 1 },
    { type: 'panel_key', panel_id: 'n', key: 'a', text: 'a' },
    { type: 'panel_close', panel_id: 'n' },
    { type: 'shutdown' },
    { type: 'event', event: 'turn_end' },
  );
  assert.deepEqual(seen, ['turn_end']);
  assert.deepEqual(got, [
    { type: 'panel_render', panel_id: 'n', lines: ['a:a'], title: 'Notes' },
    { type: 'clear_notes' },
    { type: 'shutdown_ack' },
  ]);
});

test('a refusal of the host is a CapabilityError naming the rule', () => {
  const denial = { capability: 'fs-read', subject: '.env', reason: 'not granted' };
  // componentize-js throws the error variant, jco wraps it in `payload`.
  for (const thrown of [{ tag: 'denied', val: denial }, { payload: { tag: 'denied', val: denial } }]) {
    globalThis.zotHost = {
      fs: {
        read: () => {
          throw thrown;
        },
      },
    };
    assert.throws(
      () => fs.read('.env'),
      (error) =>
        error instanceof CapabilityError &&
        error.kind === 'denied' &&
        error.capability === 'fs-read' &&
        error.message === 'fs-read `.env` refused: not granted',
    );
  }
  globalThis.zotHost = { fs: { read: () => new Uint8Array([104, 105]) } };
  assert.equal(fs.readText('a.txt'), 'hi');
  globalThis.zotHost = {
    fs: {
      read: () => {
        throw { tag: 'not-found', val: 'a.txt' };
      },
    },
  };
  assert.throws(() => fs.read('a.txt'), { message: '`a.txt` not found' });
});
