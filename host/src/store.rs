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
//! - [`trust`]: the records of workspaces the user trusted, bound to the
//!   workspace's canonical path and a hash of every file that can run.

pub mod install;
pub mod trust;

use std::io::Write as _;
use std::os::unix::fs::PermissionsExt as _;
use std::path::Path;

/// Writes `bytes` to `path` atomically: into a new file beside it, synced,
/// then renamed over it (and the folder synced). A reader or a crash never
/// sees half a file, and a `path` that is a symlink is replaced by the new
/// file, never written through. An existing regular file's mode is kept;
/// a new file gets `0644`.
///
/// # Errors
///
/// The I/O error of creating, writing, syncing or renaming the new file; on
/// error `path` is unchanged and the new file is gone.
pub fn write_atomic(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let dir = match path.parent() {
        Some(parent) if !parent.as_os_str().is_empty() => parent,
        _ => Path::new("."),
    };
    let mode = match std::fs::symlink_metadata(path) {
        Ok(meta) if meta.is_file() => meta.permissions().mode() & 0o7777,
        _ => 0o644,
    };
    let mut file = tempfile::Builder::new()
        .prefix(".zotbox-")
        .suffix(".tmp")
        .permissions(std::fs::Permissions::from_mode(mode))
        .tempfile_in(dir)?;
    file.write_all(bytes)?;
    file.as_file().sync_all()?;
    file.persist(path).map_err(|err| err.error)?;
    // The rename is durable once the folder is synced; a failure here
    // leaves the new content in place, so it is not an error of the write.
    if let Ok(folder) = std::fs::File::open(dir) {
        let _ = folder.sync_all();
    }
    Ok(())
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    #[test]
    fn write_atomic_replaces_a_link_instead_of_writing_through_it() {
        let tmp = tempfile::tempdir().unwrap();
        let outside = tmp.path().join("other-extension.json");
        std::fs::write(&outside, "theirs").unwrap();
        let path = tmp.path().join("extension.json");
        // Attack: a manifest that is a link to a file elsewhere.
        std::os::unix::fs::symlink(&outside, &path).unwrap();
        write_atomic(&path, b"mine").unwrap();
        assert_eq!(std::fs::read(&outside).unwrap(), b"theirs");
        assert!(std::fs::symlink_metadata(&path).unwrap().is_file());
        assert_eq!(std::fs::read(&path).unwrap(), b"mine");
        // A regular file keeps its mode; no temporary file is left behind.
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
        write_atomic(&path, b"again").unwrap();
        let meta = std::fs::metadata(&path).unwrap();
        assert_eq!(meta.permissions().mode() & 0o777, 0o600);
        let names: Vec<String> = std::fs::read_dir(tmp.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        assert_eq!(names.len(), 2, "{names:?}");
    }
}
