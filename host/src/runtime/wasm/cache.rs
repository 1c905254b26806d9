//! The on-disk cache of compiled wasm, under `$ZOT_HOME/cache/`.
//!
//! An entry is named by a hash of the wasm bytes *and* the engine's
//! configuration and version, so a changed guest or an upgraded zotbox never
//! loads a stale artifact. Each entry carries a checksum of its payload: an
//! entry that was truncated or tampered with is detected, discarded and
//! recompiled. Writes go to a temporary file renamed into place, so readers
//! never see half an entry.

use std::hash::{Hash, Hasher};
use std::io::Write;
use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};
use wasmtime::Engine;

/// Leads every entry: identifies the format.
const MAGIC: &[u8; 8] = b"ZOTBOXC1";
const HEADER_LEN: usize = MAGIC.len() + 32;

/// What kind of wasm an artifact holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum Kind {
    /// A component (`wasm32-wasip2`).
    Component,
    /// A core module (`wasm32-wasip1`).
    Module,
}

/// The cache folder; `None` disables caching.
#[derive(Debug, Clone)]
pub(crate) struct ArtifactCache {
    dir: Option<PathBuf>,
}

/// Feeds `std::hash::Hash` values into SHA-256, for a stable key.
struct ShaHasher(Sha256);

impl Hasher for ShaHasher {
    fn finish(&self) -> u64 {
        0
    }

    fn write(&mut self, bytes: &[u8]) {
        self.0.update(bytes);
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

impl ArtifactCache {
    pub(crate) fn new(dir: Option<PathBuf>) -> Self {
        Self { dir }
    }

    /// The entry path for `wasm` compiled by `engine` as `kind`.
    pub(crate) fn entry(&self, engine: &Engine, kind: Kind, wasm: &[u8]) -> Option<PathBuf> {
        let dir = self.dir.as_ref()?;
        let mut hasher = ShaHasher(Sha256::new());
        engine.precompile_compatibility_hash().hash(&mut hasher);
        kind.hash(&mut hasher);
        hasher.write(&Sha256::digest(wasm));
        let key = hex(&hasher.0.finalize()[..20]);
        Some(dir.join(format!("{key}.cwasm")))
    }

    /// The verified payload of an entry, or `None` when it is missing or damaged.
    pub(crate) fn read(path: &Path) -> Option<Vec<u8>> {
        let bytes = std::fs::read(path).ok()?;
        if bytes.len() < HEADER_LEN || &bytes[..MAGIC.len()] != MAGIC {
            tracing::warn!("cache entry `{}` is damaged; recompiling", path.display());
            return None;
        }
        let (header, payload) = bytes.split_at(HEADER_LEN);
        if Sha256::digest(payload).as_slice() != &header[MAGIC.len()..] {
            tracing::warn!(
                "cache entry `{}` fails its checksum; recompiling",
                path.display()
            );
            return None;
        }
        Some(payload.to_vec())
    }

    /// Stores an artifact. Failure only costs a recompile next time, so it is logged, not returned.
    pub(crate) fn write(path: &Path, payload: &[u8]) {
        let attempt = || -> std::io::Result<()> {
            if let Some(dir) = path.parent() {
                std::fs::create_dir_all(dir)?;
            }
            // Unique per writer, so concurrent writers never share a file.
            static WRITERS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
            let writer = WRITERS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            let tmp = path.with_extension(format!("tmp{}-{writer}", std::process::id()));
            let mut file = std::fs::File::create(&tmp)?;
            file.write_all(MAGIC)?;
            file.write_all(&Sha256::digest(payload))?;
            file.write_all(payload)?;
            file.sync_all()?;
            std::fs::rename(&tmp, path)
        };
        if let Err(err) = attempt() {
            tracing::warn!("cannot write cache entry `{}`: {err}", path.display());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entries_round_trip_and_damage_is_detected() {
        let tmp = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let path = tmp.path().join("x.cwasm");
        ArtifactCache::write(&path, b"compiled bytes");
        assert_eq!(
            ArtifactCache::read(&path).as_deref(),
            Some(&b"compiled bytes"[..])
        );
        // Flip one payload byte.
        let mut bytes = std::fs::read(&path).unwrap_or_default();
        let last = bytes.len() - 1;
        bytes[last] ^= 1;
        std::fs::write(&path, &bytes).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(ArtifactCache::read(&path), None);
        // Truncated below the header.
        std::fs::write(&path, b"ZOTBOX").unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(ArtifactCache::read(&path), None);
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
}
