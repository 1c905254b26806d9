//! What an extension may register, and how much of it the host will hold.
//!
//! # Rules
//!
//! A registration is held for the extension's whole life, and an extension
//! may send as many as it can write within the registration window. So:
//!
//! 1. **Names are plain.** A tool, command or event name that is empty,
//!    longer than [`MAX_NAME_CHARS`], or holds a character a terminal would
//!    act on (control characters, escape sequences, `\r`/`\n`, bidi
//!    overrides, zero-width characters: [`crate::text::has_unsafe`]) is
//!    refused. The refusal shows the name through [`crate::text::shown`],
//!    so it cannot rewrite the `list` it appears in.
//! 2. **Counts are capped.** At most [`RegistrationLimits::max_registrations`]
//!    tools and commands together (default 256), and at most
//!    [`MAX_SUBSCRIPTIONS`] events subscribed or intercepted.
//! 3. **Sizes are capped.** A description longer than
//!    [`RegistrationLimits::max_description_bytes`] (default 4 KiB) or a
//!    schema longer than [`RegistrationLimits::max_schema_bytes`] serialized
//!    (default 64 KiB) is refused, and so is any registration that would
//!    take what the extension holds past
//!    [`RegistrationLimits::max_total_bytes`] (default 1 MiB).
//! 4. **Events are granted.** A sandboxed extension subscribes to what its
//!    grant allows ([`RegistrationLimits::events`]): past the start and end
//!    of a session and a turn, a `tool_call` (every argument of the agent's
//!    tool calls) or an `assistant_message` is seen, and any event is
//!    intercepted, only when its manifest declares it and the policy
//!    allows; the rest of a `subscribe` is refused.
//! 5. **Refusals are bounded too.** The first [`MAX_REFUSALS_LISTED`] are
//!    kept (and logged) one by one; the rest are counted in one line.
//!
//! A refused registration is a warning in `list`; the extension keeps what
//! was accepted and runs. Descriptions are stored as sent: whoever shows
//! one to a person escapes it.
//!
//! The policy may lower the first three caps (`max_registrations`,
//! `max_description_bytes`, `max_schema_bytes`), never raise them.

use std::io::Write;

use serde_json::Value;
use zotbox_protocol::{Hello, RegisterCommand, RegisterTool, Subscribe, event_name};

use crate::policy::EventRights;
use crate::session::{RegisteredTool, Registration};
use crate::text::{Shown, clipped, has_unsafe};

/// The longest tool, command or event name, in characters.
pub const MAX_NAME_CHARS: usize = 64;
/// The most events one extension may subscribe to and intercept, together.
pub const MAX_SUBSCRIPTIONS: usize = 64;
/// Refusals listed one by one; past this they are only counted.
pub const MAX_REFUSALS_LISTED: usize = 32;
/// The longest `hello` version kept, in characters.
const MAX_VERSION_CHARS: usize = 64;
/// The advisory `hello` capabilities kept.
const MAX_HELLO_CAPABILITIES: usize = 16;

/// Caps on what one extension may register. The defaults are the host's;
/// [`RegistrationLimits::within`] lowers them to a policy's ceilings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RegistrationLimits {
    /// Tools and commands together. Default 256.
    pub max_registrations: usize,
    /// Bytes of one tool's or command's description. Default 4096.
    pub max_description_bytes: usize,
    /// Bytes of one tool's schema, serialized as JSON. Default 65 536.
    pub max_schema_bytes: usize,
    /// Bytes of every name, description and schema held for the extension,
    /// together. Default 1 MiB.
    pub max_total_bytes: usize,
    /// The events it may subscribe to, intercept and rewrite. Default: the
    /// lifecycle events only; a host gives each extension its grant's.
    pub events: EventRights,
}

impl Default for RegistrationLimits {
    fn default() -> Self {
        Self {
            max_registrations: 256,
            max_description_bytes: 4096,
            max_schema_bytes: 64 * 1024,
            max_total_bytes: 1024 * 1024,
            events: EventRights::default(),
        }
    }
}

impl RegistrationLimits {
    /// These limits lowered to `policy`'s ceilings.
    pub fn within(self, policy: &crate::policy::Policy) -> Self {
        let cap = |value: usize, ceiling: fn(&crate::policy::Policy, u64) -> u64| {
            let value = u64::try_from(value).unwrap_or(u64::MAX);
            usize::try_from(ceiling(policy, value)).unwrap_or(usize::MAX)
        };
        Self {
            max_registrations: cap(
                self.max_registrations,
                crate::policy::Policy::cap_registrations,
            ),
            max_description_bytes: cap(
                self.max_description_bytes,
                crate::policy::Policy::cap_description_bytes,
            ),
            max_schema_bytes: cap(
                self.max_schema_bytes,
                crate::policy::Policy::cap_schema_bytes,
            ),
            max_total_bytes: self.max_total_bytes,
            events: self.events,
        }
    }
}

/// Builds a [`Registration`] frame by frame, within the limits: the
/// session's handshake, and the bridge for the frames it passes to zot.
pub(crate) struct Registrar {
    name: String,
    limits: RegistrationLimits,
    registration: Registration,
    held: usize,
    unlisted: usize,
}

impl Registrar {
    pub(crate) fn new(name: &str, limits: &RegistrationLimits, mut hello: Hello) -> Self {
        let mut refused = Vec::new();
        if hello.version.chars().count() > MAX_VERSION_CHARS || has_unsafe(&hello.version) {
            refused.push(format!(
                "version `{}` ignored: a version is at most {MAX_VERSION_CHARS} plain characters",
                Shown(&clipped(&hello.version, MAX_VERSION_CHARS))
            ));
            hello.version.clear();
        }
        // Informational only, but held for the extension's life, and shown
        // (zot shows what the bridge passes on).
        hello.name = Shown(&clipped(&hello.name, MAX_NAME_CHARS)).to_string();
        hello.capabilities.truncate(MAX_HELLO_CAPABILITIES);
        for capability in &mut hello.capabilities {
            *capability = Shown(&clipped(capability, MAX_NAME_CHARS)).to_string();
        }
        let mut registrar = Self {
            name: name.to_owned(),
            limits: limits.clone(),
            registration: Registration {
                hello,
                ..Registration::default()
            },
            held: 0,
            unlisted: 0,
        };
        for why in refused {
            registrar.refuse(why);
        }
        registrar
    }

    /// The extension's `hello`, as kept: its version dropped when it was
    /// refused, its name and capabilities clipped and escaped.
    pub(crate) fn hello(&self) -> &Hello {
        &self.registration.hello
    }

    pub(super) fn ready(&mut self) {
        self.registration.sent_ready = true;
    }

    /// The registration, with a line counting the refusals not listed.
    pub(super) fn finish(mut self) -> Registration {
        if self.unlisted > 0 {
            let line = format!(
                "{} more registrations refused (only the first {MAX_REFUSALS_LISTED} are listed)",
                self.unlisted
            );
            tracing::warn!("extension `{}`: {line}", self.name);
            self.registration.refused.push(line);
        }
        self.registration
    }

    /// Holds `tool`, or refuses it (a warning); whether it was held.
    pub(crate) fn tool(&mut self, tool: RegisterTool) -> bool {
        let shown = match checked_name("tool", &tool.name) {
            Ok(shown) => shown,
            Err(why) => return self.refuse(why),
        };
        if self.registration.tools.iter().any(|t| t.name == tool.name) {
            return self.refuse(format!("tool `{shown}` registered twice"));
        }
        let refused = |why: String| format!("tool `{shown}` refused: {why}");
        if let Err(why) = self
            .room_for_one()
            .and_then(|()| self.description(&tool.description))
        {
            return self.refuse(refused(why));
        }
        let schema = match tool.schema_object() {
            Ok(schema) => schema,
            Err(problem) => return self.refuse(refused(problem)),
        };
        let size = match self.schema_size(&tool, &schema) {
            Ok(size) => size,
            Err(why) => return self.refuse(refused(why)),
        };
        let bytes = tool.name.len() + tool.description.len() + size;
        if let Err(why) = self.hold(bytes) {
            return self.refuse(refused(why));
        }
        self.registration.tools.push(RegisteredTool {
            name: tool.name,
            description: tool.description,
            schema,
        });
        true
    }

    /// Holds `command`, or refuses it (a warning); whether it was held.
    pub(crate) fn command(&mut self, command: RegisterCommand) -> bool {
        let shown = match checked_name("command", &command.name) {
            Ok(shown) => shown,
            Err(why) => return self.refuse(why),
        };
        if self
            .registration
            .commands
            .iter()
            .any(|c| c.name == command.name)
        {
            return self.refuse(format!("command `{shown}` registered twice"));
        }
        let bytes = command.name.len() + command.description.len();
        let checked = self
            .room_for_one()
            .and_then(|()| self.description(&command.description))
            .and_then(|()| self.hold(bytes));
        match checked {
            Ok(()) => {
                self.registration.commands.push(command);
                true
            }
            Err(why) => self.refuse(format!("command `{shown}` refused: {why}")),
        }
    }

    /// Holds the events of `subscribe` that may be, refusing the others
    /// (a warning each); the events held.
    pub(crate) fn subscribe(&mut self, subscribe: Subscribe) -> Subscribe {
        let mut held = Subscribe::default();
        for event in subscribe.events {
            let Some(event) = self.checked_event(event) else {
                continue;
            };
            if self.limits.events.may_see(&event) {
                self.registration.events.insert(event.clone());
                held.events.push(event);
            } else {
                self.refuse(format!(
                    "event `{}` refused: {}",
                    Shown(&event),
                    not_granted("seen")
                ));
            }
        }
        for event in subscribe.intercept {
            let Some(event) = self.checked_event(event) else {
                continue;
            };
            if !event_name::INTERCEPTABLE.contains(&event.as_str()) {
                self.refuse(format!("`{}` cannot be intercepted", Shown(&event)));
            } else if self.limits.events.may_intercept(&event) {
                self.registration.intercepts.insert(event.clone());
                held.intercept.push(event);
            } else {
                self.refuse(format!(
                    "intercept of `{}` refused: {}",
                    Shown(&event),
                    not_granted("intercepted")
                ));
            }
        }
        held
    }

    /// `event` if its name is plain (it is shown as it came after this)
    /// and there is room for one more.
    fn checked_event(&mut self, event: String) -> Option<String> {
        let shown = match checked_name("event", &event) {
            Ok(shown) => shown,
            Err(why) => {
                self.refuse(why);
                return None;
            }
        };
        let registration = &self.registration;
        let known =
            registration.events.contains(&event) || registration.intercepts.contains(&event);
        if !known && registration.events.len() + registration.intercepts.len() >= MAX_SUBSCRIPTIONS
        {
            self.refuse(format!(
                "event `{shown}` refused: {MAX_SUBSCRIPTIONS} events subscribed already, \
                 the most an extension may"
            ));
            return None;
        }
        Some(event)
    }

    fn room_for_one(&self) -> Result<(), String> {
        let count = self.registration.tools.len() + self.registration.commands.len();
        let max = self.limits.max_registrations;
        if count >= max {
            return Err(format!(
                "{count} tools and commands registered already, the most an extension may \
                 (`max_registrations` {max})"
            ));
        }
        Ok(())
    }

    fn description(&self, description: &str) -> Result<(), String> {
        let max = self.limits.max_description_bytes;
        if description.len() > max {
            return Err(format!(
                "its description is {} bytes, over the cap (`max_description_bytes` {max})",
                description.len()
            ));
        }
        Ok(())
    }

    /// The schema's size as JSON, refused past the cap without encoding
    /// more than the cap.
    fn schema_size(&self, tool: &RegisterTool, schema: &Value) -> Result<usize, String> {
        let max = self.limits.max_schema_bytes;
        let over = || format!("its schema is over {max} bytes (`max_schema_bytes` {max})");
        // A schema sent as a string holding JSON is at least that long.
        if let Value::String(text) = &tool.schema
            && text.len() > max
        {
            return Err(over());
        }
        let mut counter = Counter { count: 0, max };
        match serde_json::to_writer(&mut counter, schema) {
            Ok(()) => Ok(counter.count),
            Err(_) => Err(over()),
        }
    }

    fn hold(&mut self, bytes: usize) -> Result<(), String> {
        let max = self.limits.max_total_bytes;
        let held = self.held.saturating_add(bytes);
        if held > max {
            return Err(format!(
                "the extension's registrations would hold {held} bytes, over the cap of {max}"
            ));
        }
        self.held = held;
        Ok(())
    }

    /// Records a refusal; `false`, for the registration it refuses.
    fn refuse(&mut self, why: String) -> bool {
        if self.registration.refused.len() < MAX_REFUSALS_LISTED {
            tracing::warn!("extension `{}`: {why}", self.name);
            self.registration.refused.push(why);
        } else {
            self.unlisted += 1;
        }
        false
    }
}

/// Why an event was refused a sandboxed extension: `how`, `seen` or
/// `intercepted`.
fn not_granted(how: &str) -> String {
    format!(
        "a sandboxed extension's event is {how} only when its manifest declares it in \
         `capabilities.events` and the policy grants it"
    )
}

/// The name as shown in messages, or why it is refused. `what` is `tool`,
/// `command` or `event`.
fn checked_name(what: &str, name: &str) -> Result<String, String> {
    if name.trim().is_empty() {
        return Err(format!("a {what} with an empty name refused"));
    }
    let chars = name.chars().count();
    let shown = Shown(&clipped(name, MAX_NAME_CHARS)).to_string();
    if has_unsafe(name) {
        return Err(format!(
            "{what} `{shown}` refused: its name holds control or invisible characters"
        ));
    }
    if chars > MAX_NAME_CHARS {
        return Err(format!(
            "{what} `{shown}` refused: its name is {chars} characters, \
             the most is {MAX_NAME_CHARS}"
        ));
    }
    Ok(shown)
}

/// Counts bytes written, failing once past `max`.
struct Counter {
    count: usize,
    max: usize,
}

impl Write for Counter {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.count = self.count.saturating_add(buf.len());
        if self.count > self.max {
            return Err(std::io::Error::other("over the cap"));
        }
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn tool(name: &str, description: &str, schema: Value) -> RegisterTool {
        RegisterTool {
            name: name.to_owned(),
            description: description.to_owned(),
            schema,
        }
    }

    fn hello(version: &str) -> Hello {
        Hello {
            name: "hostile".to_owned(),
            version: version.to_owned(),
            capabilities: Vec::new(),
        }
    }

    /// Registers `tools` under `limits`; the names kept and the refusals.
    fn register(
        limits: &RegistrationLimits,
        tools: Vec<RegisterTool>,
    ) -> (Vec<String>, Vec<String>) {
        let mut registrar = Registrar::new("hostile", limits, hello("0.1.0"));
        for tool in tools {
            registrar.tool(tool);
        }
        let registration = registrar.finish();
        let names = registration.tools.into_iter().map(|t| t.name).collect();
        (names, registration.refused)
    }

    #[test]
    fn names_a_terminal_would_act_on_are_refused_and_shown_escaped() {
        let long = "n".repeat(65);
        let cases = [
            (
                "\u{1b}[2Jevil",
                "tool `\\u{1b}[2Jevil` refused: its name holds control or invisible characters",
            ),
            (
                "a\r\nb",
                "tool `a\\u{d}\\u{a}b` refused: its name holds control or invisible characters",
            ),
            (
                "\u{1b}]0;pwned\u{7}",
                "tool `\\u{1b}]0;pwned\\u{7}` refused: its name holds control or invisible characters",
            ),
            (
                "txt\u{202e}exe",
                "tool `txt\\u{202e}exe` refused: its name holds control or invisible characters",
            ),
            ("", "a tool with an empty name refused"),
            (" \t", "a tool with an empty name refused"),
        ];
        for (name, expected) in cases {
            let (kept, refused) = register(
                &RegistrationLimits::default(),
                vec![tool(name, "", json!({"type": "object"}))],
            );
            assert!(kept.is_empty(), "{name:?}");
            assert_eq!(refused, vec![expected.to_owned()], "{name:?}");
            assert!(!has_unsafe(&refused[0]), "{name:?}");
        }
        let (kept, refused) = register(
            &RegistrationLimits::default(),
            vec![tool(&long, "", json!({"type": "object"}))],
        );
        assert!(kept.is_empty());
        assert_eq!(
            refused,
            vec![format!(
                "tool `{}…` refused: its name is 65 characters, the most is 64",
                "n".repeat(64)
            )]
        );
    }

    #[test]
    fn counts_and_sizes_past_the_caps_are_refused_naming_the_cap() {
        let limits = RegistrationLimits {
            max_registrations: 3,
            max_description_bytes: 16,
            max_schema_bytes: 64,
            max_total_bytes: 1024,
            ..RegistrationLimits::default()
        };
        let object = || json!({"type": "object"});
        let big_schema = json!({"type": "object", "description": "s".repeat(100)});
        // (tool, refusal; None when it is accepted)
        let cases = [
            (tool("a", "fine", object()), None),
            (
                tool("b", &"d".repeat(17), object()),
                Some(
                    "tool `b` refused: its description is 17 bytes, over the cap (`max_description_bytes` 16)",
                ),
            ),
            (
                tool("c", "", big_schema.clone()),
                Some("tool `c` refused: its schema is over 64 bytes (`max_schema_bytes` 64)"),
            ),
            // A schema pre-encoded as a string is measured too.
            (
                tool("d", "", Value::String(big_schema.to_string())),
                Some("tool `d` refused: its schema is over 64 bytes (`max_schema_bytes` 64)"),
            ),
            (
                tool("a", "again", object()),
                Some("tool `a` registered twice"),
            ),
            (tool("e", "", object()), None),
            (tool("f", "", object()), None),
            (
                tool("g", "", object()),
                Some(
                    "tool `g` refused: 3 tools and commands registered already, the most an extension may (`max_registrations` 3)",
                ),
            ),
        ];
        let (tools, expected): (Vec<_>, Vec<_>) = cases.into_iter().unzip();
        let (kept, refused) = register(&limits, tools);
        assert_eq!(kept, ["a", "e", "f"]);
        let expected: Vec<String> = expected.into_iter().flatten().map(str::to_owned).collect();
        assert_eq!(refused, expected);
    }

    #[test]
    fn what_an_extension_holds_in_total_is_capped() {
        let limits = RegistrationLimits {
            max_total_bytes: 100,
            ..RegistrationLimits::default()
        };
        // Each holds 58 bytes: a name of 1, a description of 40 and
        // `{"type":"object"}`, 17.
        let tools = (0..3)
            .map(|i| tool(&format!("{i}"), &"d".repeat(40), json!({"type": "object"})))
            .collect();
        let (kept, refused) = register(&limits, tools);
        assert_eq!(kept, ["0"]);
        assert_eq!(
            refused,
            [
                "tool `1` refused: the extension's registrations would hold 116 bytes, over the cap of 100",
                "tool `2` refused: the extension's registrations would hold 116 bytes, over the cap of 100",
            ]
        );
    }

    #[test]
    fn refusals_past_the_listed_ones_are_counted_in_one_line() {
        let tools = (0..40)
            .map(|i| tool(&format!("\u{1b}[{i}m"), "", json!({"type": "object"})))
            .collect();
        let (kept, refused) = register(&RegistrationLimits::default(), tools);
        assert!(kept.is_empty());
        assert_eq!(refused.len(), MAX_REFUSALS_LISTED + 1);
        assert_eq!(
            refused.last().map(String::as_str),
            Some("8 more registrations refused (only the first 32 are listed)")
        );
    }

    #[test]
    fn commands_events_and_versions_follow_the_same_rules() {
        let limits = RegistrationLimits {
            events: EventRights::all(),
            ..RegistrationLimits::default()
        };
        let mut registrar = Registrar::new("hostile", &limits, hello("1.0\u{1b}[2J"));
        registrar.command(RegisterCommand {
            name: "\u{1b}[2Jwipe".to_owned(),
            description: String::new(),
        });
        registrar.command(RegisterCommand {
            name: "fine".to_owned(),
            description: "x".repeat(4097),
        });
        registrar.subscribe(Subscribe {
            events: vec!["turn_start".to_owned(), "a\nb".to_owned()],
            intercept: vec!["tool_call".to_owned(), "session_start".to_owned()],
        });
        registrar.subscribe(Subscribe {
            events: (0..70).map(|i| format!("custom_{i}")).collect(),
            intercept: Vec::new(),
        });
        let registration = registrar.finish();
        assert!(registration.commands.is_empty());
        assert_eq!(registration.hello.version, "");
        assert_eq!(
            registration.intercepts.iter().collect::<Vec<_>>(),
            ["tool_call"]
        );
        // turn_start, then custom events up to the cap of 64 with tool_call.
        assert_eq!(
            registration.events.len() + registration.intercepts.len(),
            MAX_SUBSCRIPTIONS
        );
        assert_eq!(
            registration.refused[..5],
            [
                "version `1.0\\u{1b}[2J` ignored: a version is at most 64 plain characters",
                "command `\\u{1b}[2Jwipe` refused: its name holds control or invisible characters",
                "command `fine` refused: its description is 4097 bytes, over the cap (`max_description_bytes` 4096)",
                "event `a\\u{a}b` refused: its name holds control or invisible characters",
                "`session_start` cannot be intercepted",
            ]
        );
        assert_eq!(
            registration.refused[5],
            "event `custom_62` refused: 64 events subscribed already, the most an extension may"
        );
        assert_eq!(registration.refused.len(), 5 + 8);
    }

    fn listed(set: &std::collections::BTreeSet<String>) -> Vec<&str> {
        set.iter().map(String::as_str).collect()
    }

    #[test]
    fn a_sandboxed_extension_subscribes_only_to_the_events_it_was_granted() {
        use crate::policy::{Layer, Policy};
        let declared: crate::manifest::Capabilities = serde_json::from_value(json!({
            "events": ["tool_call", "assistant_message", "custom"],
            "rewrite": ["tool_call"]
        }))
        .unwrap_or_else(|e| panic!("{e}"));
        let subscribe = || Subscribe {
            events: [
                "turn_start",
                "turn_end",
                "session_start",
                "tool_call",
                "assistant_message",
            ]
            .map(str::to_owned)
            .to_vec(),
            intercept: ["tool_call", "turn_start", "assistant_message"]
                .map(str::to_owned)
                .to_vec(),
        };
        let registration = |events: EventRights| {
            let limits = RegistrationLimits {
                events,
                ..RegistrationLimits::default()
            };
            let mut registrar = Registrar::new("spy", &limits, hello("1.0"));
            registrar.subscribe(subscribe());
            registrar.finish()
        };

        // Declared nothing: the lifecycle events, no intercept.
        let nothing = registration(EventRights::granted(
            &Policy::permissive().grant(&Default::default()),
        ));
        assert_eq!(
            listed(&nothing.events),
            ["session_start", "turn_end", "turn_start"]
        );
        assert!(nothing.intercepts.is_empty());
        let why = "a sandboxed extension's event is {} only when its manifest declares it in \
                   `capabilities.events` and the policy grants it";
        assert_eq!(
            nothing.refused,
            [
                format!("event `tool_call` refused: {}", why.replace("{}", "seen")),
                format!(
                    "event `assistant_message` refused: {}",
                    why.replace("{}", "seen")
                ),
                format!(
                    "intercept of `tool_call` refused: {}",
                    why.replace("{}", "intercepted")
                ),
                format!(
                    "intercept of `turn_start` refused: {}",
                    why.replace("{}", "intercepted")
                ),
                format!(
                    "intercept of `assistant_message` refused: {}",
                    why.replace("{}", "intercepted")
                ),
            ]
        );

        // Declared, and the policy allows only `tool_call`.
        let dir = std::path::Path::new("/etc/zotbox/policy.json");
        let policy = Policy::from_layers(vec![Layer {
            scope: crate::policy::Scope::System,
            path: dir.to_owned(),
            file: serde_json::from_value(json!({"events": ["tool_call"]}))
                .unwrap_or_else(|e| panic!("{e}")),
        }]);
        let narrowed = registration(EventRights::granted(&policy.grant(&declared)));
        assert_eq!(
            listed(&narrowed.events),
            ["session_start", "tool_call", "turn_end", "turn_start"]
        );
        assert_eq!(listed(&narrowed.intercepts), ["tool_call"]);
        assert_eq!(narrowed.refused.len(), 3, "{:?}", narrowed.refused);

        // Declared and allowed: all of it.
        let granted = registration(EventRights::granted(&Policy::permissive().grant(&declared)));
        assert_eq!(granted.events.len(), 5);
        assert_eq!(
            listed(&granted.intercepts),
            ["assistant_message", "tool_call"]
        );
        assert_eq!(
            granted.refused,
            [format!(
                "intercept of `turn_start` refused: {}",
                why.replace("{}", "intercepted")
            )]
        );
    }
}
