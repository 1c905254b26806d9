"""py-hello: a zot extension in Python, built into a WASI component.

It speaks the protocol directly (newline-delimited JSON on stdin and
stdout): a slash command (/py-hello), a tool with arguments (py_greet)
and a notify.

Build (what `zotbox ext build` runs): componentize-py -d wit componentize app -o py-hello.wasm
"""

import json
import sys

from wit_world import exports


def emit(frame):
    sys.stdout.write(json.dumps(frame) + "\n")
    sys.stdout.flush()


def text(call_id, message, is_error=False):
    frame = {"type": "tool_result", "id": call_id, "content": [{"type": "text", "text": message}]}
    if is_error:
        frame["is_error"] = True
    return frame


def command(frame):
    who = (frame.get("args") or "").strip() or "the user"
    emit({"type": "command_response", "id": frame["id"], "action": "prompt",
          "prompt": f"Say hello to {who} in one short sentence."})


def tool(frame):
    args = frame.get("args") or {}
    name = args.get("name")
    if not isinstance(name, str):
        emit(text(frame["id"], "invalid arguments for tool `py_greet`: `name` must be a string", True))
        return
    emit({"type": "notify", "level": "info", "message": f"greeting {name}"})
    emit(text(frame["id"], f"hello, {name} (from Python)"))


class Run(exports.Run):
    def run(self) -> None:
        emit({"type": "hello", "name": "py-hello", "version": "1.0.0",
              "capabilities": ["commands", "tools"]})
        emit({"type": "register_command", "name": "py-hello", "description": "say hello (Python)"})
        emit({"type": "register_tool", "name": "py_greet", "description": "Greet someone by name.",
              "schema": {"type": "object", "properties": {"name": {"type": "string"}},
                         "required": ["name"]}})
        emit({"type": "ready"})
        for line in sys.stdin:
            if not line.strip():
                continue
            frame = json.loads(line)
            kind = frame.get("type")
            if kind == "command_invoked" and frame.get("name") == "py-hello":
                command(frame)
            elif kind == "tool_call" and frame.get("name") == "py_greet":
                tool(frame)
            elif kind == "tool_call":
                emit(text(frame["id"], f"unknown tool `{frame.get('name')}`", True))
            elif kind == "shutdown":
                emit({"type": "shutdown_ack"})
                return
