//! Deny-rule compilation and matching: any pattern compiles or is refused
//! (length-capped on load, within the chain's budget when compiled), and
//! matching any subject, read as a shell command or a path, never panics:
//! paths are resolved from a fixture workspace full of links, and `~` and
//! `$HOME` read as a fixture home.
#![no_main]

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use libfuzzer_sys::fuzz_target;
use zotbox::data::{DataOrigin, Plugin};
use zotbox::internals::DenyRules;

/// A workspace with links inside, out, in a loop and dangling, and a home
/// beside it (also `$HOME`, set once before any rule reads it).
fn workspace() -> &'static Path {
    static FIXTURE: OnceLock<PathBuf> = OnceLock::new();
    FIXTURE.get_or_init(|| {
        let root = std::env::temp_dir().join(format!("zotbox-fuzz-deny-{}", std::process::id()));
        let (ws, home) = (root.join("ws"), root.join("home"));
        for dir in [ws.join("config/production"), home.join(".ssh")] {
            std::fs::create_dir_all(dir).expect("fixture folders");
        }
        for (target, link) in [
            ("config/production", ws.join("notes")),
            ("/etc", ws.join("outside")),
            ("loop", ws.join("loop")),
            ("missing/file", ws.join("dangling")),
            ("../home", ws.join("up")),
            (".ssh", home.join("keys")),
        ] {
            let _ = std::os::unix::fs::symlink(target, link);
        }
        // SAFETY: set once, before any thread of this target reads it.
        unsafe { std::env::set_var("HOME", &home) };
        ws
    })
}

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
    let rules = DenyRules::new(&[parsed.value]).resolving_from(workspace());
    // Refused for the budget or compiled: either way, no panic.
    let _ = rules.problems().len() + rules.len();
    let _ = rules.check("bash", &serde_json::json!({ "command": subject }));
    let _ = rules.check("write", &serde_json::json!({ "path": subject }));
    let _ = rules.check("bash", &serde_json::json!({ "command": 7 }));
});
