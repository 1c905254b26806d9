//! Deny-rule compilation and matching: any pattern compiles or is refused
//! (length-capped on load, within the chain's budget when compiled), and
//! matching any subject, read as a shell command or a path, never panics.
#![no_main]

use std::path::Path;

use libfuzzer_sys::fuzz_target;
use zotbox::data::{DataOrigin, Plugin};
use zotbox::internals::DenyRules;

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    // `pattern \0 subject`: the first part is the regex, the rest the input.
    let (pattern, subject) = text.split_once('\0').unwrap_or((&text, "rm -rf /"));
    let plugin = serde_json::json!({
        "name": "fuzz",
        "description": "fuzzed",
        "deny": [
            {"tools": ["bash"], "commandPattern": pattern, "reason": "fuzzed command"},
            {"tools": ["write"], "pathPattern": pattern, "reason": "fuzzed path"},
        ],
    });
    let Ok(parsed) = Plugin::parse(&plugin.to_string(), Path::new("/fuzz/p.json"), DataOrigin::User) else {
        return;
    };
    let rules = DenyRules::new(&[parsed.value]);
    // Refused for the budget or compiled: either way, no panic.
    let _ = rules.problems().len() + rules.len();
    let _ = rules.check("bash", &serde_json::json!({ "command": subject }));
    let _ = rules.check("write", &serde_json::json!({ "path": subject }));
    let _ = rules.check("bash", &serde_json::json!({ "command": 7 }));
});
