//! Every frame in both directions: decode the wire form, re-encode it, and
//! compare as JSON values, so field names and omissions are both checked.

use serde_json::{Value, json};
use zotbox_protocol::{Decoder, ExtensionFrame, Frame, HostFrame, decode_line, encode_to_vec};

fn round_trip<F: Frame + std::fmt::Debug + PartialEq>(wire: Value) -> F {
    let line = serde_json::to_vec(&wire).unwrap_or_default();
    let frame: F = match decode_line(&line) {
        Ok(frame) => frame,
        Err(err) => panic!("{wire} did not decode: {err}"),
    };
    // Decoded straight into its variant (`type` comes first): the same
    // frame the tagged enum's own decoding gives.
    match serde_json::from_slice::<F>(&line) {
        Ok(tagged) => assert_eq!(tagged, frame, "{wire}"),
        Err(err) => panic!("{wire} did not decode as a tagged enum: {err}"),
    }
    let encoded = encode_to_vec(&frame).unwrap_or_default();
    let back: Value = serde_json::from_slice(&encoded).unwrap_or(Value::Null);
    assert_eq!(back, wire, "re-encoding changed the frame");
    // And the codec path gives the same frame.
    let mut decoder = Decoder::default();
    decoder.push(&encoded);
    match decoder.next_frame::<F>() {
        Some(Ok(again)) => assert_eq!(again, frame),
        other => panic!("decoder gave {other:?}"),
    }
    frame
}

#[test]
fn every_extension_frame_round_trips() {
    let frames = [
        json!({"type":"hello","name":"weather","version":"1.0.0","capabilities":["commands","tools"]}),
        json!({"type":"register_command","name":"weather","description":"current weather"}),
        json!({"type":"register_tool","name":"weather","description":"Get weather.",
               "schema":{"type":"object","properties":{"city":{"type":"string"}},"required":["city"]}}),
        json!({"type":"subscribe","events":["tool_call"],"intercept":["tool_call"]}),
        json!({"type":"ready"}),
        json!({"type":"command_response","id":"1","action":"prompt","prompt":"p"}),
        json!({"type":"command_response","id":"2","action":"insert","insert":"i"}),
        json!({"type":"command_response","id":"3","action":"display","display":"d"}),
        json!({"type":"command_response","id":"4","action":"noop"}),
        json!({"type":"command_response","id":"5","action":"noop","error":"bad args"}),
        json!({"type":"command_response","id":"6","action":"open_panel",
               "open_panel":{"id":"p1","title":"Notes","lines":["a","b"],"footer":"q to quit"}}),
        json!({"type":"tool_result","id":"7","content":[{"type":"text","text":"Berlin: 16°C"},
               {"type":"image","mime_type":"image/png","data":"iVBORw0KGgo="}]}),
        json!({"type":"tool_result","id":"8","content":[{"type":"text","text":"no"}],"is_error":true}),
        json!({"type":"event_intercept_response","id":"9","block":true,"reason":"rm -rf"}),
        json!({"type":"event_intercept_response","id":"10","modified_args":{"command":"ls"}}),
        json!({"type":"event_intercept_response","id":"11","replace_text":"[redacted]"}),
        json!({"type":"notify","level":"info","message":"refreshed cache"}),
        json!({"type":"clear_notes"}),
        json!({"type":"panel_render","panel_id":"p1","title":"Notes","lines":["x"],"footer":"f"}),
        json!({"type":"panel_close","panel_id":"p1"}),
        json!({"type":"shutdown_ack"}),
    ];
    let mut seen = std::collections::BTreeSet::new();
    for wire in frames {
        let frame_type = wire["type"].as_str().unwrap_or_default().to_owned();
        let frame = round_trip::<ExtensionFrame>(wire);
        assert_eq!(frame.frame_type(), frame_type);
        seen.insert(frame_type);
    }
    let all: std::collections::BTreeSet<String> = ExtensionFrame::TYPES
        .iter()
        .map(|t| (*t).to_owned())
        .collect();
    assert_eq!(seen, all, "a frame type has no round-trip case");
}

#[test]
fn every_host_frame_round_trips() {
    let frames = [
        json!({"type":"hello_ack","protocol_version":1,"zot_version":"0.0.9","provider":"anthropic",
               "model":"claude","cwd":"/w","extension_dir":"/e","data_dir":"/e"}),
        json!({"type":"command_invoked","id":"1","name":"weather","args":"berlin"}),
        json!({"type":"tool_call","id":"2","name":"weather","args":{"city":"Berlin"}}),
        json!({"type":"event","event":"session_start"}),
        json!({"type":"event","event":"turn_start","step":1}),
        json!({"type":"event","event":"turn_end","stop":"end_turn","error":"boom"}),
        json!({"type":"event","event":"tool_call","tool_id":"t1","tool_name":"bash","tool_args":{"command":"ls"}}),
        json!({"type":"event","event":"assistant_message","text":"hi"}),
        json!({"type":"event_intercept","id":"3","event":"tool_call","tool_name":"bash",
               "tool_args":{"command":"rm -rf /tmp/foo"}}),
        json!({"type":"event_intercept","id":"4","event":"turn_start","step":2}),
        json!({"type":"event_intercept","id":"5","event":"assistant_message","text":"secret"}),
        json!({"type":"panel_key","panel_id":"p1","key":"a","text":"a"}),
        json!({"type":"panel_resize","panel_id":"p1","width":80,"height":24}),
        json!({"type":"panel_close","panel_id":"p1"}),
        json!({"type":"shutdown"}),
    ];
    let mut seen = std::collections::BTreeSet::new();
    for wire in frames {
        let frame_type = wire["type"].as_str().unwrap_or_default().to_owned();
        let frame = round_trip::<HostFrame>(wire);
        assert_eq!(frame.frame_type(), frame_type);
        seen.insert(frame_type);
    }
    let all: std::collections::BTreeSet<String> =
        HostFrame::TYPES.iter().map(|t| (*t).to_owned()).collect();
    assert_eq!(seen, all, "a frame type has no round-trip case");
}

#[test]
fn optional_fields_default_when_absent() {
    let frame: ExtensionFrame =
        decode_line(br#"{"type":"command_response","id":"1"}"#).unwrap_or_else(|e| panic!("{e}"));
    match frame {
        ExtensionFrame::CommandResponse(response) => {
            assert_eq!(response.action, zotbox_protocol::CommandAction::Noop);
            assert!(response.prompt.is_none() && response.error.is_none());
        }
        other => panic!("decoded as {other:?}"),
    }
    let frame: ExtensionFrame = decode_line(br#"{"type":"hello","name":"x","future":{"a":1}}"#)
        .unwrap_or_else(|e| panic!("{e}"));
    assert!(matches!(frame, ExtensionFrame::Hello(h) if h.version.is_empty()));
}

#[test]
fn schema_may_be_an_object_or_a_string_holding_one() {
    use zotbox_protocol::RegisterTool;
    let cases = [
        (json!({"type":"object"}), true),
        (json!("{\"type\":\"object\"}"), true),
        (json!("not json"), false),
        (json!("[1]"), false),
        (json!(3), false),
        (Value::Null, false),
    ];
    for (schema, ok) in cases {
        let tool = RegisterTool {
            name: "t".into(),
            description: String::new(),
            schema: schema.clone(),
        };
        assert_eq!(tool.schema_object().is_ok(), ok, "schema {schema}");
    }
}
