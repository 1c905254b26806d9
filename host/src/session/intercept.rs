//! Intercepts: what can be asked about, and the verdicts.

use serde_json::Value;
use zotbox_protocol::{EventIntercept, event_name};

/// What an interceptor (or the whole guard chain) decided: the protocol's
/// one verdict type, shared with the guest SDK.
pub use zotbox_protocol::Verdict;

/// Something that can be intercepted.
#[derive(Debug, Clone, PartialEq)]
pub enum Interceptable {
    /// A tool call about to run.
    ToolCall {
        /// The tool.
        tool_name: String,
        /// Its arguments.
        tool_args: Value,
    },
    /// A turn about to start.
    TurnStart {
        /// The step number.
        step: u64,
    },
    /// An assistant message about to be shown.
    AssistantMessage {
        /// Its text.
        text: String,
    },
}

impl Interceptable {
    /// The event name subscribers intercept.
    pub fn event(&self) -> &'static str {
        match self {
            Self::ToolCall { .. } => event_name::TOOL_CALL,
            Self::TurnStart { .. } => event_name::TURN_START,
            Self::AssistantMessage { .. } => event_name::ASSISTANT_MESSAGE,
        }
    }

    pub(super) fn frame(&self, id: String) -> EventIntercept {
        let mut frame = EventIntercept {
            id,
            event: self.event().to_owned(),
            ..EventIntercept::default()
        };
        match self {
            Self::ToolCall {
                tool_name,
                tool_args,
            } => {
                frame.tool_name = Some(tool_name.clone());
                // As zot's own tools read them: a guard sees what runs.
                frame.tool_args = Some(
                    crate::guard::zot_args::as_zot_reads(tool_name, tool_args)
                        .unwrap_or_else(|| tool_args.clone()),
                );
            }
            Self::TurnStart { step } => frame.step = Some(*step),
            Self::AssistantMessage { text } => frame.text = Some(text.clone()),
        }
        frame
    }
}
