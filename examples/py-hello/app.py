"""py-hello: a zot extension in Python, built into a WASI component.

It uses zotbox's guest library (`zotbox.py`, a copy of
guest-sdk/python/zotbox.py) and shows each thing an extension does: a slash
command (/py-hello), a typed tool (py_greet) with a notify, a tool_call
intercept (refusing `rm -rf /`), and a capability call (py_read_file) that
the sandbox refuses unless the manifest asks for `read` and the policy
grants it.

Build (what `zotbox ext build` runs): componentize-py -d wit componentize app -o py-hello.wasm
"""

from wit_world import exports

from zotbox import CapabilityError, Extension, Level, Response, ToolOutput, Verdict, read_file, schema

extension = Extension("py-hello", "1.0.0")


@extension.command("py-hello", "say hello (Python)")
def hello(ctx, args):
    who = args.strip() or "the user"
    return Response.prompt(f"Say hello to {who} in one short sentence.")


@extension.tool("py_greet", "Greet someone by name.",
                schema.object({"name": schema.string("who to greet")}, ["name"]))
def greet(ctx, args):
    ctx.notify(Level.INFO, f"greeting {args['name']}")
    return ToolOutput.text(f"hello, {args['name']} (from Python)")


@extension.tool("py_read_file", "Read a file of the workspace (needs a `read` grant).",
                schema.object({"path": schema.string("a path in the workspace")}, ["path"]))
def read(ctx, args):
    try:
        return ToolOutput.text(f"read {len(read_file(args['path']))} bytes")
    except CapabilityError as error:
        return ToolOutput.error(f"cannot read: {error}")


@extension.intercept_tool_call
def guard(ctx, tool, args):
    if tool == "bash" and str(args.get("command", "")).strip() == "rm -rf /":
        return Verdict.block("refused by py-hello: `rm -rf /` deletes the whole filesystem")
    return Verdict.allow()


class Run(exports.Run):
    def run(self) -> None:
        extension.run()
