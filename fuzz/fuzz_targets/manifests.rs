//! `extension.json`, data tool, refusal plugin, skill and policy parsing:
//! any text is either accepted or refused with an error, never a panic.
#![no_main]

use std::path::Path;

use libfuzzer_sys::fuzz_target;
use zotbox::data::{DataOrigin, DataTool, Plugin, Skill};
use zotbox::manifest::Manifest;
use zotbox::policy::PolicyFile;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let _ = Manifest::parse(text, Path::new("/fuzz/ext/extension.json"));
    if let Ok(tool) = DataTool::parse(text, Path::new("/fuzz/tools/t.json"), DataOrigin::Project) {
        // Rendering with any argument must not panic either.
        let _ = tool.value.kind.render(Some(text));
        let _ = tool.value.schema();
    }
    let _ = Plugin::parse(text, Path::new("/fuzz/plugins/p.json"), DataOrigin::Project);
    let _ = Skill::parse(text, Path::new("/fuzz/skills/s.md"), DataOrigin::Project);
    let _ = serde_json::from_str::<PolicyFile>(text);
});
