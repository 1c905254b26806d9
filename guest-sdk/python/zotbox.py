"""zotbox: write zot extensions in Python.

An extension is a program speaking zot's extension protocol
(newline-delimited JSON frames) on its stdin and stdout. This module speaks
it for you, in the shape of the Rust SDK (``zotbox-guest``): describe the
extension with :class:`Extension`, hand it your handlers, and run it from
the component's ``wasi:cli/run`` export::

    from wit_world import exports
    from zotbox import Extension, Level, Response, ToolOutput, Verdict, schema

    extension = Extension("weather", "1.0.0")

    @extension.command("weather", "current weather for a city")
    def weather(ctx, args):
        return Response.prompt(f"What is the weather in {args}? One line.")

    @extension.tool("weather", "Get the current weather for a city.",
                    schema.object({"city": schema.string("the city")}, ["city"]))
    def forecast(ctx, args):
        ctx.notify(Level.INFO, f"looking up {args['city']}")
        return ToolOutput.text(f"{args['city']}: sunny, 21°C (fake)")

    @extension.intercept_tool_call
    def guard(ctx, tool, args):
        if tool == "bash" and "rm -rf" in str(args.get("command", "")):
            return Verdict.block("refused: `rm -rf` is not allowed here")
        return Verdict.allow()

    class Run(exports.Run):
        def run(self) -> None:
            extension.run()

Built into a WASI component by componentize-py against the world in
``wit/`` (what ``zotbox ext build`` runs)::

    componentize-py -d wit componentize app -o NAME.wasm

The library is pure Python (the standard library only) and a file of the
extension's folder, copied there by ``zotbox new --lang python``:
componentize-py finds it beside ``app.py`` with nothing to install, offline.
The same file runs under a plain ``python3`` (``Extension.run_with`` over
any streams), which is how its tests run.

The session: :meth:`Extension.run` writes ``hello`` (with the capabilities
implied by what was registered), one ``register_command`` per command, one
``register_tool`` per tool, one ``subscribe`` for the events and intercepts,
and ``ready``. It then answers the host until ``shutdown`` (answered with
``shutdown_ack``) or the end of stdin. A handler that raises does not take
the extension down: a command answers with an error, a tool with an error
result, a ``tool_call`` interceptor blocks the call (a guard that cannot
decide refuses), another interceptor counts as allowing, and the exception
is logged to stderr (the extension's log). A request that cannot be read is still
answered by its id when the id can be found (a check with a block: a guard
that stays silent lets the call through).

Capabilities: :func:`read_file`, :func:`write_file`, :func:`fetch` and
:func:`run_shell` call zotbox's ``zot:host`` imports when the world imports
them; the host checks each call against the manifest's grant and the policy,
audits it, and a refusal is raised as :class:`CapabilityError` whose
``kind`` is ``denied``. The extension keeps running.
"""

import json
import re
import sys
import traceback

#: The largest frame read from the host (as the Rust SDK): 4 MiB.
MAX_FRAME = 4 * 1024 * 1024

#: The events a handler may subscribe to.
EVENTS = ("session_start", "turn_start", "turn_end", "tool_call", "assistant_message")


class Level:
    """How a ``notify`` note is styled."""

    INFO = "info"
    WARN = "warn"
    ERROR = "error"
    SUCCESS = "success"


class Panel:
    """A panel: an id the extension picks, a title, body lines and a footer."""

    def __init__(self, panel_id, title="", lines=(), footer=None):
        self.id = str(panel_id)
        self.title = str(title)
        self.lines = [str(line) for line in lines]
        self.footer = None if footer is None else str(footer)

    def fields(self, id_key):
        fields = {id_key: self.id, "lines": self.lines}
        if self.title:
            fields["title"] = self.title
        if self.footer is not None:
            fields["footer"] = self.footer
        return fields


class Response:
    """A slash command's answer."""

    def __init__(self, action, **fields):
        self.action = action
        self.fields = fields

    @classmethod
    def prompt(cls, text):
        """Submits ``text`` as a fresh user message."""
        return cls("prompt", prompt=str(text))

    @classmethod
    def insert(cls, text):
        """Drops ``text`` into the editor at the cursor."""
        return cls("insert", insert=str(text))

    @classmethod
    def display(cls, text):
        """Appends ``text`` to the chat as a one-shot note (no model call)."""
        return cls("display", display=str(text))

    @classmethod
    def noop(cls):
        """Changes nothing in the UI."""
        return cls("noop")

    @classmethod
    def error(cls, message):
        """Shows ``message`` as an error and changes nothing else."""
        return cls("noop", error=str(message))

    @classmethod
    def open_panel(cls, panel):
        """Opens a :class:`Panel`."""
        return cls("open_panel", open_panel=panel.fields("id"))

    def with_error(self, message):
        """Adds an error, shown whatever the action."""
        self.fields["error"] = str(message)
        return self

    def frame(self, call_id):
        return {"type": "command_response", "id": call_id, "action": self.action, **self.fields}


class ToolOutput:
    """A tool's result: text and image blocks, maybe flagged as an error."""

    def __init__(self, content, is_error=False):
        self.content = content
        self.is_error = is_error

    @classmethod
    def text(cls, text):
        """One text block."""
        return cls([{"type": "text", "text": str(text)}])

    @classmethod
    def error(cls, message):
        """One text block saying what went wrong, flagged as an error."""
        return cls([{"type": "text", "text": str(message)}], True)

    def with_image(self, mime_type, data):
        """Adds an image block (base64 ``data``)."""
        self.content.append({"type": "image", "mime_type": mime_type, "data": data})
        return self

    def frame(self, call_id):
        frame = {"type": "tool_result", "id": call_id, "content": self.content}
        if self.is_error:
            frame["is_error"] = True
        return frame


# A surrogate code point in a Python string is always a lone one.
_LONE_SURROGATE = re.compile("[\ud800-\udfff]")

# zot's built-in tools: a tool an extension registers under one of these
# names is shadowed by zot's own.
_ZOT_TOOLS = ("bash", "read", "write", "edit", "skill", "glob", "powershell")


def _fold(c):
    """``c`` as Go's ``encoding/json`` compares keys: the lowercase of its
    uppercase (``ſ`` is an ``s``, the Kelvin sign a ``k``)."""
    if c.isascii():
        return c.lower()
    upper = c.upper()
    if len(upper) != 1:
        return c
    lower = upper.lower()
    return lower if len(lower) == 1 else upper


def _folded(key):
    return "".join(_fold(c) for c in key)


def _unwritable(frame, error):
    """The answer to send instead of ``frame``, a request's answer JSON
    cannot hold; ``None`` for any other frame."""
    why = f"the extension's answer could not be written as JSON ({error})"
    kind, call_id = frame.get("type"), frame.get("id")
    if kind == "tool_result":
        return ToolOutput.error(why).frame(call_id)
    if kind == "command_response":
        return Response.error(why).frame(call_id)
    if kind == "event_intercept_response":
        return {"type": kind, "id": call_id, "block": True, "reason": why}
    return None


def _in_read_order(pairs):
    """A JSON object with each key where it was last written.

    ``dict`` keeps a repeated key where it first stood, so in
    ``{"command": "ls", "COMMAND": "ls", "command": "rm -rf /"}`` it put
    ``COMMAND`` last, and the guard was shown ``ls`` where Go, reading the
    keys in the order written, runs ``rm -rf /``. A ``null`` is no writing:
    Go leaves a string field as it was, so in
    ``{"command": "rm -rf /", "command": null}`` bash runs ``rm -rf /``."""
    obj = {}
    for key, value in pairs:
        if value is None and obj.get(key) is not None:
            continue
        obj.pop(key, None)
        obj[key] = value
    return obj


def _as_zot_reads(tool, args):
    """The arguments of a call of zot's own ``tool`` as it will read them.

    zot reads them with Go's ``encoding/json``: a key in any case, the last
    of several winning. Natively zot hands a guard the model's spelling, so
    ``{"command": "ls", "COMMAND": "rm -rf /"}`` would show the guard ``ls``
    while bash ran ``rm -rf /``. Keys read as one become its lowercase
    spelling with the last one's value that is not ``null`` (Go leaves a
    string as it was for a ``null``); a lone key in another case gets the
    lowercase spelling beside it. Another tool's arguments are left as they
    are: it may read its keys by their case."""
    if tool not in _ZOT_TOOLS:
        return args
    spellings = [_folded(key) for key in args]
    if spellings == list(args):
        return args
    # Each spelling: how many keys have it, and the last one's value that
    # is not ``null`` (a later ``null`` leaves Go's field as it was).
    groups = {}
    for spelling, value in zip(spellings, args.values()):
        count, before = groups.get(spelling, (0, None))
        groups[spelling] = (count + 1, before if value is None else value)
    seen = {}
    for key, spelling in zip(args, spellings):
        count, value = groups[spelling]
        if count > 1:
            seen[spelling] = value
        else:
            seen[key] = value
            seen.setdefault(spelling, value)
    return seen


class Verdict:
    """An interceptor's answer."""

    def __init__(self, kind, value=None):
        self.kind = kind
        self.value = value

    @classmethod
    def allow(cls):
        """Lets it through unchanged."""
        return cls("allow")

    @classmethod
    def block(cls, reason=""):
        """Refuses it, saying why."""
        return cls("block", str(reason))

    @classmethod
    def rewrite(cls, args):
        """A ``tool_call`` only: runs the tool with these arguments (a dict)."""
        return cls("rewrite", args)

    @classmethod
    def replace_text(cls, text):
        """An ``assistant_message`` only: replaces the text."""
        return cls("replace_text", str(text))


class schema:  # noqa: N801 (a namespace, as the Rust SDK's `schema` module)
    """JSON Schema helpers; a tool's schema may also be any plain dict."""

    @staticmethod
    def _describe(value, description):
        if description is not None:
            value["description"] = str(description)
        return value

    @staticmethod
    def string(description=None):
        return schema._describe({"type": "string"}, description)

    @staticmethod
    def number(description=None):
        return schema._describe({"type": "number"}, description)

    @staticmethod
    def integer(description=None):
        return schema._describe({"type": "integer"}, description)

    @staticmethod
    def boolean(description=None):
        return schema._describe({"type": "boolean"}, description)

    @staticmethod
    def array(items, description=None):
        return schema._describe({"type": "array", "items": items}, description)

    @staticmethod
    def one_of(values, description=None):
        return schema._describe({"type": "string", "enum": list(values)}, description)

    @staticmethod
    def object(properties=None, required=()):
        return {"type": "object", "properties": dict(properties or {}), "required": list(required)}


_TYPE_NAMES = {
    "string": "a string",
    "number": "a number",
    "integer": "an integer",
    "boolean": "a boolean",
    "array": "an array",
    "object": "an object",
    "null": "null",
}


def _has_type(value, kind):
    if kind == "string":
        return isinstance(value, str)
    if kind == "number":
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if kind == "integer":
        return isinstance(value, int) and not isinstance(value, bool)
    if kind == "boolean":
        return isinstance(value, bool)
    if kind == "array":
        return isinstance(value, list)
    if kind == "object":
        return isinstance(value, dict)
    if kind == "null":
        return value is None
    return True


def validate(spec, value, path=""):
    """Why ``value`` does not fit ``spec`` (the subset tools use: ``type``,
    ``properties``, ``required``, ``enum``, ``items``,
    ``additionalProperties: false``), or ``None`` when it fits. ``path``
    names the field, as ``a.b[2]``."""
    if not isinstance(spec, dict):
        return None
    name = path or "the arguments"
    kinds = spec.get("type")
    kinds = [] if kinds is None else ([kinds] if isinstance(kinds, str) else list(kinds))
    if kinds and not any(_has_type(value, kind) for kind in kinds):
        wanted = " or ".join(_TYPE_NAMES.get(kind, kind) for kind in kinds)
        return f"`{name}` must be {wanted}"
    allowed = spec.get("enum")
    if isinstance(allowed, list) and not any(
        value == choice and type(value) is type(choice) for choice in allowed
    ):
        return f"`{name}` must be one of " + ", ".join(f"`{choice}`" for choice in allowed)
    if isinstance(value, dict):
        prefix = f"{path}." if path else ""
        for field in spec.get("required", []):
            if field not in value:
                return f"missing field `{prefix}{field}`"
        properties = spec.get("properties", {})
        for field, inner in value.items():
            if field in properties:
                problem = validate(properties[field], inner, prefix + field)
                if problem:
                    return problem
            elif spec.get("additionalProperties") is False:
                return f"unknown field `{prefix}{field}`"
    if isinstance(value, list) and isinstance(spec.get("items"), dict):
        for index, item in enumerate(value):
            problem = validate(spec["items"], item, f"{name}[{index}]")
            if problem:
                return problem
    return None


# ---------------------------------------------------------------------------
# Capabilities


class CapabilityError(Exception):
    """A capability call that failed: ``kind`` is ``denied``, ``not-found``,
    ``too-large``, ``timeout``, ``invalid`` or ``failed``."""

    def __init__(self, kind, detail):
        self.kind = kind
        self.detail = detail
        if kind == "denied":
            self.capability = detail.capability
            self.subject = detail.subject
            self.reason = detail.reason
            message = f"{detail.capability} `{detail.subject}` refused: {detail.reason}"
        elif kind == "not-found":
            message = f"`{detail}` not found"
        elif kind == "too-large":
            message = f"larger than the {detail}-byte cap"
        elif kind == "timeout":
            message = f"timed out after {detail} ms"
        elif kind == "invalid":
            message = f"invalid request: {detail}"
        else:
            message = str(detail)
        super().__init__(message)


def _host(interface, function, *args):
    """Calls ``zot:host/<interface>.<function>``, turning its error variant
    (componentize-py raises ``Err(Error_Denied(...))``) into a
    :class:`CapabilityError`."""
    try:
        module = __import__(f"wit_world.imports.{interface}", fromlist=[interface])
    except ImportError as error:
        raise CapabilityError(
            "failed",
            f"`zot:host/{interface}` is not imported by this build's world "
            f"(add `import zot:host/{interface}@0.1.0;` to wit/world.wit): {error}",
        ) from None
    try:
        return getattr(module, function)(*args)
    except Exception as error:  # noqa: BLE001 (componentize-py's `Err`)
        variant = getattr(error, "value", None)
        name = type(variant).__name__
        if name.startswith("Error_"):
            kind = re.sub(r"(?<!^)(?=[A-Z])", "-", name[len("Error_"):]).lower()
            raise CapabilityError(kind, variant.value) from None
        raise


def read_file(path):
    """The bytes of a workspace file (needs a ``read`` grant)."""
    return _host("fs", "read", str(path))


def write_file(path, contents):
    """Creates or replaces a workspace file (needs a ``write`` grant)."""
    data = contents.encode() if isinstance(contents, str) else bytes(contents)
    return _host("fs", "write", str(path), data)


def fetch(url):
    """A GET of an ``https://`` URL (needs an ``http`` grant): the response
    with ``status``, ``headers`` and ``body`` (bytes)."""
    module = __import__("wit_world.imports.http", fromlist=["http"])
    request = module.Request(module.Method.GET, str(url), [], None)
    return _host("http", "fetch", request)


def run_shell(command):
    """Runs ``command`` (needs a ``shell`` grant); its output has ``stdout``,
    ``stderr``, ``exit_code`` and ``truncated``."""
    return _host("shell", "run", str(command))


# ---------------------------------------------------------------------------
# The session


class Context:
    """What a handler may do besides answering: notes, panels, logs."""

    def __init__(self, name, send, log):
        self.name = name
        self.hello_ack = None
        self._send = send
        self._log = log

    def notify(self, level, message):
        """Shows a one-shot note to the user."""
        self._send({"type": "notify", "level": str(level), "message": str(message)})

    def clear_notes(self):
        """Retracts every note this extension has shown."""
        self._send({"type": "clear_notes"})

    def render_panel(self, panel):
        """Draws (or redraws) a :class:`Panel` this extension owns."""
        self._send({"type": "panel_render", **panel.fields("panel_id")})

    def close_panel(self, panel_id):
        """Closes a panel this extension owns."""
        self._send({"type": "panel_close", "panel_id": str(panel_id)})

    def log(self, message):
        """One line to the log (stderr), never to stdout."""
        self._log(f"{self.name}: {message}")


def _registering(register):
    """Lets a ``register(..., handler)`` method also be a decorator: given
    the handler (last, or as ``handler=``) it registers it and returns the
    extension; without, it returns a decorator."""
    arity = register.__code__.co_argcount - 1  # without `self`

    def method(self, *args, handler=None):
        if handler is not None:
            return register(self, *args, handler)
        if len(args) == arity:
            return register(self, *args)

        def decorator(function):
            register(self, *args, function)
            return function

        return decorator

    method.__doc__ = register.__doc__
    return method


class Extension:
    """A zot extension: its identity, what it registers, the handlers behind it.

    ``command``, ``tool``, ``tool_json`` and ``on`` take the handler last
    (and return the extension, to chain) or decorate it; ``intercept_*`` and
    ``on_panel_*`` take the handler or decorate it.
    """

    def __init__(self, name, version):
        self.name = str(name)
        self.version = str(version)
        self.commands = {}
        self.tools = {}
        self.event_handlers = []
        self.interceptors = {"tool_call": [], "turn_start": [], "assistant_message": []}
        self.panel_handlers = {}

    def _command(self, name, description, handler):
        """Registers ``/name``; ``handler(ctx, args)`` gets what the user typed
        after it and returns a :class:`Response` (a string is displayed)."""
        self.commands[str(name)] = (str(description), handler)
        return self

    command = _registering(_command)

    def _tool(self, name, description, spec, handler):
        """Registers a tool with typed arguments: they are checked against
        ``spec`` before ``handler(ctx, args)`` runs; arguments that do not fit
        never reach it, the model gets an error result naming the field.
        Absent arguments count as ``{}``. The handler returns a
        :class:`ToolOutput` or a string."""
        tool_name = str(name)

        def typed(ctx, args):
            value = {} if args is None else args
            problem = validate(spec, value)
            if problem:
                return ToolOutput.error(f"invalid arguments for tool `{tool_name}`: {problem}")
            return handler(ctx, value)

        self.tools[tool_name] = (str(description), spec, typed)
        return self

    tool = _registering(_tool)

    def _tool_json(self, name, description, spec, handler):
        """Registers a tool whose handler gets the arguments as sent."""
        self.tools[str(name)] = (str(description), spec, handler)
        return self

    tool_json = _registering(_tool_json)

    def _on(self, events, handler):
        """Runs ``handler(ctx, event)`` for the named events (``None``: all)."""
        names = None if events is None else ([events] if isinstance(events, str) else list(events))
        self.event_handlers.append((names, handler))
        return self

    on = _registering(_on)

    def intercept_tool_call(self, handler):
        """Asked before each tool call: ``handler(ctx, tool_name, args)`` returns
        a :class:`Verdict`. Usable as a decorator. The manifest must list
        ``tool_call`` in ``capabilities.events`` (and in ``capabilities.rewrite``
        for a rewrite to count)."""
        self.interceptors["tool_call"].append(handler)
        return handler

    def intercept_turn_start(self, handler):
        """Asked before each turn: ``handler(ctx, step)`` (block or allow)."""
        self.interceptors["turn_start"].append(handler)
        return handler

    def intercept_assistant_message(self, handler):
        """Asked about each assistant message: ``handler(ctx, text)``."""
        self.interceptors["assistant_message"].append(handler)
        return handler

    def on_panel_key(self, handler):
        """``handler(ctx, panel_id, key, text)`` for each key in its panels."""
        self.panel_handlers["key"] = handler
        return handler

    def on_panel_resize(self, handler):
        """``handler(ctx, panel_id, width, height)`` when a panel is resized."""
        self.panel_handlers["resize"] = handler
        return handler

    def on_panel_close(self, handler):
        """``handler(ctx, panel_id)`` when the host closes one of its panels."""
        self.panel_handlers["close"] = handler
        return handler

    # -- running ------------------------------------------------------------

    def run(self):
        """Runs the session over stdin and stdout (WASI's in the sandbox)."""
        self.run_with(sys.stdin, sys.stdout, sys.stderr)

    def run_with(self, reader, writer, log):
        """Runs the session over text streams: frames from ``reader``, frames
        to ``writer`` (flushed after each), log lines to ``log``."""

        def send(frame):
            try:
                text = json.dumps(frame, ensure_ascii=False)
            except (TypeError, ValueError, RecursionError) as error:
                # A handler's answer JSON cannot hold (arguments nested past
                # Python's recursion limit, a set): the request still gets
                # an answer, a failed one, and the session goes on.
                instead = _unwritable(frame, error)
                if instead is None:
                    write_log(f"{self.name}: dropped a frame JSON cannot hold: {error}")
                    return
                text = json.dumps(instead, ensure_ascii=False)
            # A lone surrogate (half of an emoji a handler cut) cannot be
            # written as UTF-8, and as an escape zot's reader refuses it:
            # U+FFFD stands for it.
            line = _LONE_SURROGATE.sub("\ufffd", text)
            writer.write(line + "\n")
            writer.flush()

        def write_log(line):
            try:
                log.write(line + "\n")
                log.flush()
            except (OSError, ValueError):
                pass  # a log that cannot be written has nowhere to report that

        ctx = Context(self.name, send, write_log)
        for frame in self.registration():
            send(frame)
        while True:
            line = reader.readline(MAX_FRAME + 1)
            if not line:
                return
            if len(line) > MAX_FRAME and not line.endswith("\n"):
                self._answer_unreadable(ctx, line, f"a frame over the {MAX_FRAME}-byte cap")
                while line and not line.endswith("\n"):
                    line = reader.readline(MAX_FRAME + 1)
                continue
            if self._handle_line(ctx, line) == "stop":
                return

    def registration(self):
        """The frames that open the session, in order."""
        subscribe = self.subscription()
        capabilities = []
        if self.commands:
            capabilities.append("commands")
        if self.tools:
            capabilities.append("tools")
        events = bool(subscribe["events"] or subscribe["intercept"])
        if events:
            capabilities.append("events")
        frames = [{"type": "hello", "name": self.name, "version": self.version,
                   "capabilities": capabilities}]
        for name, (description, _) in self.commands.items():
            frames.append({"type": "register_command", "name": name, "description": description})
        for name, (description, spec, _) in self.tools.items():
            frames.append({"type": "register_tool", "name": name, "description": description,
                           "schema": spec})
        if events:
            frames.append({"type": "subscribe", **subscribe})
        frames.append({"type": "ready"})
        return frames

    def subscription(self):
        events = []
        for names, _ in self.event_handlers:
            for name in EVENTS if names is None else names:
                if name not in events:
                    events.append(name)
        intercept = [kind for kind, handlers in self.interceptors.items() if handlers]
        return {"events": events, "intercept": intercept}

    def _answer_unreadable(self, ctx, line, why):
        head = line[:4096]
        kind = re.search(r'"type"\s*:\s*"([a-z_]+)"', head)
        call = re.search(r'"id"\s*:\s*"((?:[^"\\]|\\.)*)"', head)
        if call is None:
            ctx.log(f"skipped a frame from the host: {why}")
            return
        kind = kind.group(1) if kind else None
        call_id = call.group(1)
        reason = f"extension `{self.name}` could not read the request: {why}"
        ctx.log(f"answered a `{kind}` from the host it could not read: {why}")
        if kind == "event_intercept":
            ctx._send({"type": "event_intercept_response", "id": call_id, "block": True,
                       "reason": reason})
        elif kind == "tool_call":
            ctx._send(ToolOutput.error(reason).frame(call_id))
        elif kind == "command_invoked":
            ctx._send(Response.error(reason).frame(call_id))

    def _handle_line(self, ctx, line):
        if not line.strip():
            return "continue"
        try:
            frame = json.loads(line, object_pairs_hook=_in_read_order)
        except ValueError as error:
            self._answer_unreadable(ctx, line, f"not JSON: {error}")
            return "continue"
        except RecursionError:
            # The model writes the arguments, and Go reads 10 000 levels
            # deep: past Python's limit this ended the extension (a guard
            # among them, whose checks zot then let through).
            self._answer_unreadable(ctx, line, "nested deeper than Python can read")
            return "continue"
        if not isinstance(frame, dict):
            ctx.log("skipped a frame from the host: not a JSON object")
            return "continue"
        kind = frame.get("type")
        if kind == "hello_ack":
            ctx.hello_ack = frame
        elif kind == "command_invoked":
            ctx._send(self._invoke_command(ctx, frame).frame(frame.get("id")))
        elif kind == "tool_call":
            ctx._send(self._call_tool(ctx, frame).frame(frame.get("id")))
        elif kind == "event":
            self._deliver_event(ctx, frame)
        elif kind == "event_intercept":
            ctx._send(self._intercept(ctx, frame))
        elif kind == "panel_key":
            self._panel(ctx, "key", frame.get("panel_id"), frame.get("key"), frame.get("text"))
        elif kind == "panel_resize":
            self._panel(ctx, "resize", frame.get("panel_id"), frame.get("width"),
                        frame.get("height"))
        elif kind == "panel_close":
            self._panel(ctx, "close", frame.get("panel_id"))
        elif kind == "shutdown":
            ctx._send({"type": "shutdown_ack"})
            return "stop"
        return "continue"

    @staticmethod
    def _failed(ctx, what, error):
        ctx.log(f"{what} failed: {error}\n{traceback.format_exc().rstrip()}")

    def _invoke_command(self, ctx, frame):
        name = frame.get("name")
        if name not in self.commands:
            return Response.error(f"unknown command `{name}`")
        args = frame.get("args")
        try:
            answer = self.commands[name][1](ctx, args if isinstance(args, str) else "")
        except Exception as error:  # noqa: BLE001 (the extension goes on)
            self._failed(ctx, f"command `{name}`", error)
            return Response.error(f"command `{name}`: {error}")
        return answer if isinstance(answer, Response) else Response.display(answer)

    def _call_tool(self, ctx, frame):
        name = frame.get("name")
        if name not in self.tools:
            return ToolOutput.error(f"unknown tool `{name}`")
        try:
            output = self.tools[name][2](ctx, frame.get("args"))
        except Exception as error:  # noqa: BLE001 (the extension goes on)
            self._failed(ctx, f"tool `{name}`", error)
            return ToolOutput.error(f"tool `{name}`: {error}")
        if isinstance(output, ToolOutput):
            return output
        return ToolOutput.text(output if isinstance(output, str) else json.dumps(output))

    def _deliver_event(self, ctx, frame):
        event = frame.get("event")
        for names, handler in self.event_handlers:
            if event in (EVENTS if names is None else names):
                try:
                    handler(ctx, frame)
                except Exception as error:  # noqa: BLE001
                    self._failed(ctx, "event handler", error)

    def _panel(self, ctx, which, *args):
        handler = self.panel_handlers.get(which)
        if handler is None:
            return
        try:
            handler(ctx, *args)
        except Exception as error:  # noqa: BLE001
            self._failed(ctx, f"panel {which} handler", error)

    def _intercept(self, ctx, request):
        """Asks every interceptor of the request's kind, in order: the first
        block wins, rewrites chain. A ``tool_call`` interceptor that raises
        blocks (the call it choked on is the one to stop); another kind's
        counts as allowing."""
        kind = request.get("event")
        answer = {"type": "event_intercept_response", "id": request.get("id"), "block": False}
        args = request.get("tool_args")
        args = args if isinstance(args, dict) else {}
        args = _as_zot_reads(request.get("tool_name") or "", args)
        text = request.get("text") or ""
        rewritten = replaced = False
        for handler in self.interceptors.get(kind, []):
            try:
                if kind == "tool_call":
                    verdict = handler(ctx, request.get("tool_name") or "", args)
                elif kind == "turn_start":
                    verdict = handler(ctx, request.get("step") or 0)
                else:
                    verdict = handler(ctx, text)
            except Exception as error:  # noqa: BLE001
                # A guard that cannot decide refuses: allowing would let
                # through exactly the call it choked on.
                if kind == "tool_call":
                    self._failed(ctx, "`tool_call` interceptor (blocking)", error)
                    return {"type": "event_intercept_response", "id": request.get("id"),
                            "block": True,
                            "reason": f"the `tool_call` interceptor failed ({error}); "
                                      "blocked to be safe"}
                self._failed(ctx, f"`{kind}` interceptor (allowing)", error)
                continue
            verdict = verdict or Verdict.allow()
            if verdict.kind == "block":
                blocked = {"type": "event_intercept_response", "id": request.get("id"),
                           "block": True}
                if verdict.value:
                    blocked["reason"] = verdict.value
                return blocked
            if verdict.kind == "rewrite" and kind == "tool_call":
                if isinstance(verdict.value, dict):
                    args, rewritten = verdict.value, True
                else:
                    ctx.log("ignored a `tool_call` rewrite whose arguments are not a JSON object")
            elif verdict.kind == "replace_text" and kind == "assistant_message":
                text, replaced = verdict.value, True
            elif verdict.kind != "allow":
                ctx.log(f"ignored a `{verdict.kind}` verdict on a `{kind}` intercept, "
                        "which does not allow it")
        if rewritten:
            answer["modified_args"] = args
        if replaced:
            answer["replace_text"] = text
        return answer
