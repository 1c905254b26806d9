//! An interceptor's verdict: the one type the host (for a guard chain) and
//! the guest SDK (for its interceptors) share.
//!
//! On the wire a verdict is an `event_intercept_response`: `block` with a
//! `reason`, `modified_args` for a rewrite, `replace_text` for a
//! replacement, nothing for allow. As JSON of its own (`zotbox check
//! --json`), it is tagged by `verdict`:
//! `{"verdict":"block","reason":"…"}`.

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// What an interceptor (or a whole guard chain) decided.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(tag = "verdict", rename_all = "snake_case")]
pub enum Verdict {
    /// Let it happen unchanged.
    #[default]
    Allow,
    /// Refuse it; the reason is handed to the model.
    Block {
        /// Why.
        reason: String,
    },
    /// `tool_call` only: run the tool with these arguments instead (a JSON
    /// object; anything else is ignored).
    Rewrite {
        /// The new arguments.
        args: Value,
    },
    /// `assistant_message` only: show this text instead.
    Replace {
        /// The new text.
        text: String,
    },
}

impl Verdict {
    /// [`Verdict::Block`] with a reason.
    pub fn block(reason: impl Into<String>) -> Self {
        Self::Block {
            reason: reason.into(),
        }
    }

    /// [`Verdict::Rewrite`] with replacement arguments (a JSON object).
    pub fn rewrite(args: impl Into<Value>) -> Self {
        Self::Rewrite { args: args.into() }
    }

    /// [`Verdict::Replace`] with replacement text.
    pub fn replace_text(text: impl Into<String>) -> Self {
        Self::Replace { text: text.into() }
    }

    /// Whether it refuses.
    pub fn is_block(&self) -> bool {
        matches!(self, Self::Block { .. })
    }

    /// Its name, as tagged in JSON: `allow`, `block`, `rewrite` or `replace`.
    pub fn kind(&self) -> &'static str {
        match self {
            Self::Allow => "allow",
            Self::Block { .. } => "block",
            Self::Rewrite { .. } => "rewrite",
            Self::Replace { .. } => "replace",
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn verdicts_are_tagged_by_kind() {
        let cases = [
            (Verdict::Allow, json!({"verdict": "allow"})),
            (
                Verdict::block("no"),
                json!({"verdict": "block", "reason": "no"}),
            ),
            (
                Verdict::rewrite(json!({"a": 1})),
                json!({"verdict": "rewrite", "args": {"a": 1}}),
            ),
            (
                Verdict::replace_text("t"),
                json!({"verdict": "replace", "text": "t"}),
            ),
        ];
        for (verdict, wire) in cases {
            assert_eq!(serde_json::to_value(&verdict).ok(), Some(wire.clone()));
            assert_eq!(wire[&"verdict"], verdict.kind());
            assert_eq!(serde_json::from_value::<Verdict>(wire).ok(), Some(verdict));
        }
    }
}
