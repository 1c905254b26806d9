//! The forms of a file path a `pathPattern` is also tried on.
//!
//! Paths are matched as written and, when different, lexically normalised:
//! `\` read as `/`, empty and `.` segments dropped, `a/..` resolved, so that
//! `config/./production.yml` or `docs/../config/production.yml` does not slip
//! past `config/production`.
//!
//! With a workspace to resolve from, a path is also matched where it leads
//! ([`leads_to`]): the symbolic links on its way followed as the tool that
//! opens it would follow them, given relative to the workspace when it lies
//! inside, absolute otherwise. A workspace's author writes its links, so a link
//! `notes -> config/production` must not carry a write past a rule on
//! `config/production`; nor may an absolute spelling of a workspace file
//! slip past a rule anchored at the workspace's root (`^config/`). A path
//! starting with `~/` (or `$HOME/`) is also matched with the home spelled
//! out, and where that leads ([`under_home`]): a tool may expand it, and
//! `~/../../etc/passwd` must meet a rule on `^/etc/`. A form only adds
//! matches: resolving blocks more, never less.

use std::ffi::OsString;
use std::path::{Component, Path, PathBuf};

/// The longest path resolved against the filesystem: what the kernel takes
/// (`PATH_MAX`); a tool given a longer one fails to open it.
const MAX_RESOLVED_BYTES: usize = 4096;

/// The links followed on one path's way, as the kernel allows
/// (`MAXSYMLINKS`); past it the tool's open fails too (`ELOOP`).
const MAX_LINKS: usize = 40;

/// `path` with `\` as `/`, empty and `.` segments dropped and `..` resolved
/// lexically; `None` when that changes nothing.
pub(super) fn normalize_path(path: &str) -> Option<String> {
    let needs = path.contains('\\')
        || path.contains("//")
        || path
            .split(['/', '\\'])
            .any(|segment| segment == "." || segment == "..");
    if !needs {
        return None;
    }
    let unified = path.replace('\\', "/");
    let absolute = unified.starts_with('/');
    let mut segments: Vec<&str> = Vec::new();
    for segment in unified.split('/') {
        match segment {
            "" | "." => {}
            ".." => {
                if segments.last().is_some_and(|s| *s != "..") {
                    segments.pop();
                } else if !absolute {
                    segments.push("..");
                }
            }
            segment => segments.push(segment),
        }
    }
    let joined = segments.join("/");
    let normal = if absolute {
        format!("/{joined}")
    } else {
        joined
    };
    (normal != path).then_some(normal)
}

/// Where `path` leads from the folder `from` (absolute), every symbolic
/// link on the way followed, those in `from` too: in `workspace` (which
/// must be canonical: `std::fs::canonicalize`), relative to it (the form a tool is handed a
/// workspace file in); elsewhere, absolute. Only a path outside is given
/// absolute, so that a rule on `secrets` does not meet every file of a
/// workspace kept in `~/secrets-tool/`. Components past the last one that
/// exists are taken lexically (a tool writing there creates them); a link at
/// the end is followed even when its target does not exist yet, since a
/// write through it creates the target. `None` for the workspace itself and
/// for a path the tool could not open either: too long, or through looping
/// links.
pub(super) fn leads_to(workspace: &Path, from: &Path, path: &str) -> Option<String> {
    if path.is_empty() || path.len() > MAX_RESOLVED_BYTES || path.contains('\0') {
        return None;
    }
    let resolved = resolve(&from.join(path))?;
    let form = match resolved.strip_prefix(workspace) {
        Ok(rest) if rest.as_os_str().is_empty() => return None,
        Ok(rest) => rest,
        Err(_) => &resolved,
    };
    // A name that is not UTF-8 (a link's target may be any bytes) is
    // matched with `\u{fffd}` for those bytes: the rest still meets rules.
    Some(form.to_string_lossy().into_owned())
}

/// What follows the home folder in `path` when it starts with the `~` a
/// tool that expands it reads as `$HOME` (or with `$HOME` or `${HOME}`, for
/// a tool that expands variables): alone (the rest empty) or followed by a
/// `/` (the rest from it). `~name` (another user's home) is not expanded:
/// that takes a lookup in the user database, which may be a network
/// service, on every call.
pub(super) fn under_home(path: &str) -> Option<&str> {
    let rest = ["~", "$HOME", "${HOME}"]
        .iter()
        .find_map(|home| path.strip_prefix(home))?;
    (rest.is_empty() || rest.starts_with('/')).then_some(rest)
}

/// `start` (absolute) with its symbolic links followed one component at a
/// time, as the kernel's path walk does: a link's target replaces it (from
/// `/` when absolute, else from the link's folder) and `..` leaves the folder
/// reached, not the one spelled. Once a component does not exist, the rest
/// is taken lexically.
fn resolve(start: &Path) -> Option<PathBuf> {
    let mut pending: Vec<OsString> = Vec::new();
    push_components(&mut pending, start);
    let mut resolved = PathBuf::from("/");
    let mut links = 0;
    let mut on_disk = true;
    while let Some(component) = pending.pop() {
        if component == ".." {
            resolved.pop();
            continue;
        }
        let next = resolved.join(&component);
        if on_disk {
            match std::fs::symlink_metadata(&next) {
                Ok(meta) if meta.file_type().is_symlink() => {
                    links += 1;
                    if links > MAX_LINKS {
                        return None;
                    }
                    let target = std::fs::read_link(&next).ok()?;
                    if target.is_absolute() {
                        resolved = PathBuf::from("/");
                    }
                    push_components(&mut pending, &target);
                    continue;
                }
                Ok(_) => {}
                Err(_) => on_disk = false,
            }
        }
        resolved = next;
    }
    Some(resolved)
}

/// Pushes `path`'s components onto `pending` so that the first is popped
/// first; `.` and the root are dropped, `..` kept for the walk.
fn push_components(pending: &mut Vec<OsString>, path: &Path) {
    for component in path.components().rev() {
        match component {
            Component::Normal(name) => pending.push(name.to_owned()),
            Component::ParentDir => pending.push(OsString::from("..")),
            Component::RootDir | Component::CurDir | Component::Prefix(_) => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_normalize_lexically() {
        let cases = [
            ("config/production.yml", None),
            ("./config/production.yml", Some("config/production.yml")),
            ("a//b/./c", Some("a/b/c")),
            ("a/b/../../c", Some("c")),
            ("../x", None),
            ("../a/../x", Some("../x")),
            ("/../etc/passwd", Some("/etc/passwd")),
            ("a\\b", Some("a/b")),
        ];
        for (path, expected) in cases {
            assert_eq!(normalize_path(path).as_deref(), expected, "{path}");
        }
    }
}
