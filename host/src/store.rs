//! What the user decided, kept under `$ZOT_HOME`: installed extensions and
//! trusted workspaces.
//!
//! Everything here writes only inside `$ZOT_HOME` (or, for a project install,
//! the workspace's `.zot/extensions/`), through one atomic-write path, and
//! never reads a decision from the workspace: a cloned repository cannot
//! install, trust or approve anything by itself (see `THREATS.md`).
//!
//! - [`install`]: copy an extension folder into place, exactly as shown on
//!   the consent screen, or not at all;
//! - [`installer`]: an install end to end from any source (fetch, plan,
//!   then commit and lock), and updates from registries with what they add
//!   to the grant;
//! - [`lock`]: `$ZOT_HOME/zotbox.lock`, what each install came from and
//!   the digest of its files, re-checked at every start; a trusted
//!   workspace's `.zot/zotbox.lock` may only narrow it;
//! - [`pack`]: an extension folder as a reproducible `.tar.gz`;
//! - [`registry`]: a registry's signed index, and the checks of an entry
//!   and its archive against the policy's keys and rules;
//! - [`secret`]: the values of the user's secrets, in a file only the user
//!   can read, handed to the sandbox the moment a request is sent;
//! - [`source`]: where an install comes from (a folder, git, an `https://`
//!   archive, a registry entry) and how git and archives are fetched;
//! - [`fetch`]: HTTPS downloads, through the `http` capability's client;
//! - [`unpack`]: a downloaded `.tar.gz` unpacked entry by entry, refusing
//!   anything that could write outside its folder;
//! - [`trust`]: the records of workspaces the user trusted, bound to the
//!   workspace's canonical path and a hash of every file that can run;
//! - [`signature`]: minisign-compatible ed25519 keys and signatures.

pub mod fetch;
pub mod install;
pub mod installer;
pub mod lock;
pub mod pack;
pub mod registry;
pub mod secret;
pub mod signature;
pub mod source;
pub mod trust;
pub mod unpack;

use std::path::Path;

/// Whether an output path names a folder to write into rather than a file:
/// an existing folder, or a path written with a trailing `/` (`--out
/// site/`), which the writer makes when it is missing.
pub fn names_a_folder(path: &Path) -> bool {
    use std::os::unix::ffi::OsStrExt as _;
    path.as_os_str().as_bytes().ends_with(b"/") || path.is_dir()
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn a_trailing_slash_names_a_folder_that_does_not_exist_yet() {
        let dir = tempfile::tempdir().unwrap();
        let missing = dir.path().join("site");
        assert!(!names_a_folder(&missing));
        assert!(names_a_folder(Path::new(&format!(
            "{}/",
            missing.display()
        ))));
        assert!(names_a_folder(dir.path()));
        let file = dir.path().join("notes-1.0.0.tar.gz");
        std::fs::write(&file, b"").unwrap();
        assert!(!names_a_folder(&file));
    }
}
