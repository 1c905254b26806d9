//! The on-disk cache of compiled wasm, under `$ZOT_HOME/cache/`.
//!
//! # Rules
//!
//! 1. An entry is named by a hash of the wasm bytes *and* the engine's
//!    configuration and version, so a changed guest or an upgraded zotbox
//!    never loads a stale artifact.
//! 2. An entry is wasmtime's own serialised artifact (an ELF file, mapped
//!    from disk as it is by `deserialize_file`), followed by a trailer:
//!    [`MAGIC`] and the CRC-32 of every byte before it. An entry is only
//!    handed to wasmtime after its checksum was recomputed from the very file
//!    (the same open inode) wasmtime then maps; one that was truncated or
//!    altered is discarded and recompiled. wasmtime re-checks its own header
//!    and engine settings after that. The checksum is a damage check, not a
//!    seal (see below): CRC-32 catches every burst of damage up to 32 bits
//!    and any other with odds of 2^-32, several times cheaper than BLAKE3 on
//!    every start (the wasm's own key, rule 1, stays BLAKE3: it must resist a
//!    guest's author forging a collision with another guest).
//! 3. Entries are written whole to a temporary file, synced, and renamed into
//!    place: a reader never sees half an entry, and an entry is never
//!    modified in place (so a mapped entry never changes under wasmtime).
//! 4. The cache holds at most its cap (default [`DEFAULT_CAP`]) in entries.
//!    Loading an entry marks it used (its modification time); writing a new
//!    entry evicts the least recently used others until the total fits. The
//!    entry just written is never evicted, even if it alone exceeds the cap.
//!
//! The cache dir is the user's own (`$ZOT_HOME/cache`), a control path: who
//! can write it can equally edit the user's manifests and policy, so the
//! checksum defends against damage (a full disk, a crash, a flipped bit), not
//! against the user.

use std::fs::File;
use std::hash::{Hash, Hasher};
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::time::SystemTime;

use crate::text::hex;
use wasmtime::Engine;

/// Leads the trailer of every entry: identifies the format.
const MAGIC: &[u8; 8] = b"ZOTBOXC3";
/// The trailer: magic, then the artifact's CRC-32, little-endian.
pub(crate) const TRAILER_LEN: u64 = MAGIC.len() as u64 + 4;
/// The extension of an entry.
pub(super) const ENTRY_EXTENSION: &str = "cwasm";

/// The default cap on the cache's entries together, bytes (512 MiB).
pub const DEFAULT_CAP: u64 = 512 * 1024 * 1024;

/// What kind of wasm an artifact holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum Kind {
    /// A component (`wasm32-wasip2`).
    Component,
    /// A core module (`wasm32-wasip1`).
    Module,
}

/// The cache folder (`None` disables caching) and its cap.
#[derive(Debug, Clone)]
pub(crate) struct ArtifactCache {
    dir: Option<PathBuf>,
    cap: u64,
}

/// An entry whose checksum matched, in a copy that can no longer change.
#[derive(Debug)]
pub(crate) enum Verified {
    /// A sealed memfd (no write, shrink or grow): wasmtime maps it as it
    /// would map the entry, without a copy of its own, and shares it with
    /// every instance's memory image.
    Sealed {
        /// The memfd.
        file: File,
        /// A path that opens it (`/proc/self/fd/N`), for APIs that take one.
        path: PathBuf,
    },
    /// The bytes, where memfds or `/proc` are not to be had.
    Bytes(Vec<u8>),
}

/// Feeds `std::hash::Hash` values into BLAKE3, for a stable key.
struct Feed<'a>(&'a mut blake3::Hasher);

impl Hasher for Feed<'_> {
    fn finish(&self) -> u64 {
        0
    }

    fn write(&mut self, bytes: &[u8]) {
        self.0.update(bytes);
    }
}

impl ArtifactCache {
    pub(crate) fn new(dir: Option<PathBuf>) -> Self {
        Self {
            dir,
            cap: DEFAULT_CAP,
        }
    }

    /// This cache, holding at most `cap` bytes of entries.
    pub(crate) fn with_cap(mut self, cap: u64) -> Self {
        self.cap = cap;
        self
    }

    /// The folder and the cap, when caching is on.
    pub(crate) fn place(&self) -> Option<(&Path, u64)> {
        Some((self.dir.as_deref()?, self.cap))
    }

    /// The entry path for `wasm` compiled by `engine` as `kind`.
    pub(crate) fn entry(&self, engine: &Engine, kind: Kind, wasm: &[u8]) -> Option<PathBuf> {
        let dir = self.dir.as_ref()?;
        let mut hasher = blake3::Hasher::new();
        engine
            .precompile_compatibility_hash()
            .hash(&mut Feed(&mut hasher));
        hasher.update(match kind {
            Kind::Component => b"c",
            Kind::Module => b"m",
        });
        hasher.update(wasm);
        let key = hex(&hasher.finalize().as_bytes()[..20]);
        Some(dir.join(format!("{key}.{ENTRY_EXTENSION}")))
    }

    /// The entry at `path` if it is there and whole, marked as used; `None`
    /// when it is missing or damaged (then it is logged).
    ///
    /// The entry is checked as it is copied: what is handed on is the copy
    /// that was checked, so a file changed in place meanwhile (or later,
    /// while wasmtime runs its code) changes nothing that runs.
    pub(crate) fn open(path: &Path) -> Option<Verified> {
        let mut file = File::open(path).ok()?;
        let verified = match copy_verified(&mut file) {
            Ok(Some(verified)) => verified,
            Ok(None) => {
                tracing::warn!(
                    "cache entry `{}` is damaged or fails its checksum; recompiling",
                    path.display()
                );
                return None;
            }
            Err(err) => {
                tracing::warn!("cannot read cache entry `{}`: {err}", path.display());
                return None;
            }
        };
        // Recency for eviction; a read-only cache just evicts less wisely.
        if let Err(err) = file.set_modified(SystemTime::now()) {
            tracing::debug!("cannot mark cache entry `{}` used: {err}", path.display());
        }
        Some(verified)
    }

    /// Stores an artifact, then evicts the least recently used other
    /// entries beyond the cap. Failure only costs a recompile next time, so
    /// it is logged, not returned.
    pub(crate) fn write(&self, path: &Path, artifact: &[u8]) {
        let attempt = || -> std::io::Result<()> {
            if let Some(dir) = path.parent() {
                std::fs::create_dir_all(dir)?;
            }
            // Unique per writer, so concurrent writers never share a file.
            static WRITERS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
            let writer = WRITERS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            let tmp = path.with_extension(format!("tmp{}-{writer}", std::process::id()));
            let written = (|| {
                let mut file = File::create(&tmp)?;
                file.write_all(artifact)?;
                file.write_all(MAGIC)?;
                file.write_all(&crc32fast::hash(artifact).to_le_bytes())?;
                file.sync_all()?;
                std::fs::rename(&tmp, path)
            })();
            if written.is_err() {
                let _ = std::fs::remove_file(&tmp);
            }
            written
        };
        if let Err(err) = attempt() {
            tracing::warn!("cannot write cache entry `{}`: {err}", path.display());
            return;
        }
        self.evict(path);
    }

    /// Removes the least recently used entries other than `keep` until the
    /// entries together fit the cap.
    fn evict(&self, keep: &Path) {
        let Some(dir) = &self.dir else {
            return;
        };
        let Ok(listing) = std::fs::read_dir(dir) else {
            return;
        };
        let mut entries: Vec<(SystemTime, u64, PathBuf)> = listing
            .filter_map(Result::ok)
            .filter(|e| e.path().extension().is_some_and(|x| x == ENTRY_EXTENSION))
            .filter_map(|e| {
                let meta = e.metadata().ok().filter(std::fs::Metadata::is_file)?;
                Some((meta.modified().ok()?, meta.len(), e.path()))
            })
            .collect();
        let mut total: u64 = entries.iter().map(|(_, len, _)| len).sum();
        if total <= self.cap {
            return;
        }
        entries.sort();
        for (_, len, path) in entries {
            if total <= self.cap {
                break;
            }
            if path == keep {
                continue;
            }
            match std::fs::remove_file(&path) {
                Ok(()) => {
                    tracing::info!("evicted cache entry `{}` ({len} bytes)", path.display());
                    total = total.saturating_sub(len);
                }
                // Another zotbox evicted it first.
                Err(err) if err.kind() == std::io::ErrorKind::NotFound => {
                    total = total.saturating_sub(len);
                }
                Err(err) => {
                    tracing::warn!("cannot evict cache entry `{}`: {err}", path.display());
                }
            }
        }
    }
}

/// Where a verified copy goes: a sealed memfd when the OS has them, else memory.
enum Sink {
    #[cfg(target_os = "linux")]
    Memfd(File),
    Bytes(Vec<u8>),
}

impl Sink {
    fn new(len: u64) -> Self {
        #[cfg(target_os = "linux")]
        {
            use nix::sys::memfd::{MFdFlags, memfd_create};
            match memfd_create(
                "zotbox-artifact",
                MFdFlags::MFD_CLOEXEC | MFdFlags::MFD_ALLOW_SEALING,
            ) {
                Ok(fd) => return Self::Memfd(File::from(fd)),
                Err(err) => tracing::debug!("no memfd for a cached artifact ({err}); copying"),
            }
        }
        Self::Bytes(Vec::with_capacity(usize::try_from(len).unwrap_or(0)))
    }

    fn write(&mut self, bytes: &[u8]) -> std::io::Result<()> {
        match self {
            #[cfg(target_os = "linux")]
            Self::Memfd(file) => file.write_all(bytes),
            Self::Bytes(all) => {
                all.extend_from_slice(bytes);
                Ok(())
            }
        }
    }

    /// The copy, made immutable.
    fn finish(self) -> std::io::Result<Verified> {
        match self {
            #[cfg(target_os = "linux")]
            Self::Memfd(file) => {
                use nix::fcntl::{FcntlArg, SealFlag, fcntl};
                fcntl(
                    &file,
                    FcntlArg::F_ADD_SEALS(
                        SealFlag::F_SEAL_SEAL
                            | SealFlag::F_SEAL_SHRINK
                            | SealFlag::F_SEAL_GROW
                            | SealFlag::F_SEAL_WRITE,
                    ),
                )?;
                use std::os::fd::AsRawFd;
                let path = PathBuf::from(format!("/proc/self/fd/{}", file.as_raw_fd()));
                if path.exists() {
                    return Ok(Verified::Sealed { file, path });
                }
                // No `/proc`: hand over the bytes instead.
                let mut bytes = Vec::new();
                std::io::Seek::rewind(&mut &file)?;
                (&file).read_to_end(&mut bytes)?;
                Ok(Verified::Bytes(bytes))
            }
            Self::Bytes(bytes) => Ok(Verified::Bytes(bytes)),
        }
    }
}

/// Copies the artifact of the entry `file` while checking it; the copy when
/// the entry ends in a trailer whose checksum matches the bytes before it,
/// `None` when it does not.
fn copy_verified(file: &mut File) -> std::io::Result<Option<Verified>> {
    let len = file.metadata()?.len();
    let Some(body) = len.checked_sub(TRAILER_LEN).filter(|body| *body > 0) else {
        return Ok(None);
    };
    let mut checksum = crc32fast::Hasher::new();
    let mut sink = Sink::new(body);
    let mut chunk = vec![0u8; 128 * 1024];
    let mut left = body;
    while left > 0 {
        let want = usize::try_from(left.min(chunk.len() as u64)).unwrap_or(chunk.len());
        let got = file.read(&mut chunk[..want])?;
        if got == 0 {
            return Ok(None);
        }
        checksum.update(&chunk[..got]);
        sink.write(&chunk[..got])?;
        left -= got as u64;
    }
    let mut trailer = [0u8; TRAILER_LEN as usize];
    file.read_exact(&mut trailer)?;
    if &trailer[..MAGIC.len()] != MAGIC
        || trailer[MAGIC.len()..] != checksum.finalize().to_le_bytes()
    {
        return Ok(None);
    }
    sink.finish().map(Some)
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    fn cache_in(dir: &Path, cap: u64) -> ArtifactCache {
        ArtifactCache::new(Some(dir.to_owned())).with_cap(cap)
    }

    /// The bytes before the trailer of the entry at `path`, if it verifies.
    fn artifact(path: &Path) -> Option<Vec<u8>> {
        match ArtifactCache::open(path)? {
            Verified::Sealed { file, path } => {
                // The copy is sealed: it can be read, never changed.
                assert!((&file).write_all(b"x").is_err());
                std::fs::read(path).ok()
            }
            Verified::Bytes(bytes) => Some(bytes),
        }
    }

    #[test]
    fn entries_round_trip_and_damage_is_detected() {
        let tmp = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let path = tmp.path().join("x.cwasm");
        cache_in(tmp.path(), DEFAULT_CAP).write(&path, b"compiled bytes");
        assert_eq!(artifact(&path).as_deref(), Some(&b"compiled bytes"[..]));
        let whole = std::fs::read(&path).unwrap_or_default();
        let damaged: [(&str, Vec<u8>); 6] = [
            ("a flipped artifact byte", {
                let mut bytes = whole.clone();
                bytes[3] ^= 1;
                bytes
            }),
            ("a flipped checksum byte", {
                let mut bytes = whole.clone();
                let last = bytes.len() - 1;
                bytes[last] ^= 1;
                bytes
            }),
            ("truncated by one byte", whole[..whole.len() - 1].to_vec()),
            (
                "truncated to the trailer",
                whole[whole.len() - TRAILER_LEN as usize..].to_vec(),
            ),
            ("the first format", {
                let mut bytes = b"ZOTBOXC1".to_vec();
                bytes.extend_from_slice(&whole);
                bytes
            }),
            ("the BLAKE3 trailer of the second format", {
                let artifact = &whole[..whole.len() - TRAILER_LEN as usize];
                let mut bytes = artifact.to_vec();
                bytes.extend_from_slice(b"ZOTBOXC2");
                bytes.extend_from_slice(blake3::hash(artifact).as_bytes());
                bytes
            }),
        ];
        for (damage, bytes) in damaged {
            std::fs::write(&path, &bytes).unwrap_or_else(|e| panic!("{e}"));
            assert_eq!(artifact(&path), None, "{damage}");
        }
        assert!(ArtifactCache::open(&tmp.path().join("missing.cwasm")).is_none());
    }

    #[test]
    fn the_key_depends_on_bytes_and_kind() {
        let engine = Engine::default();
        let cache = ArtifactCache::new(Some(PathBuf::from("/c")));
        let a = cache.entry(&engine, Kind::Component, b"a");
        assert_ne!(a, cache.entry(&engine, Kind::Component, b"b"));
        assert_ne!(a, cache.entry(&engine, Kind::Module, b"a"));
        assert_eq!(a, cache.entry(&engine, Kind::Component, b"a"));
    }

    /// Sets an entry's last use to `secs` after the epoch.
    fn used_at(path: &Path, secs: u64) {
        File::options()
            .write(true)
            .open(path)
            .and_then(|f| f.set_modified(SystemTime::UNIX_EPOCH + Duration::from_secs(secs)))
            .unwrap_or_else(|e| panic!("{e}"));
    }

    fn names(dir: &Path) -> Vec<String> {
        let mut names: Vec<String> = std::fs::read_dir(dir)
            .into_iter()
            .flatten()
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        names
    }

    #[test]
    fn a_new_entry_evicts_the_least_recently_used_beyond_the_cap() {
        let tmp = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let dir = tmp.path();
        // Each entry is 100 bytes + a 12-byte trailer: three fit in 350.
        let cache = cache_in(dir, 350);
        let artifact = [7u8; 100];
        for (name, used) in [("a", 1_000), ("b", 2_000), ("c", 3_000)] {
            let path = dir.join(format!("{name}.cwasm"));
            cache.write(&path, &artifact);
            used_at(&path, used);
        }
        // Not an entry: never counted, never removed.
        std::fs::write(dir.join("notes.txt"), [0u8; 1000]).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(names(dir), ["a.cwasm", "b.cwasm", "c.cwasm", "notes.txt"]);
        // Loading `a` makes `b` the least recently used.
        assert!(ArtifactCache::open(&dir.join("a.cwasm")).is_some());
        cache.write(&dir.join("d.cwasm"), &artifact);
        assert_eq!(names(dir), ["a.cwasm", "c.cwasm", "d.cwasm", "notes.txt"]);
        // An entry over the cap on its own is kept; every other one goes.
        cache.write(&dir.join("e.cwasm"), &[1u8; 1000]);
        assert_eq!(names(dir), ["e.cwasm", "notes.txt"]);
        assert!(ArtifactCache::open(&dir.join("e.cwasm")).is_some());
    }

    #[test]
    fn a_cache_within_its_cap_keeps_every_entry() {
        let tmp = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let cache = cache_in(tmp.path(), DEFAULT_CAP);
        for name in ["a", "b", "c"] {
            cache.write(&tmp.path().join(format!("{name}.cwasm")), b"x");
        }
        assert_eq!(names(tmp.path()), ["a.cwasm", "b.cwasm", "c.cwasm"]);
    }
}
