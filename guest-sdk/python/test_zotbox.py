"""Tests of zotbox.py with a plain python3: frames in, frames out.

Run: python3 -m unittest discover -s guest-sdk/python -v
(the Rust e2e test `langs::the_python_guest_library_passes_its_tests` runs it).
"""

import io
import json
import os
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from zotbox import (  # noqa: E402
    MAX_FRAME,
    Extension,
    Level,
    Panel,
    Response,
    ToolOutput,
    Verdict,
    schema,
)


def session(extension, *frames, raw=None):
    """Runs ``extension`` over ``frames`` (dicts, or strings sent as they
    are) and returns (frames written, log lines)."""
    lines = raw if raw is not None else "".join(
        (frame if isinstance(frame, str) else json.dumps(frame)) + "\n" for frame in frames
    )
    out, log = io.StringIO(), io.StringIO()
    extension.run_with(io.StringIO(lines), out, log)
    return [json.loads(line) for line in out.getvalue().splitlines()], log.getvalue()


# An `event_intercept` of bash whose arguments are written as they are.
RAW_CHECK = ('{"type":"event_intercept","id":"%s","event":"tool_call",'
             '"tool_name":"bash","tool_args":%s}')


def answers(extension, *frames):
    """The frames written after the registration."""
    written, _ = session(extension, *frames)
    return written[len(extension.registration()):]


def weather():
    extension = Extension("weather", "1.0.0")

    @extension.tool("weather", "the weather",
                    schema.object({"city": schema.string("the city"),
                                   "units": schema.one_of(["celsius", "fahrenheit"]),
                                   "days": schema.integer(),
                                   "tags": schema.array(schema.string())}, ["city"]))
    def forecast(ctx, args):
        ctx.notify(Level.INFO, f"looking up {args['city']}")
        return ToolOutput.text(f"{args['city']}: 1°C")

    return extension


class Registration(unittest.TestCase):
    def test_a_full_extension_says_hello_registers_subscribes_and_is_ready(self):
        extension = weather().command("hi", "say hi", lambda ctx, args: "hi")
        extension.intercept_tool_call(lambda ctx, tool, args: Verdict.allow())
        extension.on("turn_end", lambda ctx, event: None)
        written, _ = session(extension)
        self.assertEqual([frame["type"] for frame in written],
                         ["hello", "register_command", "register_tool", "subscribe", "ready"])
        self.assertEqual(written[0], {"type": "hello", "name": "weather", "version": "1.0.0",
                                      "capabilities": ["commands", "tools", "events"]})
        self.assertEqual(written[2]["schema"]["required"], ["city"])
        self.assertEqual(written[3], {"type": "subscribe", "events": ["turn_end"],
                                      "intercept": ["tool_call"]})

    def test_an_empty_extension_sends_no_subscribe(self):
        written, _ = session(Extension("x", "1"))
        self.assertEqual(written, [
            {"type": "hello", "name": "x", "version": "1", "capabilities": []},
            {"type": "ready"},
        ])

    def test_handlers_may_be_passed_or_decorated(self):
        extension = Extension("x", "1").command("a", "d", lambda ctx, args: "A")

        @extension.command("b", "d")
        def b(ctx, args):
            return "B"

        self.assertEqual(list(extension.commands), ["a", "b"])
        self.assertEqual(b(None, ""), "B")


class Tools(unittest.TestCase):
    def test_typed_arguments_reach_the_handler_and_a_note_goes_first(self):
        got = answers(weather(), {"type": "tool_call", "id": "1", "name": "weather",
                                  "args": {"city": "Oslo", "days": 2, "tags": ["a"]}})
        self.assertEqual(got, [
            {"type": "notify", "level": "info", "message": "looking up Oslo"},
            {"type": "tool_result", "id": "1", "content": [{"type": "text", "text": "Oslo: 1°C"}]},
        ])

    def test_arguments_that_do_not_fit_the_schema_never_reach_the_handler(self):
        cases = [
            (None, "missing field `city`"),
            ({}, "missing field `city`"),
            ({"city": 3}, "`city` must be a string"),
            ({"city": "Oslo", "units": "kelvin"}, "`units` must be one of `celsius`, `fahrenheit`"),
            ({"city": "Oslo", "days": 1.5}, "`days` must be an integer"),
            ({"city": "Oslo", "days": True}, "`days` must be an integer"),
            ({"city": "Oslo", "tags": ["a", 2]}, "`tags[1]` must be a string"),
            ([1], "`the arguments` must be an object"),
        ]
        for args, problem in cases:
            with self.subTest(args=args):
                got = answers(weather(), {"type": "tool_call", "id": "7", "name": "weather",
                                          "args": args})
                self.assertEqual(got, [{
                    "type": "tool_result", "id": "7", "is_error": True,
                    "content": [{"type": "text",
                                 "text": f"invalid arguments for tool `weather`: {problem}"}],
                }])

    def test_an_unknown_tool_and_a_raising_handler_are_error_results(self):
        extension = Extension("x", "1").tool_json("boom", "d", {}, lambda ctx, args: 1 / 0)
        got = answers(extension,
                      {"type": "tool_call", "id": "1", "name": "nope", "args": {}},
                      {"type": "tool_call", "id": "2", "name": "boom", "args": {}},
                      {"type": "tool_call", "id": "3", "name": "boom", "args": {}})
        self.assertEqual([(frame["id"], frame["content"][0]["text"], frame["is_error"])
                          for frame in got],
                         [("1", "unknown tool `nope`", True),
                          ("2", "tool `boom`: division by zero", True),
                          ("3", "tool `boom`: division by zero", True)])

    def test_an_image_block_follows_the_text(self):
        output = ToolOutput.text("chart:").with_image("image/png", "iVBO")
        self.assertEqual(output.frame("1")["content"][1],
                         {"type": "image", "mime_type": "image/png", "data": "iVBO"})


class Commands(unittest.TestCase):
    def test_each_response_kind_has_its_frame(self):
        panel = Panel("p", "Notes", ["one"], footer="q to close")
        cases = [
            (Response.prompt("p"), {"action": "prompt", "prompt": "p"}),
            (Response.insert("i"), {"action": "insert", "insert": "i"}),
            (Response.display("d"), {"action": "display", "display": "d"}),
            (Response.noop(), {"action": "noop"}),
            (Response.error("e"), {"action": "noop", "error": "e"}),
            (Response.display("d").with_error("e"), {"action": "display", "display": "d",
                                                      "error": "e"}),
            (Response.open_panel(panel), {"action": "open_panel", "open_panel": {
                "id": "p", "title": "Notes", "lines": ["one"], "footer": "q to close"}}),
            ("plain", {"action": "display", "display": "plain"}),
        ]
        for response, fields in cases:
            with self.subTest(fields=fields):
                extension = Extension("x", "1").command("c", "d", lambda ctx, args, r=response: r)
                got = answers(extension, {"type": "command_invoked", "id": "9", "name": "c",
                                          "args": "x"})
                self.assertEqual(got, [{"type": "command_response", "id": "9", **fields}])

    def test_an_unknown_or_raising_command_answers_with_an_error(self):
        extension = Extension("x", "1").command("c", "d", lambda ctx, args: {}["k"])
        got = answers(extension,
                      {"type": "command_invoked", "id": "1", "name": "nope", "args": ""},
                      {"type": "command_invoked", "id": "2", "name": "c", "args": ""})
        self.assertEqual([frame["error"] for frame in got],
                         ["unknown command `nope`", "command `c`: 'k'"])


class Intercepts(unittest.TestCase):
    def test_the_first_block_wins_and_rewrites_chain(self):
        extension = Extension("g", "1")
        extension.intercept_tool_call(
            lambda ctx, tool, args: Verdict.rewrite({**args, "n": args.get("n", 0) + 1}))
        extension.intercept_tool_call(
            lambda ctx, tool, args: Verdict.rewrite({**args, "n": args["n"] * 10}))
        extension.intercept_tool_call(
            lambda ctx, tool, args: Verdict.block("no rm") if "rm" in args.get("command", "")
            else Verdict.allow())
        ask = {"type": "event_intercept", "event": "tool_call", "tool_name": "bash"}
        got = answers(extension, {**ask, "id": "1", "tool_args": {"command": "ls"}},
                      {**ask, "id": "2", "tool_args": {"command": "rm -rf /"}})
        self.assertEqual(got, [
            {"type": "event_intercept_response", "id": "1", "block": False,
             "modified_args": {"command": "ls", "n": 10}},
            {"type": "event_intercept_response", "id": "2", "block": True, "reason": "no rm"},
        ])

    def test_turn_start_and_assistant_message_intercepts(self):
        extension = Extension("g", "1")
        extension.intercept_turn_start(
            lambda ctx, step: Verdict.block("enough") if step > 3 else Verdict.allow())
        extension.intercept_assistant_message(
            lambda ctx, text: Verdict.replace_text(text.replace("secret", "[redacted]")))
        got = answers(
            extension,
            {"type": "event_intercept", "id": "1", "event": "turn_start", "step": 2},
            {"type": "event_intercept", "id": "2", "event": "turn_start", "step": 4},
            {"type": "event_intercept", "id": "3", "event": "assistant_message",
             "text": "the secret is 42"},
        )
        self.assertEqual(got, [
            {"type": "event_intercept_response", "id": "1", "block": False},
            {"type": "event_intercept_response", "id": "2", "block": True, "reason": "enough"},
            {"type": "event_intercept_response", "id": "3", "block": False,
             "replace_text": "the [redacted] is 42"},
        ])

    def test_a_guard_of_zots_own_tools_sees_what_they_will_read(self):
        # zot's tools read keys in any case, the last one winning (Go's
        # encoding/json); natively zot hands the guard the model's spelling.
        extension = Extension("g", "1")
        extension.intercept_tool_call(
            lambda ctx, tool, args: Verdict.block("no")
            if "rm -rf" in str(args.get("command")) else Verdict.allow())

        def check(call_id, tool, args):
            return {"type": "event_intercept", "id": call_id, "event": "tool_call",
                    "tool_name": tool, "tool_args": args}
        got = answers(
            extension,
            check("1", "bash", {"Command": "rm -rf /"}),
            check("2", "bash", {"command": "ls", "COMMAND": "rm -rf /"}),
            check("3", "bash", {"COMMAND": "rm -rf /", "command": "ls"}),
            # An extension's tool may read its keys by their case.
            check("4", "deploy", {"command": "ls", "COMMAND": "rm -rf /"}),
            # A key written again after another spelling is the last one
            # (a dict keeps it where it first stood), both ways round.
            RAW_CHECK % ("5", '{"command":"ls","COMMAND":"ls","command":"rm -rf /"}'),
            RAW_CHECK % ("6", '{"command":"rm -rf /","COMMAND":"rm -rf /","command":"ls"}'),
            # A `null` after the value leaves it: Go ignores it for a string.
            RAW_CHECK % ("7", '{"command":"rm -rf /","command":null}'),
            RAW_CHECK % ("8", '{"command":"rm -rf /","COMMAND":null}'),
            RAW_CHECK % ("9", '{"command":null,"Command":"rm -rf /","command":null}'),
            # zot's other shell tool reads its keys the same way.
            check("10", "powershell", {"COMMAND": "rm -rf /"}),
        )
        self.assertEqual(got, [
            {"type": "event_intercept_response", "id": "1", "block": True, "reason": "no"},
            {"type": "event_intercept_response", "id": "2", "block": True, "reason": "no"},
            {"type": "event_intercept_response", "id": "3", "block": False},
            {"type": "event_intercept_response", "id": "4", "block": False},
            {"type": "event_intercept_response", "id": "5", "block": True, "reason": "no"},
            {"type": "event_intercept_response", "id": "6", "block": False},
            {"type": "event_intercept_response", "id": "7", "block": True, "reason": "no"},
            {"type": "event_intercept_response", "id": "8", "block": True, "reason": "no"},
            {"type": "event_intercept_response", "id": "9", "block": True, "reason": "no"},
            {"type": "event_intercept_response", "id": "10", "block": True, "reason": "no"},
        ])

    def test_arguments_nested_past_pythons_limit_are_answered_and_the_session_goes_on(self):
        # Attack: Go reads JSON 10 000 levels deep, Python about 1 000: a
        # model's nested argument raised RecursionError and ended the
        # extension, and zot let the checks of a guard that was gone through.
        extension = Extension("g", "1")
        # A handler's answer JSON cannot hold (here a set; arguments deep
        # enough that writing them back passes the limit do the same).
        extension.intercept_tool_call(
            lambda ctx, tool, args: Verdict.rewrite({"command": {args["command"]}}))

        @extension.tool("echo", "echo", schema.object({}))
        def echo(ctx, args):
            return ToolOutput.text("ok")

        deep = "[" * 5000 + "]" * 5000
        got = answers(
            extension,
            '{"type":"tool_call","id":"1","name":"echo","args":{"a":%s}}' % deep,
            RAW_CHECK % ("2", '{"command":"rm -rf /","a":%s}' % deep),
            RAW_CHECK % ("3", '{"command":"ls"}'),
            {"type": "tool_call", "id": "4", "name": "echo", "args": {}},
        )
        cannot_read = "extension `g` could not read the request: nested deeper than Python can read"
        self.assertEqual(got[:2], [
            {"type": "tool_result", "id": "1", "content": [{"type": "text", "text": cannot_read}],
             "is_error": True},
            {"type": "event_intercept_response", "id": "2", "block": True,
             "reason": cannot_read},
        ])
        self.assertEqual((got[2]["id"], got[2]["block"]), ("3", True), got[2])
        self.assertTrue(got[2]["reason"].startswith(
            "the extension's answer could not be written as JSON"), got[2])
        self.assertEqual(got[3], {"type": "tool_result", "id": "4",
                                  "content": [{"type": "text", "text": "ok"}]})

    def test_a_lone_surrogate_is_written_as_u_fffd(self):
        # A guard that quotes half of an emoji (a lone surrogate, as zot's
        # JSON can carry one natively) must still write a frame.
        extension = Extension("g", "1")
        extension.intercept_tool_call(
            lambda ctx, tool, args: Verdict.block("refused: " + args["command"][:6]))
        got = answers(extension, {"type": "event_intercept", "id": "1", "event": "tool_call",
                                  "tool_name": "bash", "tool_args": {"command": "echo \ud83d"}})
        self.assertEqual(got, [{"type": "event_intercept_response", "id": "1", "block": True,
                                "reason": "refused: echo \ufffd"}])

    def test_a_raising_guard_blocks_and_a_verdict_out_of_place_is_ignored(self):
        # A guard that cannot decide refuses: the call it choked on (a
        # `shlex.split` of `rm -rf / #'`, say) is the one to stop.
        extension = Extension("g", "1")
        extension.intercept_tool_call(lambda ctx, tool, args: Verdict.replace_text("x"))
        extension.intercept_tool_call(lambda ctx, tool, args: [][1])
        written, log = session(extension, {"type": "event_intercept", "id": "1",
                                           "event": "tool_call", "tool_name": "t"})
        self.assertEqual(written[-1], {
            "type": "event_intercept_response", "id": "1", "block": True,
            "reason": "the `tool_call` interceptor failed (list index out of range); "
                      "blocked to be safe"})
        self.assertIn("`tool_call` interceptor (blocking) failed: list index out of range", log)
        self.assertIn("ignored a `replace_text` verdict on a `tool_call` intercept", log)
        # Another kind's interceptor that raises still allows.
        extension = Extension("g", "1")
        extension.intercept_turn_start(lambda ctx, step: [][1])
        written, log = session(extension, {"type": "event_intercept", "id": "2",
                                           "event": "turn_start", "step": 1})
        self.assertEqual(written[-1], {"type": "event_intercept_response", "id": "2",
                                       "block": False})

    def test_a_check_that_cannot_be_read_is_answered_with_a_block(self):
        extension = Extension("g", "1")
        extension.intercept_tool_call(lambda ctx, tool, args: Verdict.allow())
        got = answers(extension, '{"type":"event_intercept","id":"k1","event":"tool_call",'
                                 '"tool_args":{"command":"rm -rf /"')
        self.assertEqual(len(got), 1)
        self.assertEqual((got[0]["id"], got[0]["block"]), ("k1", True))
        self.assertTrue(got[0]["reason"].startswith(
            "extension `g` could not read the request: not JSON: "), got[0])

    def test_a_frame_over_the_cap_is_answered_and_the_next_one_read(self):
        extension = Extension("g", "1")
        extension.intercept_tool_call(lambda ctx, tool, args: Verdict.allow())
        huge = ('{"type":"event_intercept","id":"big","event":"tool_call","tool_args":{"x":"'
                + "a" * MAX_FRAME + '"}}\n')
        after = json.dumps({"type": "event_intercept", "id": "next", "event": "tool_call",
                            "tool_name": "t"}) + "\n"
        written, _ = session(extension, raw=huge + after)
        got = written[len(extension.registration()):]
        self.assertEqual([(frame["id"], frame["block"]) for frame in got],
                         [("big", True), ("next", False)])
        self.assertEqual(got[0]["reason"], "extension `g` could not read the request: "
                                           f"a frame over the {MAX_FRAME}-byte cap")


class Session(unittest.TestCase):
    def test_events_notes_panels_and_shutdown(self):
        extension = Extension("p", "1")
        seen = []
        extension.on(["turn_end"], lambda ctx, event: seen.append(event["event"]))
        extension.on_panel_key(lambda ctx, panel, key, text: ctx.render_panel(
            Panel(panel, "Notes", [f"{key}:{text}"])))
        extension.on_panel_close(lambda ctx, panel: ctx.clear_notes())
        got = answers(
            extension,
            {"type": "hello_ack", "cwd": "/ws"},
            {"type": "event", "event": "turn_end", "stop": "end"},
            {"type": "event", "event": "turn_start", "step": 1},
            {"type": "panel_key", "panel_id": "n", "key": "a", "text": "a"},
            {"type": "panel_close", "panel_id": "n"},
            {"type": "shutdown"},
            {"type": "event", "event": "turn_end"},
        )
        self.assertEqual(seen, ["turn_end"])
        self.assertEqual(got, [
            {"type": "panel_render", "panel_id": "n", "lines": ["a:a"], "title": "Notes"},
            {"type": "clear_notes"},
            {"type": "shutdown_ack"},
        ])

    def test_lines_that_are_not_frames_are_skipped(self):
        written, log = session(Extension("x", "1"), "", "[1]", "nonsense", {"type": "mystery"})
        self.assertEqual([frame["type"] for frame in written], ["hello", "ready"])
        self.assertIn("x: skipped a frame from the host: not a JSON object", log)


if __name__ == "__main__":
    unittest.main()
