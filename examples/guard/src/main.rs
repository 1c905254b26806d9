//! `guard`: watches events and intercepts `tool_call`.
//!
//! It blocks shell commands that match dangerous patterns, rewrites one
//! harmless case (`ls` without flags becomes `ls -la`), counts turns from
//! `turn_start` events, and offers `/guard-stats` to show what it saw.

use serde_json::{Value, json};
use zotbox_guest::{Extension, Response, Verdict, event_name};

/// Substrings of a shell command that are never allowed, with why.
const DANGEROUS: &[(&str, &str)] = &[
    ("rm -rf /", "deletes the whole filesystem"),
    ("rm -rf ~", "deletes the home folder"),
    (":(){", "is a fork bomb"),
    ("mkfs", "formats a disk"),
    ("dd if=", "writes raw disk blocks"),
    ("> /dev/sd", "overwrites a disk"),
    ("curl | sh", "runs code from the network"),
];

fn verdict(tool: &str, args: &Value) -> Verdict {
    if tool != "bash" {
        return Verdict::Allow;
    }
    let Some(command) = args.get("command").and_then(Value::as_str) else {
        return Verdict::Allow;
    };
    let normalized = command.split_whitespace().collect::<Vec<_>>().join(" ");
    for (pattern, why) in DANGEROUS {
        if normalized.contains(pattern) {
            return Verdict::block(format!("refused: `{pattern}` {why}"));
        }
    }
    if normalized == "ls" {
        let mut rewritten = args.clone();
        rewritten["command"] = json!("ls -la");
        return Verdict::rewrite(rewritten);
    }
    Verdict::Allow
}

fn main() -> std::io::Result<()> {
    let mut turns = 0u64;
    let mut tool_calls = 0u64;
    let stats = std::rc::Rc::new(std::cell::Cell::new((0u64, 0u64)));
    let (seen, shown) = (stats.clone(), stats);
    Extension::new("guard", "1.0.0")
        .on_event(
            [event_name::TURN_START, event_name::TOOL_CALL],
            move |_ctx, event| {
                match event.event.as_str() {
                    event_name::TURN_START => turns += 1,
                    _ => tool_calls += 1,
                }
                seen.set((turns, tool_calls));
            },
        )
        .intercept_tool_call(|_ctx, tool, args| verdict(tool, args))
        .command(
            "guard-stats",
            "show what the guard has seen",
            move |_ctx, _args| {
                let (turns, calls) = shown.get();
                Response::display(format!("guard: {turns} turns, {calls} tool calls seen"))
            },
        )
        .run()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn patterns_block_and_ls_is_rewritten() {
        assert!(matches!(
            verdict("bash", &json!({"command": "rm  -rf /"})),
            Verdict::Block { .. }
        ));
        assert!(matches!(
            verdict("bash", &json!({"command": "ls"})),
            Verdict::Rewrite { .. }
        ));
        assert!(matches!(
            verdict("bash", &json!({"command": "ls -1"})),
            Verdict::Allow
        ));
        assert!(matches!(
            verdict("read", &json!({"command": "rm -rf /"})),
            Verdict::Allow
        ));
    }
}
