// js-notes: a zot extension in JavaScript, with zotbox's guest library
// (`zotbox.js`, a copy of guest-sdk/js/zotbox.js).
//
// It shows each thing an extension does: a slash command (/js-note), a
// typed tool (js_weather), a tool_call intercept (refusing `rm -rf /`), a
// notify, and a capability call (js_read_file) that the sandbox refuses
// unless the manifest asks for `read` and the policy grants it.
//
// Build (what `zotbox ext build` runs):
//
//     componentize-js app.js --wit wit --world-name extension -o js-notes.wasm

import { Extension, Level, Response, ToolOutput, Verdict, fs, schema } from './zotbox.js';

const notes = [];

const extension = new Extension('js-notes', '1.0.0')
  .command('js-note', 'remember a note', (ctx, args) => {
    const text = args.trim();
    if (!text) return Response.error('nothing to note: `/js-note TEXT`');
    notes.push(text);
    ctx.notify(Level.success, `noted (${notes.length} in total)`);
    return Response.display(`noted: ${text}`);
  })
  .tool(
    'js_weather',
    'Get the (fake) weather for a city.',
    schema.object(
      {
        city: schema.string('the city'),
        units: schema.oneOf(['celsius', 'fahrenheit'], 'celsius (default) or fahrenheit'),
      },
      ['city'],
    ),
    (ctx, { city, units = 'celsius' }) => {
      ctx.notify(Level.info, `looking up the weather in ${city}`);
      const degrees = units === 'fahrenheit' ? '33°F' : '1°C';
      return ToolOutput.text(`${city}: ${degrees}, light fog (fake)`);
    },
  )
  .tool(
    'js_read_file',
    'Read a file of the workspace (needs a `read` grant).',
    schema.object({ path: schema.string('a path in the workspace') }, ['path']),
    (ctx, { path }) => {
      try {
        return ToolOutput.text(`read ${fs.read(path).length} bytes`);
      } catch (error) {
        return ToolOutput.error(`cannot read: ${error.message}`);
      }
    },
  )
  .interceptToolCall((ctx, tool, args) => {
    if (tool === 'bash' && String(args.command ?? '').trim() === 'rm -rf /') {
      return Verdict.block('refused by js-notes: `rm -rf /` deletes the whole filesystem');
    }
    return Verdict.allow();
  });

export const run = extension.toRun();
