//! The layering rule, checked on the source: a module may use the modules
//! below it, never one above it (see the README's architecture section).
//! A cycle between layers is a design bug; this test names the import that
//! makes one.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// The library's modules, lowest first. Modules on one line share a layer
/// and may not use each other.
const LAYERS: &[&[&str]] = &[
    // Leaves: they use no module of the crate.
    &["text", "user_file"],
    &["home", "event", "build", "instance_log"],
    &["audit"],
    &["capability"],
    &["manifest"],
    &["policy"],
    &["data"],
    &["guard"],
    &["discovery"],
    &["sandbox"],
    &["runtime"],
    &["session"],
    &["store"],
    &["host"],
    &["serve", "bridge", "internals"],
    &["shared"],
    &["cli"],
];

/// What the crate root re-exports, and the module each item comes from.
const ROOT_ITEMS: &[(&str, &str)] = &[
    ("HostEvent", "event"),
    ("Host", "host"),
    ("HostBuilder", "host"),
    ("HostError", "host"),
    ("Decision", "host"),
    ("Verdict", "host"),
    ("CallError", "session"),
    ("FailMode", "policy"),
    ("Interceptable", "session"),
    ("SessionConfig", "session"),
    ("Closed", "session"),
    ("Exit", "runtime"),
    ("Launcher", "runtime"),
    ("FileError", "user_file"),
];

fn layer_of(module: &str) -> Option<usize> {
    LAYERS.iter().position(|layer| layer.contains(&module))
}

/// Every `.rs` file of module `name`: `src/name.rs` and everything under `src/name/`.
fn files_of(src: &Path, name: &str) -> Vec<PathBuf> {
    let mut files = vec![src.join(format!("{name}.rs"))];
    let mut dirs = vec![src.join(name)];
    while let Some(dir) = dirs.pop() {
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        for entry in entries.flatten() {
            let path = entry.path();
            if path.is_dir() {
                dirs.push(path);
            } else if path.extension().is_some_and(|e| e == "rs") {
                files.push(path);
            }
        }
    }
    files
}

/// The code of a file without its tests and comments: what it depends on
/// when built for use.
fn code(path: &Path) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let text = text.split("#[cfg(test)]").next().unwrap_or_default();
    text.lines()
        .map(|line| line.split("//").next().unwrap_or_default())
        .collect::<Vec<_>>()
        .join("\n")
}

/// The crate modules `code` names: `crate::x::…`, `crate::{x, …}` groups
/// and root re-exports.
fn used_modules(code: &str) -> Vec<String> {
    let mut used = Vec::new();
    let mut rest = code;
    while let Some(at) = rest.find("crate::") {
        rest = &rest[at + "crate::".len()..];
        let names: Vec<&str> = if let Some(group) = rest.strip_prefix('{') {
            let end = group.find('}').unwrap_or(group.len());
            group[..end]
                .split(',')
                .map(|item| item.trim().split("::").next().unwrap_or_default())
                .collect()
        } else {
            let end = rest
                .find(|c: char| !(c.is_alphanumeric() || c == '_'))
                .unwrap_or(rest.len());
            vec![&rest[..end]]
        };
        for name in names {
            let module = ROOT_ITEMS
                .iter()
                .find(|(item, _)| *item == name)
                .map_or(name, |(_, module)| module);
            if !module.is_empty() {
                used.push(module.to_owned());
            }
        }
    }
    used
}

#[test]
fn no_module_uses_one_above_its_layer() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let lib = std::fs::read_to_string(src.join("lib.rs")).unwrap_or_default();
    // Every module the library declares has a place in the layers.
    let declared: Vec<String> = lib
        .lines()
        .filter_map(|line| {
            let line = line.trim();
            let rest = line
                .strip_prefix("pub mod ")
                .or_else(|| line.strip_prefix("mod "))
                .or_else(|| line.strip_prefix("pub(crate) mod "))?;
            Some(rest.trim_end_matches(';').to_owned())
        })
        .collect();
    assert!(!declared.is_empty(), "no modules found in lib.rs");
    let unplaced: Vec<&String> = declared.iter().filter(|m| layer_of(m).is_none()).collect();
    assert!(
        unplaced.is_empty(),
        "modules with no layer: {unplaced:?}; add them to LAYERS"
    );
    let mut violations: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for module in &declared {
        let Some(own) = layer_of(module) else {
            continue;
        };
        for file in files_of(&src, module) {
            for used in used_modules(&code(&file)) {
                if used == *module {
                    continue;
                }
                match layer_of(&used) {
                    Some(layer) if layer < own => {}
                    Some(_) => violations
                        .entry(format!(
                            "{}",
                            file.strip_prefix(&src).unwrap_or(&file).display()
                        ))
                        .or_default()
                        .push(format!("uses `{used}`")),
                    // `crate::protocol` and the like: not a module of ours.
                    None => {}
                }
            }
        }
    }
    assert!(
        violations.is_empty(),
        "imports from a layer above (or beside) the importer: {violations:#?}"
    );
}

#[test]
fn the_scanner_reads_paths_groups_and_root_items() {
    let code = "use crate::policy::Policy;\nuse crate::{Host, audit::AuditLog};\nlet x = crate::text::shown(y);";
    assert_eq!(used_modules(code), ["policy", "host", "audit", "text"]);
}
