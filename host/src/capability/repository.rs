//! What git takes for a repository, whatever the folder is called.
//!
//! git opens a folder as a repository (its `config` read, its `hooks/`
//! run) when the folder holds `HEAD` and finds `objects/` and `refs/` in
//! it, or in the folder its `commondir` file names (a linked worktree's
//! own folder); and in a working tree it follows a `.git` file to the
//! folder it names. Such a folder decides what runs wherever it lies in a
//! workspace, whatever its name: `git status` there runs the
//! `core.fsmonitor` of its `config`, and a push to a bare one
//! (`fixtures/remote.git/`) runs its `hooks/post-receive`, none of it
//! sandboxed. So the capability layer treats it as a control path, as it
//! does every `.git`: the jail refuses to write in one or to complete
//! one ([`Signs`]), the confinement binds them read-only and sets aside
//! the ones a command makes. What a repository's configuration names in
//! the working tree (hooks, included configuration, programs) is one too,
//! as are the files its hooks run there ([`configured`]).
//!
//! git's own test (`is_git_directory`) also follows symbolic links: an
//! `objects` that is a link to any folder counts. The signs here count
//! every link under those names, wherever it leads, and ignore case (on a
//! case-folding file system git's `HEAD` opens a `head`): a folder is
//! taken for a repository at least whenever git would take it for one.

use std::ffi::OsStr;
use std::io;
use std::path::{Path, PathBuf};
use std::time::SystemTime;

use cap_std::fs::Dir;

use crate::user_file::Stamp;

pub(crate) mod config;
mod hooks;

/// The most read of a `.git` file or a `commondir` (each holds one path).
const POINTER_BYTES: u64 = 64 * 1024;

/// The entries of one folder that make git take it for a repository.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Signs {
    /// `HEAD`, anything but a folder (git reads a file or a link).
    head: bool,
    /// `objects`, of any kind: git asks only that it can be searched
    /// (`access(X_OK)`), which an executable file passes too.
    objects: bool,
    /// `refs`, of any kind, as `objects`.
    refs: bool,
    /// `commondir`, anything but a folder: `objects` and `refs` are
    /// looked for where it points, which may be anywhere.
    commondir: bool,
    /// `.git`, of any kind: the folder is a working tree, whose
    /// repository's configuration may name paths in it ([`configured`]).
    dot_git: bool,
}

/// The kind of one folder entry, as read without following a link.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    /// A folder.
    Folder,
    /// A symbolic link, wherever it leads.
    Link,
    /// A file, a FIFO, a socket or a device.
    Other,
}

impl Kind {
    /// The kind of an entry that is or is not a link, or a folder.
    pub(crate) fn new(link: bool, folder: bool) -> Self {
        if link {
            Self::Link
        } else if folder {
            Self::Folder
        } else {
            Self::Other
        }
    }
}

impl Signs {
    /// Notes the folder entry `name`, of `kind`.
    pub(crate) fn note(&mut self, name: &OsStr, kind: Kind) {
        let name = name.as_encoded_bytes();
        let not_a_folder = kind != Kind::Folder;
        if name.eq_ignore_ascii_case(b"HEAD") {
            self.head |= not_a_folder;
        } else if name.eq_ignore_ascii_case(b"objects") {
            self.objects = true;
        } else if name.eq_ignore_ascii_case(b"refs") {
            self.refs = true;
        } else if name.eq_ignore_ascii_case(b"commondir") {
            self.commondir |= not_a_folder;
        } else if name.eq_ignore_ascii_case(b".git") {
            self.dot_git = true;
        }
    }

    /// The signs in the open folder `dir`, looked up by name: five
    /// `fstatat` calls on its handle, however large the folder. (Each
    /// name is one fixed component, which cannot leave the folder: cap-std's
    /// own resolution, several calls a lookup, guards nothing here, and
    /// this runs for every folder above every write.)
    ///
    /// # Errors
    ///
    /// When a name cannot be looked up for a reason other than its absence.
    pub(crate) fn of(dir: &Dir) -> io::Result<Self> {
        use nix::fcntl::AtFlags;
        use nix::sys::stat::{SFlag, fstatat};
        let mut signs = Self::default();
        for name in ["HEAD", "objects", "refs", "commondir", ".git"] {
            match fstatat(dir, name, AtFlags::AT_SYMLINK_NOFOLLOW) {
                Ok(stat) => {
                    let format = SFlag::from_bits_truncate(stat.st_mode) & SFlag::S_IFMT;
                    let kind = Kind::new(format == SFlag::S_IFLNK, format == SFlag::S_IFDIR);
                    signs.note(OsStr::new(name), kind);
                }
                Err(nix::errno::Errno::ENOENT) => {}
                Err(errno) => return Err(errno.into()),
            }
        }
        Ok(signs)
    }

    /// The signs in the folder at `path`, looked up by name (nothing when
    /// it cannot be read).
    pub(crate) fn at(path: &Path) -> Self {
        Dir::open_ambient_dir(path, cap_std::ambient_authority())
            .and_then(|dir| Self::of(&dir))
            .unwrap_or_default()
    }

    /// Whether git takes the folder for a repository.
    pub(crate) fn repository(self) -> bool {
        self.head && ((self.objects && self.refs) || self.commondir)
    }

    /// Whether the folder is a working tree: it holds a `.git`.
    pub(crate) fn worktree(self) -> bool {
        self.dot_git
    }

    /// Whether a file called `name` made in the folder would make git take
    /// it for a repository (it is not one yet).
    pub(crate) fn completed_by(mut self, name: &OsStr) -> bool {
        !self.repository() && {
            self.note(name, Kind::Other);
            self.repository()
        }
    }
}

/// The folders git reads as the repository when it finds `path`: for a
/// `.git` file (a worktree's, `--separate-git-dir`), the folder it names
/// and that folder's common one; for a repository folder with a
/// `commondir` file, the folder that names. Nothing for anything else.
///
/// The workspace's author wrote both files: they are read capped (a line
/// is all git writes there) and never from a FIFO.
pub(crate) fn pointed_to(path: &Path) -> Vec<PathBuf> {
    let mut folders = Vec::new();
    let folder = if path.is_file() {
        let Ok(text) = crate::user_file::read_text(path, POINTER_BYTES) else {
            return folders;
        };
        let Some(named) = text.trim().strip_prefix("gitdir:").map(str::trim) else {
            return folders;
        };
        let Some(parent) = path.parent() else {
            return folders;
        };
        let named = parent.join(named);
        folders.push(named.clone());
        named
    } else {
        path.to_owned()
    };
    if let Ok(common) = crate::user_file::read_text(&folder.join("commondir"), POINTER_BYTES) {
        folders.push(folder.join(common.trim()));
    }
    folders
}

/// The folders outside `workspace` git reads for the workspace's `.git`
/// file that a confined command may read (canonical): a linked worktree's
/// own folder, only when its `gitdir` file names this `.git` back, and the
/// main repository's folder that worktree's `commondir` names. git writes
/// both in the main repository, where the workspace's author cannot.
///
/// Nothing else: whoever wrote the workspace wrote its `.git` file (an
/// unpacked archive may hold any), and a folder it names is not the user's
/// word that a command may read it (`gitdir: ~/.ssh`). A
/// `--separate-git-dir` repository outside the workspace names nothing
/// back, so it stays out of reach: git in a confined command then finds
/// no repository.
pub(crate) fn worktree_dirs(workspace: &Path) -> Vec<PathBuf> {
    let Ok(workspace) = workspace.canonicalize() else {
        return Vec::new();
    };
    let dot_git = workspace.join(".git");
    let Some(own) = pointed_to(&dot_git)
        .into_iter()
        .next()
        .and_then(|own| own.canonicalize().ok())
    else {
        return Vec::new();
    };
    // Inside, it is readable as part of the workspace, and its `gitdir`
    // and `commondir` are the author's to write.
    if own.starts_with(&workspace) {
        return Vec::new();
    }
    let named_back = crate::user_file::read_text(&own.join("gitdir"), POINTER_BYTES)
        .ok()
        .and_then(|back| own.join(back.trim()).canonicalize().ok());
    if named_back.as_deref() != Some(dot_git.as_path()) {
        tracing::debug!(
            "`{}` names `{}`, which does not name it back: not readable to commands",
            dot_git.display(),
            own.display()
        );
        return Vec::new();
    }
    let common = crate::user_file::read_text(&own.join("commondir"), POINTER_BYTES)
        .ok()
        .and_then(|common| own.join(common.trim()).canonicalize().ok());
    std::iter::once(own).chain(common).collect()
}

/// The hooks folders, included files and programs git's configuration
/// names for the repository `workspace` lies in ([`config`]), and the
/// files its hooks run or read there ([`hooks`]), absolute: read from the
/// system's configuration, the user's (in `home`), and the repository's
/// own (its common folder's `config`, a worktree's `config.worktree`),
/// with what each includes. Nothing when `workspace` lies in no
/// repository: git runs hooks only in one. When `workspace` is itself a
/// repository's folder (a bare one), what that repository's configuration
/// names ([`configured_bare`]).
pub(crate) fn configured(workspace: &Path, home: Option<&Path>) -> config::Named {
    if let Some(named) = configured_bare(workspace, home) {
        return named;
    }
    // The working tree git finds from the workspace: the nearest folder,
    // the workspace or one above it, holding a `.git`.
    let Some(worktree) = workspace
        .ancestors()
        .find(|folder| folder.join(".git").symlink_metadata().is_ok())
    else {
        return config::Named::default();
    };
    let dot_git = worktree.join(".git");
    let git_dir = if dot_git.is_dir() {
        dot_git.clone()
    } else {
        match pointed_to(&dot_git).into_iter().next() {
            Some(named) => named,
            None => return config::Named::default(),
        }
    };
    let common = crate::user_file::read_text(&git_dir.join("commondir"), POINTER_BYTES)
        .map(|common| git_dir.join(common.trim()))
        .unwrap_or_else(|_| git_dir.clone());
    let files: Vec<PathBuf> = global_config_files(home)
        .into_iter()
        .chain([common.join("config"), git_dir.join("config.worktree")])
        .collect();
    let mut named = config::named(&files, worktree, home);
    hooks::add_run_by_hooks(&mut named, common.join("hooks"), worktree, home);
    named.files.extend([dot_git, git_dir.join("commondir")]);
    named
}

/// As [`configured`], for the repository whose own folder `folder` is,
/// when it is one and holds no `.git` (a bare one, `fixtures/remote.git/`):
/// git runs its hooks there, on a push to it, and takes a relative
/// `core.hooksPath` (`../../ci/hooks`) and the programs its configuration
/// names from there. `None` for any other folder.
fn configured_bare(folder: &Path, home: Option<&Path>) -> Option<config::Named> {
    let dir = Dir::open_ambient_dir(folder, cap_std::ambient_authority()).ok()?;
    let signs = Signs::of(&dir).ok()?;
    if !signs.repository() || signs.worktree() {
        return None;
    }
    let files: Vec<PathBuf> = global_config_files(home)
        .into_iter()
        .chain([folder.join("config")])
        .collect();
    let mut named = config::named(&files, folder, home);
    hooks::add_run_by_hooks(&mut named, folder.join("hooks"), folder, home);
    // Whether it is still a repository is read again with the rest.
    named
        .files
        .extend([folder.join("HEAD"), folder.join(".git")]);
    Some(named)
}

/// The configuration files git reads for every repository: the system's
/// and the user's (`$XDG_CONFIG_HOME/git/config`, `~/.gitconfig`, from
/// `home`).
fn global_config_files(home: Option<&Path>) -> Vec<PathBuf> {
    let xdg = std::env::var_os("XDG_CONFIG_HOME")
        .filter(|xdg| !xdg.is_empty())
        .map(PathBuf::from)
        .or_else(|| home.map(|home| home.join(".config")));
    [Some(PathBuf::from("/etc/gitconfig"))]
        .into_iter()
        .chain([
            xdg.map(|xdg| xdg.join("git/config")),
            home.map(|home| home.join(".gitconfig")),
        ])
        .flatten()
        .collect()
}

/// What git's configuration names for one repository ([`configured`]),
/// kept between calls: read again only when a file it read or looked for
/// changed since, appeared or went away, or changed too recently for its
/// stamp to tell ([`Stamp::settled`]). A configuration changed while
/// zotbox runs (`npx husky` run by `npm install` sets `core.hooksPath`)
/// counts from the next call.
#[derive(Debug, Default)]
pub(crate) struct Kept {
    /// The files, each with its stamp when read (`None`: it was missing)
    /// and whether that stamp can tell a later change: it had settled.
    stamps: Vec<(PathBuf, Option<Stamp>, bool)>,
    /// What they named; `None` before the first read.
    named: Option<config::Named>,
}

/// The stamp of the file or folder at `path`, followed as git reads it
/// (`None`: there is none).
fn stamp_of(path: &Path) -> Option<Stamp> {
    std::fs::metadata(path).ok().map(|meta| Stamp::of(&meta))
}

impl Kept {
    /// Reads what git's configuration names for `worktree` again if it may
    /// have changed since it was last read (`~/` and the user's own
    /// configuration from `home`); returns whether it did.
    pub(crate) fn refresh(&mut self, worktree: &Path, home: Option<&Path>) -> bool {
        let now = SystemTime::now();
        let unchanged = self
            .stamps
            .iter()
            .all(|(path, stamp, settled)| *settled && stamp_of(path) == *stamp);
        let read = !unchanged || self.named.is_none();
        if read {
            let named = configured(worktree, home);
            // Stamped after reading: a file changed between the two, or
            // just before, has not settled, so it is read again next time.
            self.stamps = named
                .files
                .iter()
                .map(|file| {
                    let stamp = stamp_of(file);
                    (file.clone(), stamp, stamp.is_none_or(|s| s.settled(now)))
                })
                .collect();
            self.named = Some(named);
        }
        read
    }

    /// What git's configuration named when last read (nothing before).
    pub(crate) fn named(&self) -> config::Named {
        self.named.clone().unwrap_or_default()
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn signs(entries: &[(&str, Kind)]) -> Signs {
        let mut signs = Signs::default();
        for (name, kind) in entries {
            signs.note(OsStr::new(name), *kind);
        }
        signs
    }

    #[test]
    fn git_s_own_test_and_a_worktree_s_common_folder_make_a_repository() {
        use Kind::{Folder, Link, Other};
        let bare = [("HEAD", Other), ("objects", Folder), ("refs", Folder)];
        assert!(signs(&bare).repository());
        // Links count wherever they lead, as git's `access` follows them.
        let linked = [("HEAD", Link), ("objects", Link), ("refs", Link)];
        assert!(signs(&linked).repository());
        assert!(signs(&[("head", Other), ("Objects", Folder), ("REFS", Folder)]).repository());
        assert!(signs(&[("HEAD", Other), ("commondir", Other)]).repository());
        // Attack: executable files pass git's `access(X_OK)` as folders do,
        // and `git branch` below such a folder ran its `config`'s pager.
        assert!(signs(&[("HEAD", Other), ("objects", Other), ("refs", Other)]).repository());
        for not in [
            &[("HEAD", Other), ("objects", Folder)][..],
            &[("objects", Folder), ("refs", Folder)],
            &[("HEAD", Folder), ("objects", Folder), ("refs", Folder)],
            &[("HEAD", Other), ("commondir", Folder)],
        ] {
            assert!(!signs(not).repository(), "{not:?}");
        }
    }

    #[test]
    fn a_file_completes_a_repository_only_where_the_rest_is_there() {
        use Kind::{Folder, Other};
        let almost = signs(&[("objects", Folder), ("refs", Folder)]);
        assert!(almost.completed_by(OsStr::new("HEAD")));
        assert!(almost.completed_by(OsStr::new("head")));
        assert!(!almost.completed_by(OsStr::new("config")));
        let worktree = signs(&[("HEAD", Other)]);
        assert!(worktree.completed_by(OsStr::new("commondir")));
        assert!(!worktree.completed_by(OsStr::new("objects")));
        // A file `refs` beside `HEAD` and `objects` (which a command can
        // make executable afterwards) completes one.
        let files = signs(&[("HEAD", Other), ("objects", Other)]);
        assert!(files.completed_by(OsStr::new("refs")));
        // A heading in `docs/` is no repository.
        assert!(!Signs::default().completed_by(OsStr::new("HEAD")));
        // Writing in one that already is one is refused as such, not as this.
        let bare = signs(&[("HEAD", Other), ("objects", Folder), ("refs", Folder)]);
        assert!(!bare.completed_by(OsStr::new("HEAD")));
    }

    #[test]
    fn the_signs_of_an_open_folder_are_looked_up_without_following_links() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        std::fs::create_dir(root.join("objects")).unwrap();
        std::os::unix::fs::symlink("/nowhere", root.join("refs")).unwrap();
        let open = Dir::open_ambient_dir(root, cap_std::ambient_authority()).unwrap();
        let signs = Signs::of(&open).unwrap();
        assert!(!signs.repository());
        assert!(signs.completed_by(OsStr::new("HEAD")));
        std::fs::write(root.join("HEAD"), "ref: refs/heads/main\n").unwrap();
        assert!(Signs::of(&open).unwrap().repository());
    }

    #[test]
    fn a_git_file_and_a_commondir_name_the_folders_git_reads() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        std::fs::create_dir_all(root.join("store/wt")).unwrap();
        std::fs::write(root.join(".git"), "gitdir: store/wt\n").unwrap();
        std::fs::write(root.join("store/wt/commondir"), "..\n").unwrap();
        assert_eq!(
            pointed_to(&root.join(".git")),
            [root.join("store/wt"), root.join("store/wt/..")]
        );
        assert_eq!(
            pointed_to(&root.join("store/wt")),
            [root.join("store/wt/..")]
        );
        assert!(pointed_to(&root.join("store")).is_empty());
        std::fs::write(root.join("notes"), "no pointer\n").unwrap();
        assert!(pointed_to(&root.join("notes")).is_empty());
    }

    #[test]
    fn kept_configuration_is_read_again_when_a_file_it_read_changes() {
        let dir = tempfile::tempdir().unwrap();
        let ws = dir.path().join("ws");
        std::fs::create_dir_all(ws.join(".git")).unwrap();
        std::fs::write(ws.join(".git/config"), "[core]\n\thooksPath = a\n").unwrap();
        let mut kept = Kept::default();
        let hooks = |kept: &mut Kept| {
            kept.refresh(&ws, None);
            kept.named().hooks
        };
        assert_eq!(hooks(&mut kept), [ws.join("a")]);
        // Once the files have settled, their stamps alone tell a change:
        // an edit, and a file that was looked for and appears.
        std::thread::sleep(std::time::Duration::from_millis(3100));
        assert!(kept.refresh(&ws, None), "read again: it had not settled");
        assert!(!kept.refresh(&ws, None), "not read again: nothing changed");
        std::fs::write(
            ws.join(".git/config"),
            "[core]\n\thooksPath = b\n[include]\n\tpath = more\n",
        )
        .unwrap();
        assert_eq!(hooks(&mut kept), [ws.join("b")]);
        std::fs::write(ws.join(".git/more"), "[core]\n\thooksPath = c\n").unwrap();
        assert_eq!(hooks(&mut kept), [ws.join("b"), ws.join("c")]);
    }
}
