//! Files people write (manifests, policies, data files): one reader, one
//! parser and one error for all of them.
//!
//! The reader ([`read_text`], [`read_regular`], [`read_at_most`]) takes at
//! most a cap per kind of file and only a regular file, opened without
//! waiting: a file linked to something endless or a FIFO, from a cloned
//! repository, is refused by name rather than read without end.
//!
//! A wrong type names the field it is in (`field `limits.memory_mb`:
//! invalid type …`), anything after the JSON value is refused, and unknown
//! keys are collected for warnings rather than refused (unless the type
//! denies them, as policies do), so a manifest written for a newer version
//! still loads. Every failure is a [`FileError`] naming the file.

use std::io::{self, Read};
use std::path::{Path, PathBuf};

use serde::de::DeserializeOwned;

/// A file someone wrote could not be used: the one error of manifests,
/// policies and data files.
#[derive(Debug, thiserror::Error)]
pub enum FileError {
    /// The file could not be read.
    #[error("cannot read `{}`: {error}", path.display())]
    Read {
        /// The file.
        path: PathBuf,
        /// The I/O error (in the message, not a `source`: the chain would
        /// print it twice).
        error: std::io::Error,
    },
    /// The file is larger than its kind allows.
    #[error("`{}`: file is larger than {limit} bytes", path.display())]
    TooLarge {
        /// The file.
        path: PathBuf,
        /// The limit, in bytes.
        limit: u64,
    },
    /// The file is not valid JSON (or frontmatter), or a field has the wrong
    /// type or an unknown name where unknown names are refused.
    #[error("`{}`: {detail}", path.display())]
    Parse {
        /// The file.
        path: PathBuf,
        /// What was wrong, with the field path or line.
        detail: String,
    },
    /// A field has a value the host refuses.
    #[error("`{}`: field `{field}` {problem}", path.display())]
    Invalid {
        /// The file.
        path: PathBuf,
        /// The field, as a path into the document (`deny[1].pathPattern`).
        field: String,
        /// What is wrong with it.
        problem: String,
    },
}

impl FileError {
    /// A [`FileError::Invalid`] from its parts.
    pub(crate) fn invalid(
        path: &Path,
        field: impl Into<String>,
        problem: impl Into<String>,
    ) -> Self {
        Self::Invalid {
            path: path.to_owned(),
            field: field.into(),
            problem: problem.into(),
        }
    }

    /// A [`FileError::Read`] of `path`.
    pub(crate) fn read(path: &Path, error: std::io::Error) -> Self {
        Self::Read {
            path: path.to_owned(),
            error,
        }
    }
}

/// The largest manifest read: far beyond any real one (a few KiB), small
/// enough that a workspace's cannot exhaust memory.
pub(crate) const MAX_MANIFEST_BYTES: u64 = 1024 * 1024;

/// Reads at most `limit` bytes of `source`: its bytes, or `None` when it
/// holds more. A file anyone else wrote is read through this (or
/// [`read_text`]): one linked to something endless, like
/// `/proc/self/pagemap`, stops at the limit instead of filling memory.
pub(crate) fn read_at_most(source: impl Read, limit: u64) -> io::Result<Option<Vec<u8>>> {
    read_into(source, limit, Vec::new())
}

/// [`read_at_most`] of an open file, into a buffer sized from its length
/// as it stands. Through the cap's `take` a reader no longer knows that
/// length, and a buffer grown from nothing is read into in 32-byte, then
/// doubling steps and moved on each growth: sixteen reads and a dozen
/// copies for a 378 KB guest on every start (its cache key needs its
/// bytes). The cap still bounds the read: a file that grows meanwhile, or
/// one like `/proc/self/pagemap` that says it holds nothing, is read as
/// any other source is.
pub(crate) fn read_file_at_most(file: std::fs::File, limit: u64) -> io::Result<Option<Vec<u8>>> {
    // One byte past it: the read that finds the end needs no growth.
    let expected = file
        .metadata()
        .map_or(0, |meta| meta.len())
        .min(limit)
        .saturating_add(1);
    let buffer = Vec::with_capacity(usize::try_from(expected).unwrap_or(0));
    read_into(file, limit, buffer)
}

fn read_into(source: impl Read, limit: u64, mut bytes: Vec<u8>) -> io::Result<Option<Vec<u8>>> {
    source
        .take(limit.saturating_add(1))
        .read_to_end(&mut bytes)?;
    Ok((bytes.len() as u64 <= limit).then_some(bytes))
}

/// What identifies one version of a file's content without reading it:
/// the kernel sets `ctime` on every write (and on every change of `mtime`),
/// so a file with the same device, inode, size, `mtime` and `ctime` as when
/// it was read still has that content, once its stamp has settled
/// ([`Stamp::settled`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) struct Stamp {
    pub(crate) dev: u64,
    pub(crate) ino: u64,
    pub(crate) size: u64,
    pub(crate) mtime: (i64, i64),
    pub(crate) ctime: (i64, i64),
}

/// How long ago a file must have changed for its stamp to show the next
/// change. File times come from the kernel's coarse clock: a write in the
/// same tick as the one read would leave every field of the [`Stamp`] as
/// it was (git's "racily clean" entries). A file changed since the tick
/// before the read cannot keep its stamp.
const SETTLED: std::time::Duration = std::time::Duration::from_secs(2);

impl Stamp {
    /// The stamp of the file `meta` describes.
    pub(crate) fn of(meta: &std::fs::Metadata) -> Self {
        use std::os::unix::fs::MetadataExt as _;
        Self {
            dev: meta.dev(),
            ino: meta.ino(),
            size: meta.size(),
            mtime: (meta.mtime(), meta.mtime_nsec()),
            ctime: (meta.ctime(), meta.ctime_nsec()),
        }
    }

    /// The stamp of the entry cap-std's `meta` describes (one found by a
    /// walk through opened folders).
    pub(crate) fn of_entry(meta: &cap_std::fs::Metadata) -> Self {
        use cap_std::fs::MetadataExt as _;
        Self {
            dev: meta.dev(),
            ino: meta.ino(),
            size: meta.len(),
            mtime: (meta.mtime(), meta.mtime_nsec()),
            ctime: (meta.ctime(), meta.ctime_nsec()),
        }
    }

    /// Whether its last change is at least [`SETTLED`] before `now` (a
    /// change dated after `now`, by a clock set back, never is).
    pub(crate) fn settled(&self, now: std::time::SystemTime) -> bool {
        let Ok(now) = now.duration_since(std::time::UNIX_EPOCH) else {
            return false;
        };
        let (seconds, nanos) = self.ctime;
        let (Ok(seconds), Ok(nanos)) = (u64::try_from(seconds), u32::try_from(nanos)) else {
            return false;
        };
        let changed = std::time::Duration::new(seconds, nanos.min(999_999_999));
        now.checked_sub(changed).is_some_and(|ago| ago >= SETTLED)
    }
}

/// Whether opening a file follows a symbolic link to it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Links {
    /// A link to a regular file opens that file.
    Follow,
    /// A link is refused as not a regular file (for files zotbox writes
    /// itself, which are never links).
    Refuse,
}

/// Opens `path` for reading when it is a regular file. Anything else (a
/// FIFO, which would block the reader for good, a device, a folder; a link
/// too with [`Links::Refuse`]) fails with [`io::ErrorKind::InvalidInput`],
/// without being opened when it is one already as it is looked at: opening
/// a device does things (a tape rewinds when closed, a watchdog starts, a
/// terminal can become the process's), and the workspace's author may name
/// any (`include.path = /dev/...` in a repository's configuration). What
/// is swapped in between the look and the open is opened without waiting,
/// never as a controlling terminal, and refused.
pub(crate) fn open_regular(path: &Path, links: Links) -> io::Result<std::fs::File> {
    use std::os::unix::fs::OpenOptionsExt as _;
    let not_regular = || io::Error::new(io::ErrorKind::InvalidInput, "not a regular file");
    let looked = match links {
        Links::Follow => std::fs::metadata(path),
        Links::Refuse => std::fs::symlink_metadata(path),
    };
    if !looked?.is_file() {
        return Err(not_regular());
    }
    let flags = nix::libc::O_NONBLOCK
        | nix::libc::O_NOCTTY
        | match links {
            Links::Follow => 0,
            Links::Refuse => nix::libc::O_NOFOLLOW,
        };
    let file = match std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(flags)
        .open(path)
    {
        Ok(file) => file,
        Err(err) if links == Links::Refuse && err.raw_os_error() == Some(nix::libc::ELOOP) => {
            return Err(not_regular());
        }
        Err(err) => return Err(err),
    };
    if !file.metadata()?.is_file() {
        return Err(not_regular());
    }
    Ok(file)
}

/// Reads at most `limit` bytes of the regular file `path`
/// ([`open_regular`], following links): its bytes, or `None` when it holds
/// more.
pub(crate) fn read_regular(path: &Path, limit: u64) -> io::Result<Option<Vec<u8>>> {
    read_file_at_most(open_regular(path, Links::Follow)?, limit)
}

/// Reads the text file `path` ([`read_regular`]), refusing one over
/// `limit` bytes ([`FileError::TooLarge`]) or not UTF-8
/// ([`FileError::Parse`]).
pub(crate) fn read_text(path: &Path, limit: u64) -> Result<String, FileError> {
    let read_err = |error| FileError::read(path, error);
    let Some(bytes) = read_regular(path, limit).map_err(read_err)? else {
        return Err(FileError::TooLarge {
            path: path.to_owned(),
            limit,
        });
    };
    String::from_utf8(bytes).map_err(|_| FileError::Parse {
        path: path.to_owned(),
        detail: "is not valid UTF-8".to_owned(),
    })
}

/// Runs `read` (of a FIFO, in a test) on a thread and returns what it
/// returned; panics after 10 s rather than let a read that waits for the
/// FIFO's writer hang the test run.
#[cfg(test)]
pub(crate) fn without_waiting<T: Send + 'static>(read: impl FnOnce() -> T + Send + 'static) -> T {
    let (sent, got) = std::sync::mpsc::channel();
    std::thread::spawn(move || sent.send(read()));
    got.recv_timeout(std::time::Duration::from_secs(10))
        .unwrap_or_else(|_| panic!("reading a FIFO waited for a writer"))
}

/// A value with the unknown keys found beside it (as `a.b` paths).
pub(crate) struct WithUnknown<T> {
    pub(crate) value: T,
    pub(crate) unknown_keys: Vec<String>,
}

/// Parses `text`; on failure, a phrase naming the field at fault.
///
/// Every file people write is one JSON object: serde would also take an
/// array and read its items by position (`[true]` as a policy whose first
/// field is `true`), which no one means.
pub(crate) fn parse<T: DeserializeOwned>(text: &str) -> Result<WithUnknown<T>, String> {
    not_an_object(text)?;
    let mut unknown_keys = Vec::new();
    let mut deserializer = serde_json::Deserializer::from_str(text);
    // serde_ignored marks an `Option` layer as `?`; people think `inner.x`.
    let mut record = |key: serde_ignored::Path<'_>| {
        let key = key.to_string();
        let key = key
            .split('.')
            .filter(|part| *part != "?")
            .collect::<Vec<_>>()
            .join(".");
        unknown_keys.push(key);
    };
    let tracked = serde_ignored::Deserializer::new(&mut deserializer, &mut record);
    let value = serde_path_to_error::deserialize(tracked).map_err(|err| {
        let field = err.path().to_string();
        // serde_path_to_error says `.` or `?` when the fault is in no field.
        if matches!(field.as_str(), "." | "?" | "") {
            err.inner().to_string()
        } else {
            format!("field `{field}`: {}", err.inner())
        }
    })?;
    // A second object after the first is not "ignored": it is a file that
    // does not say what its author may think it says.
    deserializer.end().map_err(|err| err.to_string())?;
    Ok(WithUnknown {
        value,
        unknown_keys,
    })
}

/// `Err` with a phrase when `text` holds a JSON value that is not an
/// object (an empty text is left to the parser, which says it ended).
pub(crate) fn not_an_object(text: &str) -> Result<(), String> {
    let first = text
        .trim_start_matches([' ', '\t', '\n', '\r'])
        .chars()
        .next();
    match first {
        None | Some('{') => Ok(()),
        Some('[') => Err("is a JSON array; the file is one object (`{ … }`)".to_owned()),
        Some(_) => Err("is not a JSON object; the file is one object (`{ … }`)".to_owned()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, serde::Deserialize)]
    struct Sample {
        #[allow(dead_code)]
        name: String,
        #[serde(default)]
        #[allow(dead_code)]
        inner: Option<Inner>,
    }

    #[derive(Debug, serde::Deserialize)]
    struct Inner {
        #[allow(dead_code)]
        size: u32,
    }

    #[test]
    fn a_text_file_is_read_up_to_its_limit_and_refused_past_it() {
        let tmp = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let path = tmp.path().join("f.json");
        std::fs::write(&path, "0123456789").unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(read_text(&path, 10).ok().as_deref(), Some("0123456789"));
        let err = read_text(&path, 9).err().map(|e| e.to_string());
        assert_eq!(
            err,
            Some(format!("`{}`: file is larger than 9 bytes", path.display()))
        );
        std::fs::write(&path, b"\xff").unwrap_or_else(|e| panic!("{e}"));
        let err = read_text(&path, 10).err().map(|e| e.to_string());
        assert_eq!(
            err,
            Some(format!("`{}`: is not valid UTF-8", path.display()))
        );
        // Endless: only the limit (and one byte past it) is read.
        let endless = std::io::repeat(b'x');
        assert!(matches!(read_at_most(endless, 1000), Ok(None)));
    }

    #[test]
    fn a_file_is_read_whole_up_to_its_cap_whatever_its_length_says() {
        let tmp = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let path = tmp.path().join("guest.wasm");
        let contents: Vec<u8> = (0..100_000u32).map(|i| (i % 251) as u8).collect();
        std::fs::write(&path, &contents).unwrap_or_else(|e| panic!("{e}"));
        let open = || std::fs::File::open(&path).unwrap_or_else(|e| panic!("{e}"));
        let read = read_file_at_most(open(), 100_000).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(read.as_deref(), Some(contents.as_slice()));
        assert!(matches!(read_file_at_most(open(), 99_999), Ok(None)));
        // A file whose length says nothing and that reads without end
        // (as some of `/proc` do): the cap holds.
        let zero = std::fs::File::open("/dev/zero").unwrap_or_else(|e| panic!("{e}"));
        assert!(matches!(read_file_at_most(zero, 1000), Ok(None)));
    }

    #[test]
    fn a_fifo_is_refused_without_waiting_for_a_writer() {
        let tmp = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let fifo = tmp.path().join("extension.json");
        nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::S_IRWXU).unwrap_or_else(|e| panic!("{e}"));
        let path = fifo.clone();
        let err = without_waiting(move || read_text(&path, 10).err().map(|e| e.to_string()));
        assert_eq!(
            err,
            Some(format!(
                "cannot read `{}`: not a regular file",
                fifo.display()
            ))
        );
    }

    #[test]
    fn a_fifo_or_a_device_is_refused_without_being_opened() {
        use std::os::unix::fs::OpenOptionsExt as _;
        let tmp = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let fifo = tmp.path().join("config");
        nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::S_IRWXU).unwrap_or_else(|e| panic!("{e}"));
        // A writer waits in `open` until some reader opens the FIFO.
        let writer = {
            let fifo = fifo.clone();
            std::thread::spawn(move || std::fs::OpenOptions::new().write(true).open(fifo))
        };
        // Give it the time to wait there (a reader's open before it would
        // go unseen, and the test would pass for nothing).
        std::thread::sleep(std::time::Duration::from_millis(200));
        for links in [Links::Follow, Links::Refuse] {
            let err = open_regular(&fifo, links).err().map(|e| e.to_string());
            assert_eq!(err.as_deref(), Some("not a regular file"));
        }
        let link = tmp.path().join("link");
        std::os::unix::fs::symlink(&fifo, &link).unwrap_or_else(|e| panic!("{e}"));
        assert!(open_regular(&link, Links::Follow).is_err());
        std::thread::sleep(std::time::Duration::from_millis(200));
        assert!(!writer.is_finished(), "the FIFO was opened");
        // Release the writer.
        let reader = std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(nix::libc::O_NONBLOCK)
            .open(&fifo);
        assert!(reader.is_ok());
        assert!(writer.join().is_ok_and(|opened| opened.is_ok()));
        assert_eq!(
            open_regular(Path::new("/dev/null"), Links::Follow)
                .err()
                .map(|e| e.to_string())
                .as_deref(),
            Some("not a regular file")
        );
    }

    #[test]
    fn errors_name_the_field_and_unknown_keys_are_collected() {
        let cases = [
            (r#"{"name":3}"#, "field `name`: invalid type: integer `3`"),
            (r#"{"name":"a","inner":{"size":-1}}"#, "field `inner.size`"),
            // Cut short at the top level: no made-up field.
            (r#"{"name":"a""#, "EOF while parsing an object"),
            ("", "EOF while parsing a value"),
            // An array is not read by position as the fields in order.
            ("[", "is a JSON array; the file is one object (`{ … }`)"),
            (r#" ["a", null]"#, "is a JSON array"),
            ("\n\"a\"", "is not a JSON object; the file is one object"),
            ("3", "is not a JSON object"),
            ("null", "is not a JSON object"),
            // Trailing content is an error, whatever it is.
            (r#"{"name":"a"} {"name":"b"}"#, "trailing characters"),
            (r#"{"name":"a"}]"#, "trailing characters"),
        ];
        for (text, expected) in cases {
            let err = parse::<Sample>(text).err().unwrap_or_default();
            assert!(err.starts_with(expected), "{text}: {err}");
        }
        let parsed = parse::<Sample>(r#"{"name":"a","colour":1,"inner":{"size":1,"x":2}}"#)
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(parsed.unknown_keys, vec!["colour", "inner.x"]);
    }
}
