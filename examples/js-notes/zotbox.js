// zotbox.js: write zot extensions in JavaScript.
//
// An extension is a program speaking zot's extension protocol
// (newline-delimited JSON frames) on its stdin and stdout. This module
// speaks it for you, in the shape of the Rust SDK (`zotbox-guest`): describe
// the extension with `Extension`, hand it your handlers, and export its
// runner as `wasi:cli/run`:
//
//     import { Extension, Response, ToolOutput, Verdict, Level, schema } from './zotbox.js';
//
//     const extension = new Extension('weather', '1.0.0')
//       .command('weather', 'current weather for a city', (ctx, args) =>
//         Response.prompt(`What is the weather in ${args}? One line.`))
//       .tool('weather', 'Get the current weather for a city.',
//         schema.object({ city: schema.string('the city') }, ['city']),
//         (ctx, { city }) => {
//           ctx.notify(Level.info, `looking up ${city}`);
//           return ToolOutput.text(`${city}: sunny, 21°C (fake)`);
//         })
//       .interceptToolCall((ctx, tool, args) =>
//         tool === 'bash' && String(args.command).includes('rm -rf')
//           ? Verdict.block('refused: `rm -rf` is not allowed here')
//           : Verdict.allow());
//
//     export const run = extension.toRun();
//
// Built into a WASI component by componentize-js against the world in
// `wit/` (what `zotbox ext build` runs):
//
//     componentize-js app.js --wit wit --world-name extension -o NAME.wasm
//
// This file is copied into each extension's folder: componentize-js reads
// modules only from the folder it builds, so `import './zotbox.js'` is the
// one import that works offline and from anywhere.
//
// The session: `run` writes `hello` (with the capabilities implied by what
// was registered), one `register_command` per command, one `register_tool`
// per tool, one `subscribe` for the events and intercepts, and `ready`. It
// then answers the host until `shutdown` (answered with `shutdown_ack`) or
// the end of stdin. Handlers run one at a time and synchronously (there is
// no event loop between frames: a handler returning a Promise is an error).
// A handler that throws does not take the extension down: a command answers
// with an error, a tool with an error result, a `tool_call` interceptor
// blocks the call (a guard that cannot decide refuses), another interceptor
// counts as allowing, and the exception is logged to stderr (the
// extension's log).
//
// Capabilities: `fs`, `http` and `shell` call zotbox's `zot:host` imports;
// the host checks each call against the manifest's grant and the policy,
// audits it, and a refusal comes back as a thrown `CapabilityError` whose
// `kind` is `denied`. The extension keeps running.

import { getStdin } from 'wasi:cli/stdin@0.2.12';
import { getStdout } from 'wasi:cli/stdout@0.2.12';
import { getStderr } from 'wasi:cli/stderr@0.2.12';
import * as hostFs from 'zot:host/fs@0.1.0';
import * as hostHttp from 'zot:host/http@0.1.0';
import * as hostShell from 'zot:host/shell@0.1.0';

/**
 * The largest frame read from the host, counted in UTF-16 units (never more
 * than its UTF-8 bytes): 4 Mi, as the Rust SDK's 4 MiB and the host's cap.
 */
const MAX_FRAME = 4 * 1024 * 1024;
/** `blocking-write-and-flush` takes at most 4096 bytes per call. */
const WRITE_CHUNK = 4096;

const encoder = new TextEncoder();

/** How a `notify` note is styled. */
export const Level = Object.freeze({
  info: 'info',
  warn: 'warn',
  error: 'error',
  success: 'success',
});

/** The events a handler may subscribe to. */
export const EVENTS = Object.freeze([
  'session_start',
  'turn_start',
  'turn_end',
  'tool_call',
  'assistant_message',
]);

/** A slash command's answer. */
export class Response {
  constructor(action, fields = {}) {
    this.action = action;
    Object.assign(this, fields);
  }
  /** Submits `text` as a fresh user message. */
  static prompt(text) {
    return new Response('prompt', { prompt: String(text) });
  }
  /** Drops `text` into the editor at the cursor. */
  static insert(text) {
    return new Response('insert', { insert: String(text) });
  }
  /** Appends `text` to the chat as a one-shot note (no model call). */
  static display(text) {
    return new Response('display', { display: String(text) });
  }
  /** Changes nothing in the UI. */
  static noop() {
    return new Response('noop');
  }
  /** Shows `message` as an error and changes nothing else. */
  static error(message) {
    return new Response('noop', { error: String(message) });
  }
  /** Opens a panel: `{id, title, lines, footer}`. */
  static openPanel(panel) {
    return new Response('open_panel', { open_panel: panelFields(panel, 'id') });
  }
  /** Adds an error, shown whatever the action. */
  withError(message) {
    this.error = String(message);
    return this;
  }
  frame(id) {
    return { type: 'command_response', id, ...this };
  }
}

/** A tool's result: text and image blocks, maybe flagged as an error. */
export class ToolOutput {
  constructor(content, isError = false) {
    this.content = content;
    this.isError = isError;
  }
  /** One text block. */
  static text(text) {
    return new ToolOutput([{ type: 'text', text: String(text) }]);
  }
  /** One text block saying what went wrong, flagged as an error. */
  static error(message) {
    return new ToolOutput([{ type: 'text', text: String(message) }], true);
  }
  /** Adds an image block (base64 `data`). */
  withImage(mimeType, data) {
    this.content.push({ type: 'image', mime_type: mimeType, data });
    return this;
  }
  frame(id) {
    const frame = { type: 'tool_result', id, content: this.content };
    if (this.isError) frame.is_error = true;
    return frame;
  }
}

/** An interceptor's answer. */
export const Verdict = Object.freeze({
  /** Lets it through unchanged. */
  allow: () => ({ kind: 'allow' }),
  /** Refuses it, saying why. */
  block: (reason) => ({ kind: 'block', reason: String(reason ?? '') }),
  /** A `tool_call` only: runs the tool with these arguments (an object). */
  rewrite: (args) => ({ kind: 'rewrite', args }),
  /** An `assistant_message` only: replaces the text. */
  replaceText: (text) => ({ kind: 'replace_text', text: String(text) }),
});

/** JSON Schema helpers; a tool's schema may also be any plain object. */
export const schema = Object.freeze({
  string: (description) => describe({ type: 'string' }, description),
  number: (description) => describe({ type: 'number' }, description),
  integer: (description) => describe({ type: 'integer' }, description),
  boolean: (description) => describe({ type: 'boolean' }, description),
  array: (items, description) => describe({ type: 'array', items }, description),
  oneOf: (values, description) =>
    describe({ type: 'string', enum: [...values] }, description),
  object: (properties = {}, required = []) => ({
    type: 'object',
    properties,
    required: [...required],
  }),
});

function describe(schema, description) {
  if (description !== undefined) schema.description = String(description);
  return schema;
}

const TYPE_NAMES = {
  string: 'a string',
  number: 'a number',
  integer: 'an integer',
  boolean: 'a boolean',
  array: 'an array',
  object: 'an object',
  null: 'null',
};

function hasType(value, type) {
  switch (type) {
    case 'string':
      return typeof value === 'string';
    case 'number':
      return typeof value === 'number' && Number.isFinite(value);
    case 'integer':
      return Number.isInteger(value);
    case 'boolean':
      return typeof value === 'boolean';
    case 'array':
      return Array.isArray(value);
    case 'object':
      return value !== null && typeof value === 'object' && !Array.isArray(value);
    case 'null':
      return value === null;
    default:
      return true;
  }
}

/**
 * Why `value` does not fit `schema` (the subset tools use: `type`,
 * `properties`, `required`, `enum`, `items`, `additionalProperties: false`),
 * or `null` when it fits. `path` names the field, as `a.b[2]`.
 */
export function validate(schema, value, path = '') {
  if (schema === null || typeof schema !== 'object') return null;
  const name = path || 'the arguments';
  const types = schema.type === undefined ? [] : [].concat(schema.type);
  if (types.length > 0 && !types.some((type) => hasType(value, type))) {
    const wanted = types.map((type) => TYPE_NAMES[type] ?? type).join(' or ');
    return `\`${name}\` must be ${wanted}`;
  }
  if (Array.isArray(schema.enum) && !schema.enum.some((v) => v === value)) {
    const allowed = schema.enum.map((v) => `\`${v}\``).join(', ');
    return `\`${name}\` must be one of ${allowed}`;
  }
  if (hasType(value, 'object')) {
    for (const field of schema.required ?? []) {
      // Own fields only: `in` finds `valueOf` and `constructor` on every object.
      if (!Object.hasOwn(value, field)) return `missing field \`${path ? `${path}.` : ''}${field}\``;
    }
    const properties = schema.properties ?? {};
    for (const [field, inner] of Object.entries(value)) {
      const sub = path ? `${path}.${field}` : field;
      if (Object.hasOwn(properties, field)) {
        const problem = validate(properties[field], inner, sub);
        if (problem) return problem;
      } else if (schema.additionalProperties === false) {
        return `unknown field \`${sub}\``;
      }
    }
  }
  if (Array.isArray(value) && schema.items) {
    for (let i = 0; i < value.length; i += 1) {
      const problem = validate(schema.items, value[i], `${name}[${i}]`);
      if (problem) return problem;
    }
  }
  return null;
}

// ---------------------------------------------------------------------------
// Capabilities

/** A capability call that failed: `kind` is `denied`, `not-found`, … */
export class CapabilityError extends Error {
  constructor(kind, detail) {
    let message;
    if (kind === 'denied') {
      message = `${detail.capability} \`${detail.subject}\` refused: ${detail.reason}`;
    } else if (kind === 'not-found') {
      message = `\`${detail}\` not found`;
    } else if (kind === 'too-large') {
      message = `larger than the ${detail}-byte cap`;
    } else if (kind === 'timeout') {
      message = `timed out after ${detail} ms`;
    } else if (kind === 'invalid') {
      message = `invalid request: ${detail}`;
    } else {
      message = String(detail);
    }
    super(message);
    this.name = 'CapabilityError';
    this.kind = kind;
    if (kind === 'denied') {
      this.capability = detail.capability;
      this.subject = detail.subject;
      this.reason = detail.reason;
    } else {
      this.detail = detail;
    }
  }
}

/** Calls a `zot:host` import, turning its error variant into a `CapabilityError`. */
function host(call) {
  try {
    return call();
  } catch (thrown) {
    const error = thrown?.payload ?? thrown;
    if (error && typeof error === 'object' && typeof error.tag === 'string') {
      throw new CapabilityError(error.tag, error.val);
    }
    throw thrown;
  }
}

/** Workspace files (paths relative to the workspace root, with `/`). */
export const fs = Object.freeze({
  /** The bytes of a file (a `Uint8Array`). */
  read: (path) => host(() => hostFs.read(String(path))),
  /** A file as UTF-8 text. */
  readText: (path) => new TextDecoder().decode(host(() => hostFs.read(String(path)))),
  /** Creates or replaces a file with `contents` (a string or bytes). */
  write: (path, contents) =>
    host(() =>
      hostFs.write(
        String(path),
        typeof contents === 'string' ? encoder.encode(contents) : contents,
      ),
    ),
  /** A directory's entries: `{name, kind, size}`. */
  list: (path) => host(() => hostFs.list(String(path))),
  /** `{kind, size, modifiedMs}` of a path (a final symlink not followed). */
  stat: (path) => host(() => hostFs.stat(String(path))),
});

/** HTTPS requests to the hosts the extension was granted. */
export const http = Object.freeze({
  /** Sends `{method, url, headers, body}` and returns `{status, headers, body}`. */
  fetch: ({ method = 'get', url, headers = [], body } = {}) =>
    host(() =>
      hostHttp.fetch({
        method: String(method).toLowerCase(),
        url: String(url),
        headers,
        body: typeof body === 'string' ? encoder.encode(body) : body,
      }),
    ),
  /** A GET, returning the response with its body as text in `text`. */
  get(url) {
    const response = this.fetch({ url });
    return { ...response, text: new TextDecoder().decode(response.body) };
  },
});

/** Shell commands, through the guard chain and the grant's patterns. */
export const shell = Object.freeze({
  /** Runs `command`; returns `{stdout, stderr, exitCode, truncated}`. */
  run: (command) => host(() => hostShell.run(String(command))),
});

// ---------------------------------------------------------------------------
// The session

/** What a handler may do besides answering: notes, panels, logs. */
export class Context {
  constructor(name, send, log) {
    this.name = name;
    this.helloAck = null;
    this._send = send;
    this._log = log;
  }
  /** Shows a one-shot note to the user. */
  notify(level, message) {
    this._send({ type: 'notify', level: String(level), message: String(message) });
  }
  /** Retracts every note this extension has shown. */
  clearNotes() {
    this._send({ type: 'clear_notes' });
  }
  /** Draws (or redraws) a panel: `{id, title, lines, footer}`. */
  renderPanel(panel) {
    this._send({ type: 'panel_render', ...panelFields(panel, 'panel_id') });
  }
  /** Closes a panel this extension owns. */
  closePanel(id) {
    this._send({ type: 'panel_close', panel_id: String(id) });
  }
  /** One line to the log (stderr), never to stdout. */
  log(message) {
    this._log(`${this.name}: ${message}`);
  }
}

function panelFields({ id, title, lines = [], footer }, idKey) {
  const fields = { [idKey]: String(id), lines: lines.map(String) };
  if (title) fields.title = String(title);
  if (footer !== undefined && footer !== null) fields.footer = String(footer);
  return fields;
}

function describeThrown(thrown) {
  return thrown instanceof Error ? thrown.message : String(thrown);
}

// zot's built-in tools: a tool an extension registers under one of these
// names is shadowed by zot's own.
const ZOT_TOOLS = new Set(['bash', 'read', 'write', 'edit', 'skill', 'glob', 'powershell']);

// A character as Go's `encoding/json` compares keys: the lowercase of its
// uppercase (`ſ` is an `s`, the Kelvin sign a `k`).
function fold(c) {
  const upper = c.toUpperCase();
  if ([...upper].length !== 1) return c;
  const lower = upper.toLowerCase();
  return [...lower].length === 1 ? lower : upper;
}

function folded(key) {
  return [...key].map(fold).join('');
}

// Sets an own property, even one named `__proto__`.
function put(object, key, value) {
  Object.defineProperty(object, key, { value, enumerable: true, writable: true, configurable: true });
}

/**
 * The arguments of a call of zot's own `tool` as it will read them. zot
 * reads them with Go's `encoding/json`: a key in any case, the last of
 * several winning. Natively zot hands a guard the model's spelling, so
 * `{"command":"ls","COMMAND":"rm -rf /"}` would show the guard `ls` while
 * bash ran `rm -rf /`. Keys read as one become its lowercase spelling with
 * the last one's value that is not `null` (Go leaves a string as it was for
 * a `null`); a lone key in another case gets the lowercase spelling beside
 * it. Another tool's arguments are left as they are: it may
 * read its keys by their case.
 */
function asZotReads(tool, args) {
  if (!ZOT_TOOLS.has(tool)) return args;
  const keys = Object.keys(args);
  const spellings = keys.map(folded);
  if (spellings.every((spelling, at) => spelling === keys[at])) return args;
  // Each spelling: how many keys have it, and the last one's value that is
  // not `null` (a later `null` leaves Go's field as it was).
  const groups = new Map();
  keys.forEach((key, at) => {
    const before = groups.get(spellings[at]);
    const value = args[key] === null && before ? before.value : args[key];
    groups.set(spellings[at], { count: (before?.count ?? 0) + 1, value });
  });
  const seen = {};
  keys.forEach((key, at) => {
    const spelling = spellings[at];
    const { count, value } = groups.get(spelling);
    if (count > 1) {
      put(seen, spelling, value);
    } else {
      put(seen, key, value);
      if (!Object.hasOwn(seen, spelling)) put(seen, spelling, value);
    }
  });
  return seen;
}

// Whether an `event_intercept`'s arguments for one of zot's own tools must
// be read again in the order written: when two keys are read as one, which
// is last matters, and `JSON.parse` cannot say (it keeps a repeated key
// where it first stood, so in `{"command":"ls","COMMAND":"ls","command":"rm
// -rf /"}` `COMMAND` looked last, and the guard was shown `ls` where bash
// runs `rm -rf /`); and a `null` may have replaced a value written before it
// (`{"command":"rm -rf /","command":null}`), which Go keeps.
function readAgainInOrder(frame) {
  const args = frame.tool_args;
  if (frame.type !== 'event_intercept' || !ZOT_TOOLS.has(frame.tool_name) || !hasType(args, 'object')) {
    return false;
  }
  const keys = Object.keys(args);
  return new Set(keys.map(folded)).size < keys.length || keys.some((key) => args[key] === null);
}

const JSON_SPACE = /[ \t\n\r]*/y;
// Unrolled (runs of plain characters between escapes), so that a long
// string is not one backtracking entry per character.
const JSON_STRING = /"[^"\\\u0000-\u001f]*(?:\\.[^"\\\u0000-\u001f]*)*"/y;
const JSON_SCALAR = /true|false|null|-?(?:0|[1-9][0-9]*)(?:\.[0-9]+)?(?:[eE][+-]?[0-9]+)?/y;
const MAX_DEPTH = 128;

/**
 * `text` parsed as `JSON.parse` does, but each key of an object stands where
 * it was last written, as Go's decoder settles them. Used only for the rare
 * line that needs it ({@link readAgainInOrder}).
 */
export function parseInReadOrder(text) {
  let at = 0;
  const fail = (what) => {
    throw new SyntaxError(`${what} at position ${at}`);
  };
  const skipSpace = () => {
    JSON_SPACE.lastIndex = at;
    JSON_SPACE.exec(text);
    at = JSON_SPACE.lastIndex;
  };
  const token = (pattern) => {
    pattern.lastIndex = at;
    const found = pattern.exec(text);
    if (found === null) fail('unexpected character');
    at = pattern.lastIndex;
    return JSON.parse(found[0]);
  };
  // After an item of an object or array: true when another follows.
  const more = (close) => {
    skipSpace();
    const c = text[at++];
    if (c === ',') return true;
    if (c === close) return false;
    return fail(`expected \`,\` or \`${close}\``);
  };
  const value = (depth) => {
    if (depth > MAX_DEPTH) fail(`nested deeper than ${MAX_DEPTH}`);
    skipSpace();
    const c = text[at];
    if (c === '"') return token(JSON_STRING);
    if (c === '[') {
      at += 1;
      const items = [];
      skipSpace();
      if (text[at] === ']') {
        at += 1;
        return items;
      }
      do items.push(value(depth + 1));
      while (more(']'));
      return items;
    }
    if (c !== '{') return token(JSON_SCALAR);
    at += 1;
    const written = [];
    skipSpace();
    if (text[at] === '}') {
      at += 1;
      return {};
    }
    do {
      skipSpace();
      if (text[at] !== '"') fail('expected a key');
      const key = token(JSON_STRING);
      skipSpace();
      if (text[at++] !== ':') fail('expected `:`');
      written.push([key, value(depth + 1)]);
    } while (more('}'));
    // Each key's last writing that is not `null` (Go leaves a string field
    // as it was for a `null`), else its last; found from the end.
    const kept = new Map();
    for (let at = written.length - 1; at >= 0; at -= 1) {
      const [key, item] = written[at];
      const later = kept.get(key);
      if (later === undefined || (written[later][1] === null && item !== null)) kept.set(key, at);
    }
    const object = {};
    for (const at of [...kept.values()].sort((a, b) => a - b)) put(object, written[at][0], written[at][1]);
    return object;
  };
  const parsed = value(1);
  skipSpace();
  if (at < text.length) fail('unexpected text after the value');
  return parsed;
}

// The answer to send instead of `frame`, a request's answer JSON cannot
// hold; `null` for any other frame.
function unwritable(frame, why) {
  const reason = `the extension's answer could not be written as JSON (${why})`;
  switch (frame?.type) {
    case 'tool_result':
      return ToolOutput.error(reason).frame(frame.id);
    case 'command_response':
      return Response.error(reason).frame(frame.id);
    case 'event_intercept_response':
      return { type: frame.type, id: frame.id, block: true, reason };
    default:
      return null;
  }
}

// Each lone surrogate of a string as U+FFFD: `JSON.stringify` writes one as
// `\ud83d`, which zot's reader and zotbox's refuse (a guard quoting half an
// emoji of `cmd.slice(0, 40)` would have its verdict dropped).
// (Code units, not `\p{…}`: the engine componentize-js builds on has no
// Unicode property classes.)
const LONE_SURROGATE = /[\ud800-\udbff](?![\udc00-\udfff])|(?<![\ud800-\udbff])[\udc00-\udfff]/g;

function wellFormed(_key, value) {
  return typeof value === 'string' ? value.replace(LONE_SURROGATE, '\ufffd') : value;
}

function isPromise(value) {
  return value !== null && typeof value === 'object' && typeof value.then === 'function';
}

/** A zot extension: its identity, what it registers, the handlers behind it. */
export class Extension {
  constructor(name, version) {
    this.name = String(name);
    this.version = String(version);
    this.commands = new Map();
    this.tools = new Map();
    this.eventHandlers = [];
    this.interceptors = { tool_call: [], turn_start: [], assistant_message: [] };
    this.panelHandlers = {};
  }

  /** Registers `/name`; the handler gets what the user typed after it. */
  command(name, description, handler) {
    this.commands.set(String(name), { description: String(description), handler });
    return this;
  }

  /**
   * Registers a tool with typed arguments: they are checked against
   * `schema` before the handler runs; arguments that do not fit never reach
   * it, the model gets an error result naming the field. Absent arguments
   * count as `{}`. The handler returns a `ToolOutput` or a string.
   */
  tool(name, description, schema, handler) {
    const toolName = String(name);
    const typed = (ctx, args) => {
      const value = args ?? {};
      const problem = validate(schema, value);
      if (problem) {
        return ToolOutput.error(`invalid arguments for tool \`${toolName}\`: ${problem}`);
      }
      return handler(ctx, value);
    };
    this.tools.set(toolName, { description: String(description), schema, handler: typed });
    return this;
  }

  /** Registers a tool whose handler gets the arguments as sent. */
  toolJson(name, description, schema, handler) {
    this.tools.set(String(name), { description: String(description), schema, handler });
    return this;
  }

  /** Runs `handler(ctx, event)` for the named events (`null`: all of them). */
  on(events, handler) {
    this.eventHandlers.push({ events: events === null ? null : [].concat(events), handler });
    return this;
  }

  /**
   * Asked before each tool call: `(ctx, toolName, args) => Verdict`. The
   * manifest must list `tool_call` in `capabilities.events` (and in
   * `capabilities.rewrite` for a rewrite to count).
   */
  interceptToolCall(handler) {
    this.interceptors.tool_call.push(handler);
    return this;
  }

  /** Asked before each turn: `(ctx, step) => Verdict` (block or allow). */
  interceptTurnStart(handler) {
    this.interceptors.turn_start.push(handler);
    return this;
  }

  /** Asked about each assistant message: `(ctx, text) => Verdict`. */
  interceptAssistantMessage(handler) {
    this.interceptors.assistant_message.push(handler);
    return this;
  }

  /** `(ctx, panelId, key, text)` for each key pressed in one of its panels. */
  onPanelKey(handler) {
    this.panelHandlers.key = handler;
    return this;
  }

  /** `(ctx, panelId, width, height)` when one of its panels is resized. */
  onPanelResize(handler) {
    this.panelHandlers.resize = handler;
    return this;
  }

  /** `(ctx, panelId)` when the host closes one of its panels. */
  onPanelClose(handler) {
    this.panelHandlers.close = handler;
    return this;
  }

  /** The `wasi:cli/run` export: `export const run = extension.toRun();` */
  toRun() {
    return { run: () => this.run() };
  }

  /** Runs the session over WASI stdin and stdout. */
  run() {
    const stdin = getStdin();
    const stdout = getStdout();
    const stderr = getStderr();
    const write = (stream, text) => {
      const bytes = encoder.encode(text);
      for (let at = 0; at < bytes.length; at += WRITE_CHUNK) {
        stream.blockingWriteAndFlush(bytes.subarray(at, at + WRITE_CHUNK));
      }
    };
    this.runWith(
      () => {
        try {
          return stdin.blockingRead(65536n);
        } catch {
          return null; // closed: the host has gone
        }
      },
      (line) => write(stdout, line),
      (line) => {
        try {
          write(stderr, `${line}\n`);
        } catch {
          // A log that cannot be written has nowhere to report that.
        }
      },
    );
  }

  /**
   * Runs the session over `read()` (bytes, or `null` at the end), `write`
   * (one frame line) and `log` (one log line).
   */
  runWith(read, write, log) {
    const send = (frame) => {
      let text;
      try {
        text = JSON.stringify(frame, wellFormed);
      } catch (thrown) {
        // A handler's answer JSON cannot hold (a BigInt, a cycle): the
        // request still gets an answer, a failed one, and the session goes on.
        const instead = unwritable(frame, describeThrown(thrown));
        if (instead === null) {
          log(`${this.name}: dropped a frame JSON cannot hold: ${describeThrown(thrown)}`);
          return;
        }
        text = JSON.stringify(instead, wellFormed);
      }
      write(`${text}\n`);
    };
    const ctx = new Context(this.name, send, log);
    for (const frame of this.registration()) ctx._send(frame);
    const decoder = new TextDecoder();
    let pending = '';
    // Where the search for a newline goes on: a long frame arriving in many
    // chunks is scanned once, not once per chunk.
    let scanned = 0;
    let skipping = false;
    for (;;) {
      const chunk = read();
      if (chunk === null || chunk === undefined) {
        if (pending.trim() && !skipping) this.handleLine(ctx, pending);
        return;
      }
      pending += decoder.decode(chunk, { stream: true });
      let newline;
      while ((newline = pending.indexOf('\n', scanned)) >= 0) {
        const line = pending.slice(0, newline);
        pending = pending.slice(newline + 1);
        scanned = 0;
        if (skipping) {
          skipping = false;
          continue;
        }
        if (line.length > MAX_FRAME) {
          this.answerUnreadable(ctx, line, `a frame over the ${MAX_FRAME}-byte cap`);
          continue;
        }
        if (this.handleLine(ctx, line) === 'stop') return;
      }
      scanned = pending.length;
      if (pending.length > MAX_FRAME) {
        // Answer what can be answered from its start, then drop the rest.
        this.answerUnreadable(ctx, pending, `a frame over the ${MAX_FRAME}-byte cap`);
        pending = '';
        scanned = 0;
        skipping = true;
      }
    }
  }

  /** The frames that open the session, in order. */
  registration() {
    const subscribe = this.subscription();
    const capabilities = [];
    if (this.commands.size > 0) capabilities.push('commands');
    if (this.tools.size > 0) capabilities.push('tools');
    const events = subscribe.events.length > 0 || subscribe.intercept.length > 0;
    if (events) capabilities.push('events');
    const frames = [{ type: 'hello', name: this.name, version: this.version, capabilities }];
    for (const [name, { description }] of this.commands) {
      frames.push({ type: 'register_command', name, description });
    }
    for (const [name, { description, schema }] of this.tools) {
      frames.push({ type: 'register_tool', name, description, schema });
    }
    if (events) frames.push({ type: 'subscribe', ...subscribe });
    frames.push({ type: 'ready' });
    return frames;
  }

  subscription() {
    const events = [];
    for (const { events: names } of this.eventHandlers) {
      for (const name of names ?? EVENTS) if (!events.includes(name)) events.push(name);
    }
    const intercept = Object.keys(this.interceptors).filter(
      (kind) => this.interceptors[kind].length > 0,
    );
    return { events, intercept };
  }

  /** A request the extension cannot read is still answered by its id. */
  answerUnreadable(ctx, line, why) {
    const head = line.slice(0, 4096);
    const type = /"type"\s*:\s*"([a-z_]+)"/.exec(head)?.[1];
    const id = /"id"\s*:\s*"((?:[^"\\]|\\.)*)"/.exec(head)?.[1];
    if (id === undefined) {
      ctx.log(`skipped a frame from the host: ${why}`);
      return;
    }
    const reason = `extension \`${this.name}\` could not read the request: ${why}`;
    ctx.log(`answered a \`${type}\` from the host it could not read: ${why}`);
    if (type === 'event_intercept') {
      ctx._send({ type: 'event_intercept_response', id, block: true, reason });
    } else if (type === 'tool_call') {
      ctx._send(ToolOutput.error(reason).frame(id));
    } else if (type === 'command_invoked') {
      ctx._send(Response.error(reason).frame(id));
    }
  }

  handleLine(ctx, line) {
    if (!line.trim()) return 'continue';
    let frame;
    try {
      frame = JSON.parse(line);
      if (frame !== null && typeof frame === 'object' && readAgainInOrder(frame)) {
        frame = parseInReadOrder(line);
      }
    } catch (thrown) {
      this.answerUnreadable(ctx, line, `not JSON: ${describeThrown(thrown)}`);
      return 'continue';
    }
    if (frame === null || typeof frame !== 'object') {
      ctx.log('skipped a frame from the host: not a JSON object');
      return 'continue';
    }
    switch (frame.type) {
      case 'hello_ack':
        ctx.helloAck = frame;
        break;
      case 'command_invoked':
        ctx._send(this.invokeCommand(ctx, frame).frame(frame.id));
        break;
      case 'tool_call':
        ctx._send(this.callTool(ctx, frame).frame(frame.id));
        break;
      case 'event':
        this.deliverEvent(ctx, frame);
        break;
      case 'event_intercept':
        ctx._send(this.intercept(ctx, frame));
        break;
      case 'panel_key':
        this.guardedPanel(ctx, 'key', [frame.panel_id, frame.key, frame.text ?? null]);
        break;
      case 'panel_resize':
        this.guardedPanel(ctx, 'resize', [frame.panel_id, frame.width, frame.height]);
        break;
      case 'panel_close':
        this.guardedPanel(ctx, 'close', [frame.panel_id]);
        break;
      case 'shutdown':
        ctx._send({ type: 'shutdown_ack' });
        return 'stop';
      default:
        break;
    }
    return 'continue';
  }

  invokeCommand(ctx, { name, args }) {
    const command = this.commands.get(name);
    if (!command) return Response.error(`unknown command \`${name}\``);
    try {
      const answer = command.handler(ctx, typeof args === 'string' ? args : '');
      if (answer instanceof Response) return answer;
      if (isPromise(answer)) {
        return Response.error(`command \`${name}\`: handler returned a Promise; handlers run synchronously`);
      }
      return Response.display(answer);
    } catch (thrown) {
      ctx.log(`command \`${name}\` failed: ${describeThrown(thrown)}`);
      return Response.error(`command \`${name}\`: ${describeThrown(thrown)}`);
    }
  }

  callTool(ctx, { name, args }) {
    const tool = this.tools.get(name);
    if (!tool) return ToolOutput.error(`unknown tool \`${name}\``);
    try {
      const output = tool.handler(ctx, args);
      if (output instanceof ToolOutput) return output;
      if (isPromise(output)) {
        return ToolOutput.error(`tool \`${name}\`: handler returned a Promise; handlers run synchronously`);
      }
      return ToolOutput.text(typeof output === 'string' ? output : JSON.stringify(output));
    } catch (thrown) {
      ctx.log(`tool \`${name}\` failed: ${describeThrown(thrown)}`);
      return ToolOutput.error(`tool \`${name}\`: ${describeThrown(thrown)}`);
    }
  }

  deliverEvent(ctx, frame) {
    for (const { events, handler } of this.eventHandlers) {
      const wanted = events === null ? EVENTS.includes(frame.event) : events.includes(frame.event);
      if (!wanted) continue;
      try {
        handler(ctx, frame);
      } catch (thrown) {
        ctx.log(`event handler failed: ${describeThrown(thrown)}`);
      }
    }
  }

  guardedPanel(ctx, which, args) {
    const handler = this.panelHandlers[which];
    if (!handler) return;
    try {
      handler(ctx, ...args);
    } catch (thrown) {
      ctx.log(`panel ${which} handler failed: ${describeThrown(thrown)}`);
    }
  }

  /**
   * Asks every interceptor of the request's kind, in order: the first block
   * wins, rewrites chain. A `tool_call` interceptor that throws blocks (the
   * call it choked on is the one to stop); another kind's counts as allowing.
   */
  intercept(ctx, request) {
    const kind = request.event;
    const answer = { type: 'event_intercept_response', id: request.id, block: false };
    const handlers = this.interceptors[kind] ?? [];
    let args = request.tool_args ?? {};
    if (kind === 'tool_call' && hasType(args, 'object')) args = asZotReads(request.tool_name ?? '', args);
    let text = request.text ?? '';
    let rewritten = false;
    let replaced = false;
    for (const handler of handlers) {
      let verdict;
      try {
        if (kind === 'tool_call') verdict = handler(ctx, request.tool_name ?? '', args);
        else if (kind === 'turn_start') verdict = handler(ctx, request.step ?? 0);
        else verdict = handler(ctx, text);
      } catch (thrown) {
        const why = describeThrown(thrown);
        // A guard that cannot decide refuses: allowing would let through
        // exactly the call it choked on.
        if (kind === 'tool_call') {
          ctx.log(`\`tool_call\` interceptor failed, blocking: ${why}`);
          return {
            type: 'event_intercept_response', id: request.id, block: true,
            reason: `the \`tool_call\` interceptor failed (${why}); blocked to be safe`,
          };
        }
        ctx.log(`\`${kind}\` interceptor failed, allowing: ${why}`);
        continue;
      }
      verdict = verdict ?? Verdict.allow();
      if (verdict.kind === 'block') {
        const blocked = { type: 'event_intercept_response', id: request.id, block: true };
        if (verdict.reason) blocked.reason = verdict.reason;
        return blocked;
      }
      if (verdict.kind === 'rewrite' && kind === 'tool_call') {
        if (hasType(verdict.args, 'object')) {
          args = verdict.args;
          rewritten = true;
        } else {
          ctx.log('ignored a `tool_call` rewrite whose arguments are not a JSON object');
        }
      } else if (verdict.kind === 'replace_text' && kind === 'assistant_message') {
        text = verdict.text;
        replaced = true;
      } else if (verdict.kind !== 'allow') {
        ctx.log(`ignored a \`${verdict.kind}\` verdict on a \`${kind}\` intercept, which does not allow it`);
      }
    }
    if (rewritten) answer.modified_args = args;
    if (replaced) answer.replace_text = text;
    return answer;
  }
}
