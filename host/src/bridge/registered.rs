//! The registrations a guest sends zot through the bridge, held to the
//! rules the library holds them to ([`Registrar`]).
//!
//! Every other frame passes byte for byte, but a `hello`, a
//! `register_tool`, a `register_command` or a `subscribe` is what zot keeps
//! for the extension's whole life and shows in its menus. So, as in the
//! library's handshake:
//!
//! 1. A registration the registrar refuses (a name with control or
//!    invisible characters, past the count or size caps, twice the same
//!    name) does not reach zot; the refusal is a warning in zot's log of
//!    the extension (its stderr).
//! 2. What zot shows is escaped ([`crate::text::shown_text`]): a
//!    description's control characters, the `hello`'s name and
//!    capabilities; a version with them is dropped. Such a frame is written
//!    anew; a frame with nothing to change passes as it came.
//! 3. A `subscribe` passes with the events held; one with none is dropped.
//! 4. A registration frame that does not decode is dropped (the library
//!    skips it too), and so is a second `hello`.

use serde_json::Value;
use zotbox_protocol::zot_args::InReadOrder;
use zotbox_protocol::{
    ExtensionFrame, Hello, RegisterCommand, RegisterTool, decode_line, encode_to_vec, event_name,
};

use crate::session::{Registrar, RegistrationLimits};
use crate::text::shown_text;

/// What becomes of one registration line.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Checked {
    /// Passes to zot as it came.
    AsIs,
    /// Passes to zot as this line (without its newline).
    Rewritten(Vec<u8>),
    /// Does not reach zot.
    Dropped,
    /// Does not reach zot, for this reason; an answer of zot's request is
    /// answered for it, as refused.
    Refused(String),
}

/// One guest's registrations so far.
pub(crate) struct Registrations {
    name: String,
    limits: RegistrationLimits,
    registrar: Option<Registrar>,
    hello_seen: bool,
    /// Where a refused rewrite is audited: the extension's sandbox.
    audit: Option<std::sync::Arc<crate::sandbox::Sandbox>>,
}

impl Registrations {
    /// For extension `name`, within `limits` (the policy's already).
    pub(crate) fn new(name: &str, limits: RegistrationLimits) -> Self {
        Self {
            name: name.to_owned(),
            limits,
            registrar: None,
            hello_seen: false,
            audit: None,
        }
    }

    /// The events the guest may see, intercept and rewrite.
    pub(crate) fn events(&self) -> &crate::policy::EventRights {
        &self.limits.events
    }

    /// Audits the rewrites it refuses in `sandbox`'s name (none: only logged).
    pub(crate) fn audited_by(
        mut self,
        sandbox: Option<std::sync::Arc<crate::sandbox::Sandbox>>,
    ) -> Self {
        self.audit = sandbox;
        self
    }

    /// Whether a frame of `frame_type` is checked here.
    pub(crate) fn looks_at(frame_type: &str) -> bool {
        matches!(
            frame_type,
            "hello" | "register_tool" | "register_command" | "subscribe"
        )
    }

    /// What becomes of `line`, a frame [`Registrations::looks_at`].
    pub(crate) fn check(&mut self, line: &[u8]) -> Checked {
        let frame = match decode_line::<ExtensionFrame>(line) {
            Ok(frame) => frame,
            Err(err) => {
                tracing::warn!(
                    "extension `{}`: a registration that does not decode was not passed to zot: {err}",
                    self.name
                );
                return Checked::Dropped;
            }
        };
        // Keys the protocol does not have reach zot only rebuilt without
        // them: a later zot reads more of a registration (`namespace`,
        // `namespace_instructions`), and what it reads of an author's is
        // escaped here, or not passed on.
        let rebuilt = has_unknown_keys(line, &frame).then(|| frame.clone());
        match (self.check_frame(frame), rebuilt) {
            (Checked::AsIs, Some(frame)) => rewritten(frame),
            (checked, _) => checked,
        }
    }

    fn check_frame(&mut self, frame: ExtensionFrame) -> Checked {
        match frame {
            ExtensionFrame::Hello(hello) => self.hello(hello),
            ExtensionFrame::RegisterTool(tool) => {
                if !self.registrar().tool(tool.clone()) {
                    return Checked::Dropped;
                }
                let description = tool.description.clone();
                description_shown(&description, |description| {
                    ExtensionFrame::RegisterTool(RegisterTool {
                        description,
                        ..tool
                    })
                })
            }
            ExtensionFrame::RegisterCommand(command) => {
                if !self.registrar().command(command.clone()) {
                    return Checked::Dropped;
                }
                let description = command.description.clone();
                description_shown(&description, |description| {
                    ExtensionFrame::RegisterCommand(RegisterCommand {
                        description,
                        ..command
                    })
                })
            }
            ExtensionFrame::Subscribe(subscribe) => {
                let held = self.registrar().subscribe(subscribe.clone());
                if held == subscribe {
                    Checked::AsIs
                } else if held.events.is_empty() && held.intercept.is_empty() {
                    Checked::Dropped
                } else {
                    rewritten(ExtensionFrame::Subscribe(held))
                }
            }
            // Not one of the types looked at: nothing to hold.
            _ => Checked::AsIs,
        }
    }

    fn hello(&mut self, hello: Hello) -> Checked {
        if self.hello_seen {
            tracing::warn!(
                "extension `{}`: a second `hello` was not passed to zot",
                self.name
            );
            return Checked::Dropped;
        }
        self.hello_seen = true;
        // Cleaned by a registrar of its own when registrations came first
        // (the one holding them keeps its empty `hello`).
        let cleaner = Registrar::new(&self.name, &self.limits, hello.clone());
        let kept = cleaner.hello().clone();
        if self.registrar.is_none() {
            self.registrar = Some(cleaner);
        }
        if kept == hello {
            Checked::AsIs
        } else {
            rewritten(ExtensionFrame::Hello(kept))
        }
    }

    /// What becomes of `line`, an `event_intercept_response`: an answer
    /// that changes an event the grant lets it intercept but not rewrite
    /// (`modified_args` of a `tool_call`, `replace_text` of an
    /// `assistant_message`) reaches zot without the change, its verdict
    /// kept. zot would act on the change outside the sandbox: a rewritten
    /// `bash` call runs with the user's permissions.
    pub(crate) fn intercept_answer(&self, line: &[u8]) -> Checked {
        let rights = &self.limits.events;
        let refused: Vec<(&str, &str)> = [
            ("modified_args", event_name::TOOL_CALL),
            ("replace_text", event_name::ASSISTANT_MESSAGE),
        ]
        .into_iter()
        .filter(|(_, event)| !rights.may_rewrite(event))
        .collect();
        // The frame's keys are exact by now (a line zot could read
        // otherwise was written anew as zot reads it), and a key's quotes
        // are bare where a string's inner ones are escaped: a line naming
        // none of the refused keys so cannot hold one.
        let names = |key: &str| memchr::memmem::find(line, format!("\"{key}\"").as_bytes());
        if refused.iter().all(|(key, _)| names(key).is_none()) {
            return Checked::AsIs;
        }
        let mut frame = match serde_json::from_slice::<InReadOrder>(line) {
            Ok(InReadOrder(Value::Object(frame))) => frame,
            // zot reads no frame of it either.
            Ok(_) => return Checked::AsIs,
            Err(err) => {
                return Checked::Refused(format!("an answer that does not decode ({err})"));
            }
        };
        let mut changed = false;
        for (key, event) in refused {
            if frame.remove(key).is_some() {
                changed = true;
                let why = format!(
                    "its answer to an intercept of `{event}` rewrites it (`{key}`), which its \
                     grant does not allow (`capabilities.rewrite`); zot gets the answer without it"
                );
                tracing::warn!("extension `{}`: {why}", self.name);
                if let Some(sandbox) = &self.audit {
                    sandbox.record(crate::audit::AuditRecord::now(
                        sandbox.who(),
                        "rewrite",
                        event,
                        crate::audit::Decision::Deny,
                        why,
                    ));
                }
            }
        }
        if !changed {
            return Checked::AsIs;
        }
        match serde_json::to_vec(&Value::Object(frame)) {
            Ok(line) => Checked::Rewritten(line),
            Err(err) => Checked::Refused(format!("an answer that cannot be written anew ({err})")),
        }
    }

    fn registrar(&mut self) -> &mut Registrar {
        self.registrar
            .get_or_insert_with(|| Registrar::new(&self.name, &self.limits, Hello::default()))
    }
}

/// A held registration whose `description` zot will show: as it came, or
/// written anew by `with` with the description escaped.
fn description_shown(description: &str, with: impl FnOnce(String) -> ExtensionFrame) -> Checked {
    match shown_text(description) {
        std::borrow::Cow::Borrowed(_) => Checked::AsIs,
        std::borrow::Cow::Owned(escaped) => rewritten(with(escaped)),
    }
}

/// Whether `line`, decoded as `frame`, holds a key the frame does not
/// keep (one of a later protocol, or any the author added).
fn has_unknown_keys(line: &[u8], frame: &ExtensionFrame) -> bool {
    // Through the encoder and the reader the bridge has already, rather
    // than `to_value`, whose serializer for every frame type would be code
    // of its own.
    let kept = encode_to_vec(frame).map(|encoded| serde_json::from_slice::<Value>(&encoded));
    let (Ok(Value::Object(written)), Ok(Ok(Value::Object(kept)))) =
        (serde_json::from_slice::<Value>(line), kept)
    else {
        return true;
    };
    written.keys().any(|key| !kept.contains_key(key))
}

/// `frame` as a line for zot (without its newline); dropped in the
/// unlikely case it does not encode.
fn rewritten(frame: ExtensionFrame) -> Checked {
    match encode_to_vec(&frame) {
        Ok(mut line) => {
            if line.last() == Some(&b'\n') {
                line.pop();
            }
            Checked::Rewritten(line)
        }
        Err(_) => Checked::Dropped,
    }
}

#[cfg(test)]
mod tests {
    use serde_json::{Value, json};

    use super::*;

    fn check(registrations: &mut Registrations, frame: Value) -> Checked {
        registrations.check(frame.to_string().as_bytes())
    }

    fn line(checked: Checked) -> Value {
        match checked {
            Checked::Rewritten(line) => serde_json::from_slice(&line).unwrap_or(Value::Null),
            other => panic!("not rewritten: {other:?}"),
        }
    }

    #[test]
    fn registrations_reach_zot_as_the_library_would_hold_them() {
        let limits = RegistrationLimits {
            max_registrations: 3,
            events: crate::policy::EventRights::all(),
            ..RegistrationLimits::default()
        };
        let mut registrations = Registrations::new("hostile", limits);
        let tool = |name: &str, description: &str| {
            json!({"type": "register_tool", "name": name, "description": description,
                   "schema": {"type": "object"}})
        };
        // A plain hello passes as it came; a second one does not.
        let hello = json!({"type": "hello", "name": "hostile", "version": "0.1.0"});
        assert_eq!(check(&mut registrations, hello.clone()), Checked::AsIs);
        assert_eq!(check(&mut registrations, hello), Checked::Dropped);
        // Attack: names a terminal would act on.
        for name in [
            "\u{1b}[2Jevil",
            "a\r\nb",
            "\u{1b}]0;pwned\u{7}",
            "\u{202e}txt.exe",
        ] {
            assert_eq!(
                check(&mut registrations, tool(name, "d")),
                Checked::Dropped,
                "{name:?}"
            );
        }
        assert_eq!(
            check(&mut registrations, tool("ok", "plain")),
            Checked::AsIs
        );
        assert_eq!(
            check(&mut registrations, tool("ok", "again")),
            Checked::Dropped
        );
        // A description a terminal would act on is escaped, not refused.
        let escaped = line(check(
            &mut registrations,
            tool(
                "colour",
                "red \u{1b}[31m, a link \u{1b}]8;;https://x\u{7}\nline two",
            ),
        ));
        assert_eq!(
            escaped,
            json!({"type": "register_tool", "name": "colour",
                   "description": "red \\u{1b}[31m, a link \\u{1b}]8;;https://x\\u{7}\nline two",
                   "schema": {"type": "object"}})
        );
        let command = json!({"type": "register_command", "name": "go", "description": "\u{202e}d"});
        assert_eq!(
            line(check(&mut registrations, command)),
            json!({"type": "register_command", "name": "go", "description": "\\u{202e}d"})
        );
        // The count cap: three held, the fourth refused.
        assert_eq!(
            check(&mut registrations, tool("fourth", "d")),
            Checked::Dropped
        );
        // Events: the ones that may be held pass, the rest are cut.
        let subscribe = json!({"type": "subscribe", "events": ["session_start", "\u{1b}x"],
                               "intercept": ["session_start", "tool_call"]});
        assert_eq!(
            line(check(&mut registrations, subscribe)),
            json!({"type": "subscribe", "events": ["session_start"], "intercept": ["tool_call"]})
        );
        let none = json!({"type": "subscribe", "intercept": ["session_start"]});
        assert_eq!(check(&mut registrations, none), Checked::Dropped);
        // A registration that does not decode is not passed on.
        assert_eq!(
            registrations.check(br#"{"type":"register_tool","name":3}"#),
            Checked::Dropped
        );
    }

    #[test]
    fn a_hello_is_passed_on_cleaned() {
        let mut registrations = Registrations::new("x", RegistrationLimits::default());
        // Registrations before the hello are held all the same.
        let tool = json!({"type": "register_command", "name": "early"});
        assert_eq!(check(&mut registrations, tool), Checked::AsIs);
        let hello = json!({"type": "hello", "name": "x\u{1b}[2J", "version": "1\u{7}",
                           "capabilities": ["tools\u{202e}"]});
        assert_eq!(
            line(check(&mut registrations, hello)),
            json!({"type": "hello", "name": "x\\u{1b}[2J", "version": "",
                   "capabilities": ["tools\\u{202e}"]})
        );
    }
}
