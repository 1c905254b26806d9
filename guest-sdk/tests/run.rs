//! The run loop, driven over in-memory bytes: what goes in as host frames,
//! what comes out as extension frames, compared as JSON values.

use std::cell::RefCell;
use std::io::{self, Read, Write};
use std::rc::Rc;

use serde::Deserialize;
use serde_json::{Value, json};
use zotbox_guest::{
    Context, Event, Extension, Level, Panel, Response, ToolOutput, Verdict, event_name, protocol,
    schema,
};

/// A writer the test keeps a handle on after the extension took it.
#[derive(Clone, Default)]
struct Shared(Rc<RefCell<Vec<u8>>>);

impl Shared {
    fn text(&self) -> String {
        String::from_utf8_lossy(&self.0.borrow()).into_owned()
    }
}

impl Write for Shared {
    fn write(&mut self, bytes: &[u8]) -> io::Result<usize> {
        self.0.borrow_mut().extend_from_slice(bytes);
        Ok(bytes.len())
    }
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

/// A reader that hands out one byte per read, to split every frame.
struct Trickle<'a>(&'a [u8]);

impl Read for Trickle<'_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        match (self.0.split_first(), buf.first_mut()) {
            (Some((&byte, rest)), Some(slot)) => {
                *slot = byte;
                self.0 = rest;
                Ok(1)
            }
            _ => Ok(0),
        }
    }
}

/// What one run produced.
struct Run {
    result: io::Result<()>,
    frames: Vec<Value>,
    log: String,
}

impl Run {
    /// The frames after the registration (everything up to `ready`).
    fn answers(&self) -> &[Value] {
        let ready = self
            .frames
            .iter()
            .position(|frame| frame["type"] == "ready")
            .map_or(0, |at| at + 1);
        &self.frames[ready..]
    }
}

fn parse_output(bytes: &[u8]) -> Vec<Value> {
    let text = String::from_utf8_lossy(bytes);
    assert!(
        text.is_empty() || text.ends_with('\n'),
        "output does not end with a newline: {text}"
    );
    text.lines()
        .map(|line| {
            serde_json::from_str(line)
                .unwrap_or_else(|err| panic!("stdout line is not JSON ({err}): {line}"))
        })
        .collect()
}

/// Runs `extension` on `input` (text, fed in one piece).
fn drive_raw(extension: Extension, input: &str) -> Run {
    drive_bytes(extension, input.as_bytes())
}

/// Runs `extension` on `input` (raw bytes, fed in one piece).
fn drive_bytes(extension: Extension, input: &[u8]) -> Run {
    let log = Shared::default();
    let mut out = Vec::new();
    let result = extension.log_to(log.clone()).run_with(input, &mut out);
    Run {
        result,
        frames: parse_output(&out),
        log: log.text(),
    }
}

/// Runs `extension` on host frames, one per line, ending the input after them.
fn drive(extension: Extension, input: &[Value]) -> Run {
    let mut wire = String::new();
    for frame in input {
        wire.push_str(&frame.to_string());
        wire.push('\n');
    }
    drive_raw(extension, &wire)
}

fn ok(run: &Run) {
    if let Err(err) = &run.result {
        panic!("run failed: {err}\nlog:\n{}", run.log);
    }
}

#[derive(Deserialize)]
struct WeatherArgs {
    city: String,
    #[serde(default)]
    days: u32,
}

fn weather() -> Extension {
    Extension::new("weather", "1.0.0")
        .command("hello", "say hi", |_ctx: &mut Context, args: &str| {
            Response::prompt(format!("say hi to {args}"))
        })
        .tool(
            "weather",
            "Get weather.",
            schema::object()
                .property("city", schema::string("the city"))
                .required(["city"]),
            |_ctx: &mut Context, args: WeatherArgs| {
                ToolOutput::text(format!("{}: sunny for {} days", args.city, args.days))
            },
        )
}

#[test]
fn registration_is_hello_commands_tools_subscribe_ready() {
    let extension = weather()
        .command("bye", "say bye", |_ctx, _args| Response::noop())
        .on_event([event_name::TURN_START, event_name::TOOL_CALL], |_, _| {})
        .on_event([event_name::TOOL_CALL, event_name::TURN_END], |_, _| {})
        .intercept_assistant_message(|_, _| Verdict::Allow)
        .intercept_tool_call(|_, _, _| Verdict::Allow);
    let run = drive(extension, &[]);
    ok(&run);
    assert_eq!(
        run.frames,
        vec![
            json!({"type":"hello","name":"weather","version":"1.0.0",
                   "capabilities":["commands","tools","events"]}),
            json!({"type":"register_command","name":"hello","description":"say hi"}),
            json!({"type":"register_command","name":"bye","description":"say bye"}),
            json!({"type":"register_tool","name":"weather","description":"Get weather.",
                   "schema":{"type":"object",
                             "properties":{"city":{"type":"string","description":"the city"}},
                             "required":["city"]}}),
            // Events in the order first named, without duplicates; intercepts
            // in a fixed order.
            json!({"type":"subscribe","events":["turn_start","tool_call","turn_end"],
                   "intercept":["tool_call","assistant_message"]}),
            json!({"type":"ready"}),
        ]
    );
}

#[test]
fn an_empty_extension_sends_hello_and_ready_only() {
    let run = drive(Extension::new("bare", "0.1.0"), &[]);
    ok(&run);
    assert_eq!(
        run.frames,
        vec![
            json!({"type":"hello","name":"bare","version":"0.1.0"}),
            json!({"type":"ready"}),
        ]
    );
}

#[test]
fn subscribing_to_all_events_names_every_event_and_the_events_capability() {
    let run = drive(Extension::new("audit", "1").on_all_events(|_, _| {}), &[]);
    ok(&run);
    assert_eq!(
        run.frames,
        vec![
            json!({"type":"hello","name":"audit","version":"1","capabilities":["events"]}),
            json!({"type":"subscribe","events":["session_start","turn_start","turn_end",
                                                "tool_call","assistant_message"]}),
            json!({"type":"ready"}),
        ]
    );
}

#[test]
fn a_command_registered_twice_keeps_its_place_and_its_last_handler() {
    let extension = weather().command("hello", "wave", |_ctx, _args| Response::display("👋"));
    let run = drive(
        extension,
        &[json!({"type":"command_invoked","id":"1","name":"hello","args":""})],
    );
    ok(&run);
    assert_eq!(
        run.frames[1],
        json!({"type":"register_command","name":"hello","description":"wave"})
    );
    assert_eq!(
        run.answers(),
        [json!({"type":"command_response","id":"1","action":"display","display":"👋"})]
    );
}

#[test]
fn commands_answer_with_their_id_and_action() {
    let extension = weather()
        .command("panel", "open a panel", |_ctx, _args| {
            Response::open_panel(
                Panel::new("p", "Todo")
                    .with_lines(["one"])
                    .with_footer("q quits"),
            )
        })
        .command("fails", "returns an error", |_ctx, args| {
            if args.is_empty() {
                Err("an argument is required")
            } else {
                Ok(Response::insert(args))
            }
        });
    let run = drive(
        extension,
        &[
            json!({"type":"command_invoked","id":"a","name":"hello","args":"berlin"}),
            json!({"type":"command_invoked","id":"b","name":"panel"}),
            json!({"type":"command_invoked","id":"c","name":"fails","args":""}),
            json!({"type":"command_invoked","id":"d","name":"fails","args":"x"}),
        ],
    );
    ok(&run);
    assert_eq!(
        run.answers(),
        [
            json!({"type":"command_response","id":"a","action":"prompt","prompt":"say hi to berlin"}),
            json!({"type":"command_response","id":"b","action":"open_panel",
                   "open_panel":{"id":"p","title":"Todo","lines":["one"],"footer":"q quits"}}),
            json!({"type":"command_response","id":"c","action":"noop",
                   "error":"an argument is required"}),
            json!({"type":"command_response","id":"d","action":"insert","insert":"x"}),
        ]
    );
}

#[test]
fn a_typed_tool_gets_its_arguments_and_bad_arguments_name_the_field() {
    let run = drive(
        weather(),
        &[
            json!({"type":"tool_call","id":"1","name":"weather","args":{"city":"Berlin","days":2}}),
            // A wrong type names the field's path.
            json!({"type":"tool_call","id":"2","name":"weather","args":{"city":3}}),
            // So does a missing field.
            json!({"type":"tool_call","id":"3","name":"weather","args":{}}),
            // Absent arguments count as `{}`.
            json!({"type":"tool_call","id":"4","name":"weather"}),
        ],
    );
    ok(&run);
    assert_eq!(
        run.answers(),
        [
            json!({"type":"tool_result","id":"1",
                   "content":[{"type":"text","text":"Berlin: sunny for 2 days"}]}),
            json!({"type":"tool_result","id":"2","is_error":true,"content":[{"type":"text",
                   "text":"invalid arguments for tool `weather`: city: invalid type: integer `3`, expected a string"}]}),
            json!({"type":"tool_result","id":"3","is_error":true,"content":[{"type":"text",
                   "text":"invalid arguments for tool `weather`: missing field `city`"}]}),
            json!({"type":"tool_result","id":"4","is_error":true,"content":[{"type":"text",
                   "text":"invalid arguments for tool `weather`: missing field `city`"}]}),
        ]
    );
}

#[test]
fn tools_may_return_results_strings_images_and_raw_json() {
    let extension = Extension::new("t", "1")
        .tool(
            "divide",
            "a / b",
            json!({"type":"object"}),
            |_ctx: &mut Context, (a, b): (i64, i64)| {
                a.checked_div(b)
                    .map(|q| q.to_string())
                    .ok_or(format!("cannot divide {a} by zero"))
            },
        )
        .tool_json("echo", "echo", schema::object(), |_ctx, args: Value| {
            args.to_string()
        })
        .tool_json("chart", "draw", schema::object(), |_ctx, _args| {
            ToolOutput::text("the chart:").with_image("image/png", "AAAA")
        });
    let run = drive(
        extension,
        &[
            json!({"type":"tool_call","id":"1","name":"divide","args":[7,2]}),
            json!({"type":"tool_call","id":"2","name":"divide","args":[7,0]}),
            json!({"type":"tool_call","id":"3","name":"echo"}),
            json!({"type":"tool_call","id":"4","name":"echo","args":{"k":[1]}}),
            json!({"type":"tool_call","id":"5","name":"chart","args":{}}),
        ],
    );
    ok(&run);
    assert_eq!(
        run.answers(),
        [
            json!({"type":"tool_result","id":"1","content":[{"type":"text","text":"3"}]}),
            json!({"type":"tool_result","id":"2","is_error":true,
                   "content":[{"type":"text","text":"cannot divide 7 by zero"}]}),
            // Raw tools see absent arguments as null.
            json!({"type":"tool_result","id":"3","content":[{"type":"text","text":"null"}]}),
            json!({"type":"tool_result","id":"4","content":[{"type":"text","text":"{\"k\":[1]}"}]}),
            json!({"type":"tool_result","id":"5","content":[
                {"type":"text","text":"the chart:"},
                {"type":"image","mime_type":"image/png","data":"AAAA"}]}),
        ]
    );
}

#[test]
fn unknown_commands_and_tools_get_errors() {
    let run = drive(
        weather(),
        &[
            json!({"type":"command_invoked","id":"1","name":"nope","args":""}),
            json!({"type":"tool_call","id":"2","name":"nope","args":{}}),
        ],
    );
    ok(&run);
    assert_eq!(
        run.answers(),
        [
            json!({"type":"command_response","id":"1","action":"noop",
                   "error":"unknown command `nope`"}),
            json!({"type":"tool_result","id":"2","is_error":true,
                   "content":[{"type":"text","text":"unknown tool `nope`"}]}),
        ]
    );
}

fn guard() -> Extension {
    Extension::new("guard", "1")
        .intercept_tool_call(|_ctx, tool, args| {
            let command = args["command"].as_str().unwrap_or_default();
            match tool {
                "bash" if command.contains("rm -rf") => Verdict::block("refused: `rm -rf`"),
                "bash" => Verdict::rewrite(json!({"command": format!("{command} --dry-run")})),
                "read" => Verdict::rewrite(json!("not an object")),
                "write" => Verdict::replace_text("wrong kind"),
                _ => Verdict::Allow,
            }
        })
        // A second guard sees the first one's rewrite.
        .intercept_tool_call(|_ctx, _tool, args| {
            if args["command"] == "ls --dry-run --dry-run" {
                Verdict::block("rewritten twice")
            } else {
                Verdict::Allow
            }
        })
        .intercept_turn_start(|_ctx, step| {
            if step > 3 {
                Verdict::block("too many steps")
            } else {
                Verdict::rewrite(json!({}))
            }
        })
        .intercept_assistant_message(|_ctx, text| {
            if text.contains("secret") {
                Verdict::replace_text(text.replace("secret", "[redacted]"))
            } else {
                Verdict::Allow
            }
        })
        .intercept_assistant_message(|_ctx, text| {
            if text.contains("[redacted] [redacted]") {
                Verdict::block("too much redacted")
            } else {
                Verdict::Allow
            }
        })
}

#[test]
fn intercepts_allow_block_rewrite_and_replace() {
    let intercept = |id: &str, fields: Value| {
        let mut frame = json!({"type":"event_intercept","id":id});
        if let (Some(frame), Some(fields)) = (frame.as_object_mut(), fields.as_object()) {
            frame.extend(fields.clone());
        }
        frame
    };
    let run = drive(
        guard(),
        &[
            intercept(
                "1",
                json!({"event":"tool_call","tool_name":"bash","tool_args":{"command":"rm -rf /"}}),
            ),
            intercept(
                "2",
                json!({"event":"tool_call","tool_name":"bash","tool_args":{"command":"ls"}}),
            ),
            intercept(
                "3",
                json!({"event":"tool_call","tool_name":"bash","tool_args":{"command":"ls --dry-run"}}),
            ),
            intercept("4", json!({"event":"tool_call","tool_name":"edit"})),
            // A rewrite that is not an object, and a verdict of the wrong kind: allowed.
            intercept("5", json!({"event":"tool_call","tool_name":"read"})),
            intercept("6", json!({"event":"tool_call","tool_name":"write"})),
            intercept("7", json!({"event":"turn_start","step":4})),
            // `turn_start` cannot be rewritten.
            intercept("8", json!({"event":"turn_start","step":1})),
            intercept(
                "9",
                json!({"event":"assistant_message","text":"the secret is out"}),
            ),
            intercept(
                "10",
                json!({"event":"assistant_message","text":"secret secret"}),
            ),
            intercept("11", json!({"event":"assistant_message","text":"hello"})),
            // Something never asked for.
            intercept("12", json!({"event":"session_start"})),
        ],
    );
    ok(&run);
    let answer = |id: &str, fields: Value| {
        let mut frame = json!({"type":"event_intercept_response","id":id});
        if let (Some(frame), Some(fields)) = (frame.as_object_mut(), fields.as_object()) {
            frame.extend(fields.clone());
        }
        frame
    };
    assert_eq!(
        run.answers(),
        [
            answer("1", json!({"block":true,"reason":"refused: `rm -rf`"})),
            answer("2", json!({"modified_args":{"command":"ls --dry-run"}})),
            answer("3", json!({"block":true,"reason":"rewritten twice"})),
            answer("4", json!({})),
            answer("5", json!({})),
            answer("6", json!({})),
            answer("7", json!({"block":true,"reason":"too many steps"})),
            answer("8", json!({})),
            answer("9", json!({"replace_text":"the [redacted] is out"})),
            answer("10", json!({"block":true,"reason":"too much redacted"})),
            answer("11", json!({})),
            answer("12", json!({})),
        ]
    );
    assert!(
        run.log
            .contains("ignored a `tool_call` rewrite whose arguments are not a JSON object"),
        "{}",
        run.log
    );
    assert!(
        run.log.contains(
            "ignored a `replace_text` verdict on a `tool_call` intercept, which does not allow it"
        ),
        "{}",
        run.log
    );
    assert!(
        run.log
            .contains("ignored a `rewrite` verdict on a `turn_start` intercept"),
        "{}",
        run.log
    );
}

/// Natively zot hands a guard the arguments as the model wrote them, and
/// its own tools read them as Go's `encoding/json` does: a key in any case,
/// the last of several winning. The SDK hands the guard of one of zot's
/// tools what that tool will read.
#[test]
fn a_guard_of_zots_own_tools_sees_what_they_will_read() {
    let check = |id: &str, tool: &str, args: Value| json!({"type":"event_intercept","id":id,"event":"tool_call","tool_name":tool,"tool_args":args});
    let run = drive(
        guard(),
        &[
            check("1", "bash", json!({"Command": "rm -rf /"})),
            check("2", "bash", json!({"command": "ls", "COMMAND": "rm -rf /"})),
            // An extension's tool may read its keys by their case: as sent.
            check(
                "3",
                "deploy",
                json!({"command": "ls", "COMMAND": "rm -rf /"}),
            ),
        ],
    );
    ok(&run);
    let refused =
        json!({"type":"event_intercept_response","block":true,"reason":"refused: `rm -rf`"});
    let answers = run.answers();
    for (answer, id) in answers.iter().take(2).zip(["1", "2"]) {
        let mut expected = refused.clone();
        expected["id"] = json!(id);
        assert_eq!(answer, &expected);
    }
    assert_eq!(
        answers[2],
        json!({"type":"event_intercept_response","id":"3"})
    );
    // A key written again after another spelling is the last one (an
    // ordered map keeps it where it first stood), both ways round.
    let raw = |id: &str, args: &str| {
        format!(
            r#"{{"type":"event_intercept","id":"{id}","event":"tool_call","tool_name":"bash","tool_args":{args}}}
"#
        )
    };
    let run = drive_raw(
        guard(),
        &(raw(
            "4",
            r#"{"command":"ls","COMMAND":"ls","command":"rm -rf /"}"#,
        ) + &raw(
            "5",
            r#"{"command":"rm -rf /","COMMAND":"rm -rf /","command":"ls"}"#,
        )),
    );
    ok(&run);
    let mut expected = refused.clone();
    expected["id"] = json!("4");
    assert_eq!(
        run.answers(),
        [
            expected,
            // The guard was shown `ls`, which it rewrites.
            json!({"type":"event_intercept_response","id":"5",
                   "modified_args":{"command":"ls --dry-run"}})
        ]
    );
}

#[test]
fn events_reach_the_handlers_subscribed_to_them() {
    let seen = Rc::new(RefCell::new(Vec::new()));
    let (turns, all) = (Rc::clone(&seen), Rc::clone(&seen));
    let extension = Extension::new("audit", "1")
        .on_event([event_name::TURN_START], move |_ctx, event: &Event| {
            turns
                .borrow_mut()
                .push(format!("turns: {} {:?}", event.event, event.step));
        })
        .on_all_events(move |_ctx, event| {
            all.borrow_mut().push(format!("all: {}", event.event));
        });
    let run = drive(
        extension,
        &[
            json!({"type":"event","event":"session_start"}),
            json!({"type":"event","event":"turn_start","step":2}),
            json!({"type":"event","event":"tool_call","tool_id":"t","tool_name":"bash",
                   "tool_args":{"command":"ls"}}),
            // An event this SDK does not know reaches no one.
            json!({"type":"event","event":"compaction"}),
        ],
    );
    ok(&run);
    // Events are one way: nothing is answered.
    assert_eq!(run.answers(), [] as [Value; 0]);
    assert_eq!(
        *seen.borrow(),
        [
            "all: session_start",
            "turns: turn_start Some(2)",
            "all: turn_start",
            "all: tool_call",
        ]
    );
}

#[test]
fn frames_sent_from_a_handler_go_out_before_its_answer() {
    let extension = Extension::new("ui", "1")
        .command("work", "", |ctx, _args| {
            ctx.notify(Level::Warn, "working");
            ctx.render_panel(Panel::new("p", "Progress").with_lines(["50%"]));
            ctx.clear_notes();
            ctx.render_panel(Panel::new("p", "").with_lines(["done"]));
            ctx.close_panel("p");
            Response::display("done")
        })
        .tool_json("t", "", schema::object(), |ctx, _args| {
            ctx.notify(Level::Success, "fetched");
            "ok"
        });
    let run = drive(
        extension,
        &[
            json!({"type":"command_invoked","id":"1","name":"work","args":""}),
            json!({"type":"tool_call","id":"2","name":"t","args":{}}),
        ],
    );
    ok(&run);
    assert_eq!(
        run.answers(),
        [
            json!({"type":"notify","level":"warn","message":"working"}),
            json!({"type":"panel_render","panel_id":"p","title":"Progress","lines":["50%"]}),
            json!({"type":"clear_notes"}),
            // An empty title is left out.
            json!({"type":"panel_render","panel_id":"p","lines":["done"]}),
            json!({"type":"panel_close","panel_id":"p"}),
            json!({"type":"command_response","id":"1","action":"display","display":"done"}),
            json!({"type":"notify","level":"success","message":"fetched"}),
            json!({"type":"tool_result","id":"2","content":[{"type":"text","text":"ok"}]}),
        ]
    );
}

#[test]
fn hello_ack_is_kept_for_handlers() {
    let extension = Extension::new("where", "1").command("cwd", "", |ctx, _args| {
        let name = ctx.name().to_owned();
        match ctx.hello_ack() {
            Some(ack) => Response::display(format!(
                "{name} in {} ({}), data in {}",
                ack.cwd,
                ack.model,
                ack.data_dir.as_deref().unwrap_or("-")
            )),
            None => Response::error("no hello_ack yet"),
        }
    });
    let run = drive(
        extension,
        &[
            json!({"type":"command_invoked","id":"0","name":"cwd","args":""}),
            json!({"type":"hello_ack","protocol_version":1,"zot_version":"0.9","provider":"p",
                   "model":"m","cwd":"/w","extension_dir":"/w/.zot/extensions/where",
                   "data_dir":"/d"}),
            json!({"type":"command_invoked","id":"1","name":"cwd","args":""}),
        ],
    );
    ok(&run);
    assert_eq!(
        run.answers(),
        [
            json!({"type":"command_response","id":"0","action":"noop","error":"no hello_ack yet"}),
            json!({"type":"command_response","id":"1","action":"display",
                   "display":"where in /w (m), data in /d"}),
        ]
    );
}

#[test]
fn lines_that_do_not_decode_are_logged_and_skipped() {
    let wire = concat!(
        "not json\n",
        "{\"type\":\"teleport\"}\n",
        "[1,2]\n",
        "{\"type\":\"tool_call\",\"id\":7}\n",
        "\n",
        "{\"type\":\"command_invoked\",\"id\":\"1\",\"name\":\"hello\",\"args\":\"x\"}\r\n",
    );
    let run = drive_raw(weather(), wire);
    ok(&run);
    assert_eq!(
        run.answers(),
        [json!({"type":"command_response","id":"1","action":"prompt","prompt":"say hi to x"})]
    );
    let skipped: Vec<&str> = run
        .log
        .lines()
        .filter(|line| line.starts_with("weather: skipped a frame from the host: "))
        .collect();
    assert_eq!(skipped.len(), 4, "{}", run.log);
    assert!(
        skipped[1].ends_with("unknown frame type `teleport`"),
        "{}",
        run.log
    );
    assert!(
        skipped[3].contains("invalid `tool_call` frame"),
        "{}",
        run.log
    );
}

#[test]
fn a_check_the_sdk_cannot_read_is_answered_with_a_block_never_skipped() {
    // A guard that counts what reaches it: an unreadable check must not.
    let asked = Rc::new(RefCell::new(Vec::<String>::new()));
    let seen = asked.clone();
    let extension = Extension::new("guard", "1")
        .intercept_tool_call(move |_ctx, _tool, args| {
            seen.borrow_mut().push(args["command"].to_string());
            Verdict::Allow
        })
        .tool_json("t", "a tool", schema::object(), |_ctx, _args| "ran")
        .command("c", "a command", |_ctx, _args| Response::noop());
    let deep = format!("{}1{}", "[".repeat(200), "]".repeat(200));
    let check = |id: &str, command: &str| {
        format!(
            r#"{{"type":"event_intercept","id":"{id}","event":"tool_call","tool_name":"bash","tool_args":{{"command":{command}}}}}"#
        )
        .into_bytes()
    };
    // The `?` of a line becomes a byte that is not UTF-8.
    let with_byte_ff = |mut line: Vec<u8>| {
        if let Some(at) = line.iter().position(|&b| b == b'?') {
            line[at] = 0xFF;
        }
        line
    };
    let mut wire = Vec::new();
    for line in [
        // Nested past the parser's recursion limit.
        check("1", &deep),
        // A byte that is not UTF-8.
        with_byte_ff(check("2", "\"rm -rf /x?\"")),
        // A lone surrogate.
        check("3", r#""\ud800""#),
        // Over the 4 MiB frame cap.
        check(
            "4",
            &format!("\"{}\"", "x".repeat(protocol::DEFAULT_MAX_LINE)),
        ),
        // A tool call and a command that cannot be read get errors.
        format!(r#"{{"type":"tool_call","id":"5","name":"t","args":{deep}}}"#).into_bytes(),
        [
            &br#"{"type":"command_invoked","id":"6","name":"c","args":""#[..],
            &[0xFF],
            b"\"}",
        ]
        .concat(),
        // A readable check after all that is asked as usual.
        check("7", r#""ls""#),
    ] {
        wire.extend_from_slice(&line);
        wire.push(b'\n');
    }
    let run = drive_bytes(extension, &wire);
    ok(&run);
    let block = |id: &str, why: &str| {
        json!({"type":"event_intercept_response","id":id,"block":true,
               "reason":format!("extension `guard` could not read this check ({why}); blocked to be safe")})
    };
    assert_eq!(
        run.answers(),
        [
            block("1", "nested deeper than 127 levels"),
            block("2", "invalid unicode code point at line 1 column 108"),
            block("3", "unexpected end of hex escape at line 1 column 105"),
            block("4", "a line over the 4194304-byte frame cap"),
            json!({"type":"tool_result","id":"5","is_error":true,"content":[{"type":"text",
                   "text":"extension `guard` could not read this tool call (nested deeper than 127 levels)"}]}),
            json!({"type":"command_response","id":"6","action":"noop",
                   "error":"extension `guard` could not read this command (invalid unicode code point at line 1 column 55)"}),
            json!({"type":"event_intercept_response","id":"7"}),
        ]
    );
    assert_eq!(*asked.borrow(), [r#""ls""#]);
    assert_eq!(
        run.log
            .lines()
            .filter(|line| line.starts_with("guard: answered a `"))
            .count(),
        6,
        "{}",
        run.log
    );
}

#[test]
fn shutdown_is_acknowledged_and_ends_the_run() {
    let run = drive(
        weather(),
        &[
            json!({"type":"shutdown"}),
            // Never read: the run has ended.
            json!({"type":"command_invoked","id":"1","name":"hello","args":""}),
        ],
    );
    ok(&run);
    assert_eq!(run.answers(), [json!({"type":"shutdown_ack"})]);
}

#[test]
fn end_of_input_ends_the_run_after_a_last_line_without_newline() {
    let run = drive_raw(
        weather(),
        r#"{"type":"command_invoked","id":"1","name":"hello","args":"eof"}"#,
    );
    ok(&run);
    assert_eq!(
        run.answers(),
        [json!({"type":"command_response","id":"1","action":"prompt","prompt":"say hi to eof"})]
    );
}

#[test]
fn frames_split_across_reads_are_reassembled() {
    let wire = concat!(
        "{\"type\":\"tool_call\",\"id\":\"1\",\"name\":\"weather\",\"args\":{\"city\":\"Köln\"}}\n",
        "{\"type\":\"shutdown\"}\n",
    );
    let mut out = Vec::new();
    let result = weather()
        .log_to(io::sink())
        .run_with(Trickle(wire.as_bytes()), &mut out);
    assert!(result.is_ok(), "{result:?}");
    let frames = parse_output(&out);
    assert_eq!(
        frames[frames.len() - 2..],
        [
            json!({"type":"tool_result","id":"1",
                   "content":[{"type":"text","text":"Köln: sunny for 0 days"}]}),
            json!({"type":"shutdown_ack"}),
        ]
    );
}

#[test]
fn a_panicking_handler_answers_with_an_error_and_the_run_goes_on() {
    let extension = weather()
        .command("boom", "", |_ctx, _args| -> Response { panic!("boom") })
        .tool_json("boom", "", schema::object(), |_ctx, args| -> ToolOutput {
            panic!("bad {args}")
        })
        .intercept_tool_call(|_ctx, _tool, _args| panic!("guard down"))
        .on_event([event_name::SESSION_START], |_ctx, _event| panic!("event"));
    let run = drive(
        extension,
        &[
            json!({"type":"command_invoked","id":"1","name":"boom","args":""}),
            json!({"type":"tool_call","id":"2","name":"boom","args":{"a":1}}),
            json!({"type":"event_intercept","id":"3","event":"tool_call","tool_name":"bash"}),
            json!({"type":"event","event":"session_start"}),
            json!({"type":"command_invoked","id":"4","name":"hello","args":"again"}),
        ],
    );
    ok(&run);
    assert_eq!(
        run.answers(),
        [
            json!({"type":"command_response","id":"1","action":"noop",
                   "error":"command `boom`: handler panicked: boom"}),
            json!({"type":"tool_result","id":"2","is_error":true,"content":[{"type":"text",
                   "text":"tool `boom`: handler panicked: bad {\"a\":1}"}]}),
            // A guard that panicked blocks: the call it choked on is the
            // one to stop.
            json!({"type":"event_intercept_response","id":"3","block":true,
                   "reason":"the `tool_call` interceptor failed (guard down); blocked to be safe"}),
            json!({"type":"command_response","id":"4","action":"prompt","prompt":"say hi to again"}),
        ]
    );
    assert!(
        run.log
            .contains("`tool_call` interceptor panicked, blocking: guard down"),
        "{}",
        run.log
    );
    assert!(
        run.log.contains("event handler panicked: event"),
        "{}",
        run.log
    );
}

#[test]
fn panel_frames_reach_the_panel_handlers() {
    let seen = Rc::new(RefCell::new(Vec::new()));
    let (keys, sizes, closes) = (Rc::clone(&seen), Rc::clone(&seen), Rc::clone(&seen));
    let extension = Extension::new("panel", "1")
        .on_panel_key(move |ctx, panel, key, text| {
            keys.borrow_mut()
                .push(format!("key {panel} {key} {text:?}"));
            ctx.render_panel(Panel::new(panel, "T").with_lines([key]));
        })
        .on_panel_resize(move |_ctx, panel, width, height| {
            sizes
                .borrow_mut()
                .push(format!("resize {panel} {width}x{height}"));
        })
        .on_panel_close(move |_ctx, panel| {
            closes.borrow_mut().push(format!("close {panel}"));
        });
    let run = drive(
        extension,
        &[
            json!({"type":"panel_key","panel_id":"p","key":"a","text":"a"}),
            json!({"type":"panel_key","panel_id":"p","key":"enter"}),
            json!({"type":"panel_resize","panel_id":"p","width":80,"height":24}),
            json!({"type":"panel_close","panel_id":"p"}),
        ],
    );
    ok(&run);
    assert_eq!(
        *seen.borrow(),
        [
            "key p a Some(\"a\")",
            "key p enter None",
            "resize p 80x24",
            "close p",
        ]
    );
    assert_eq!(
        run.answers(),
        [
            json!({"type":"panel_render","panel_id":"p","title":"T","lines":["a"]}),
            json!({"type":"panel_render","panel_id":"p","title":"T","lines":["enter"]}),
        ]
    );
}

/// A host that stopped reading: every write fails.
struct Gone;

impl Write for Gone {
    fn write(&mut self, _bytes: &[u8]) -> io::Result<usize> {
        Err(io::Error::new(io::ErrorKind::BrokenPipe, "pipe closed"))
    }
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

#[test]
fn a_host_that_went_away_ends_the_run_with_the_write_error() {
    let result = weather().log_to(io::sink()).run_with(&b""[..], Gone);
    let err = match result {
        Ok(()) => panic!("the run ignored a failed write"),
        Err(err) => err,
    };
    assert_eq!(err.kind(), io::ErrorKind::BrokenPipe);
    assert_eq!(
        err.to_string(),
        "writing a frame to the host failed: pipe closed"
    );
}

/// The arguments of a tool whose schema is derived from this type.
#[derive(Deserialize, zotbox_guest::JsonSchema)]
#[serde(rename_all = "camelCase")]
struct Count {
    /// the text to count
    text: String,
    /// count only words at least this long
    min_length: Option<u32>,
}

#[test]
fn a_typed_tool_derives_its_schema_from_its_argument_type() {
    let extension =
        Extension::new("wc", "1").typed_tool("count_words", "Count words.", |_ctx, args: Count| {
            let min = args.min_length.unwrap_or(0) as usize;
            let words = args.text.split_whitespace().filter(|w| w.len() >= min);
            words.count().to_string()
        });
    let run = drive(
        extension,
        &[
            json!({"type":"tool_call","id":"1","name":"count_words","args":{"text":"a bb ccc","minLength":2}}),
            // The derived schema and the deserializer agree: the same field fails.
            json!({"type":"tool_call","id":"2","name":"count_words","args":{"minLength":2}}),
        ],
    );
    ok(&run);
    assert_eq!(
        run.frames[1],
        json!({"type":"register_tool","name":"count_words","description":"Count words.",
               "schema":{"type":"object",
                         "description":"The arguments of a tool whose schema is derived from this type.",
                         "properties":{
                             "text":{"type":"string","description":"the text to count"},
                             "minLength":{"type":["integer","null"],"format":"uint32","minimum":0,
                                          "description":"count only words at least this long"}},
                         "required":["text"]}})
    );
    assert_eq!(
        run.answers(),
        [
            json!({"type":"tool_result","id":"1","content":[{"type":"text","text":"2"}]}),
            json!({"type":"tool_result","id":"2","is_error":true,"content":[{"type":"text",
                   "text":"invalid arguments for tool `count_words`: missing field `text`"}]}),
        ]
    );
}
