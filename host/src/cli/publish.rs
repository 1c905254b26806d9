//! Authoring for a registry: `zotbox keygen`, `zotbox ext pack`, `zotbox
//! ext sign` and `zotbox registry index`.

use std::path::PathBuf;

use anyhow::{Context as _, Result, bail};

use super::output::json_line;
use super::{Context, EXIT_OK};
use zotbox::store::pack;
use zotbox::store::registry::{self, UtcTime};
use zotbox::store::signature::{self, SecretKey};

/// Make a signing key pair (minisign format) for archives or a registry index.
///
/// Writes the secret key to PATH (default $ZOT_HOME/keys/zotbox.key; a
/// folder, or a PATH ending in `/`, gets `zotbox.key` inside it), mode
/// 0600, and the public key
/// beside it (`NAME.pub` for `NAME.key`, else `PATH.pub`; a PATH ending in
/// `.pub` is refused). Prints the public key line to list in a policy's
/// `publishers` or `registries[].keys`, and its key id.
///
/// The secret key file is NOT encrypted: whoever can read it can sign as
/// you. Keep it out of repositories; in CI, hand it in as a secret file.
/// The key files are minisign's own format, so `minisign -S -s KEY` and
/// `minisign -V -p KEY.pub` work with them. An existing key is never
/// overwritten.
#[derive(Debug, clap::Args)]
pub(crate) struct KeygenArgs {
    /// Where to write the secret key (the public key goes beside it);
    /// missing folders are made.
    #[arg(long, value_name = "PATH")]
    out: Option<PathBuf>,
}

impl KeygenArgs {
    pub(crate) async fn run(self, context: &Context) -> Result<u8> {
        let path = match self.out {
            Some(path) => path,
            None => {
                let keys = context.home()?.keys_dir();
                // The default folder holds secrets: only the user lists it.
                if !keys.exists() {
                    use std::os::unix::fs::DirBuilderExt as _;
                    std::fs::DirBuilder::new()
                        .recursive(true)
                        .mode(0o700)
                        .create(&keys)
                        .with_context(|| format!("cannot create `{}`", keys.display()))?;
                }
                keys.join(signature::DEFAULT_KEY_FILE)
            }
        };
        let (public, secret) = signature::keygen(&path)?;
        let public_file = signature::public_path_for(&secret);
        if context.json {
            json_line(&serde_json::json!({
                "public_key": public.to_base64(),
                "key_id": public.id().to_string(),
                "secret_key": secret,
                "public_key_file": public_file,
            }))?;
        } else {
            println!("public key: {}", public.to_base64());
            println!("key id:     {}", public.id());
            println!(
                "secret key: {} (unencrypted, mode 0600: keep it secret)",
                secret.display()
            );
            println!("public key file: {}", public_file.display());
        }
        Ok(EXIT_OK)
    }
}

/// Pack the extension in DIR as a reproducible .tar.gz, for a registry.
///
/// The archive holds exactly what `zotbox ext install DIR` would copy (the
/// manifest, the program, the files the manifest's `files` selects), under
/// one top folder `<name>/`, with fixed times, owners and modes: packing the
/// same content again gives the same bytes and the same sha256. What an
/// install refuses (a symlink leaving the folder, a FIFO, a missing wasm
/// file) is refused here. The manifest must have a `version`.
///
/// Writes `<name>-<version>.tar.gz` in the current folder (or FILE) and
/// prints its path, size and sha256.
#[derive(Debug, clap::Args)]
pub(crate) struct PackArgs {
    /// The extension folder (holding extension.json).
    dir: PathBuf,
    /// Where to write the archive: a file, or a folder to write
    /// `<name>-<version>.tar.gz` in (an existing one, or a PATH ending in
    /// `/`, made if missing; default: the current folder).
    #[arg(long, value_name = "PATH")]
    out: Option<PathBuf>,
}

impl PackArgs {
    pub(crate) async fn run(self, context: &Context) -> Result<u8> {
        let packed = pack::pack(&self.dir)?;
        // A folder gets the conventional name inside it.
        let out = match self.out {
            Some(folder) if zotbox::store::names_a_folder(&folder) => {
                std::fs::create_dir_all(&folder)
                    .with_context(|| format!("cannot create `{}`", folder.display()))?;
                folder.join(packed.file_name())
            }
            Some(file) => file,
            None => PathBuf::from(packed.file_name()),
        };
        zotbox::home::write_atomic(&out, &packed.bytes)
            .with_context(|| format!("cannot write `{}`", out.display()))?;
        if context.json {
            json_line(&serde_json::json!({
                "name": packed.name,
                "version": packed.version,
                "path": out,
                "size": packed.bytes.len(),
                "sha256": packed.sha256_hex,
            }))?;
        } else {
            println!(
                "packed `{}` {}: {} ({} bytes)",
                zotbox::text::Shown(&packed.name),
                zotbox::text::Shown(&packed.version),
                out.display(),
                packed.bytes.len()
            );
            println!("sha256 {}", packed.sha256_hex);
        }
        Ok(EXIT_OK)
    }
}

/// Sign ARCHIVE with a secret key: writes ARCHIVE.minisig.
///
/// The signature is minisign's format (check it with `minisign -V -p
/// KEY.pub -m ARCHIVE`); its trusted comment names the file and its
/// sha256. `zotbox registry index` puts it into the archive's entry, so
/// installers check the archive was made by the key's owner, whoever
/// hosts it. KEY is an unencrypted secret key file (`zotbox keygen`).
#[derive(Debug, clap::Args)]
pub(crate) struct SignArgs {
    /// The archive (from `zotbox ext pack`).
    archive: PathBuf,
    /// The secret key file.
    #[arg(long, value_name = "KEY")]
    key: PathBuf,
}

impl SignArgs {
    pub(crate) async fn run(self, context: &Context) -> Result<u8> {
        let key = SecretKey::load(&self.key)?;
        let bytes = registry::build::read_archive(&self.archive)?;
        let name = self
            .archive
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        let digest = pack::sha256_hex(&bytes);
        let text = signature::sign(&bytes, &key, &format!("file:{name} sha256:{digest}"))?;
        let mut out = self.archive.clone().into_os_string();
        out.push(".minisig");
        let out = PathBuf::from(out);
        zotbox::home::write_atomic(&out, text.as_bytes())
            .with_context(|| format!("cannot write `{}`", out.display()))?;
        let id = key.public().id();
        if context.json {
            json_line(&serde_json::json!({
                "archive": self.archive,
                "signature": out,
                "key_id": id.to_string(),
                "sha256": digest,
            }))?;
        } else {
            println!(
                "signed {} with key {id}: {}",
                self.archive.display(),
                out.display()
            );
        }
        Ok(EXIT_OK)
    }
}

/// Build and sign a registry's index.
#[derive(Debug, clap::Subcommand)]
pub(crate) enum RegistryCommand {
    /// Build DIR/index.json from the packed archives in DIR, and sign it.
    ///
    /// Reads every `*.tar.gz` in DIR (made by `zotbox ext pack`) without
    /// unpacking it: its manifest gives the entry's name, version, kind,
    /// description and declared capabilities; the sha256 is the archive's,
    /// and `ARCHIVE.minisig` beside it (from `zotbox ext sign`), when there
    /// is one, is inlined as the publisher's signature. Writes
    /// DIR/index.json and DIR/index.json.minisig, signed by KEY: host DIR
    /// on any static HTTPS server and list its index URL and public key in
    /// the users' policy (`registries`).
    ///
    /// The index version is the previous DIR/index.json's + 1 (else the
    /// unix time): clients refuse an index older than one they saw. It
    /// expires after --expires-days (default 30): rebuild before then. An
    /// entry marked `"revoked": true` in the previous index stays revoked.
    Index {
        /// The folder of archives (and where the index is written).
        dir: PathBuf,
        /// The registry's secret key file.
        #[arg(long, value_name = "KEY")]
        key: PathBuf,
        /// Where the archives are served, when not beside the index
        /// (`https://` only); by default entries name the archive file,
        /// relative to the index.
        #[arg(long, value_name = "URL")]
        base_url: Option<String>,
        /// The URL the index is served at (`https://…/index.json`): named in
        /// the signed index, which clients then refuse at any other URL (so
        /// that registries sharing a key cannot stand in for each other).
        /// Kept from the previous index when not given.
        #[arg(long, value_name = "URL")]
        url: Option<String>,
        /// Days until the index expires.
        #[arg(long, value_name = "N", default_value_t = 30,
              value_parser = clap::value_parser!(u64).range(1..=3650))]
        expires_days: u64,
    },
}

impl RegistryCommand {
    pub(crate) async fn run(self, context: &Context) -> Result<u8> {
        let Self::Index {
            dir,
            key,
            base_url,
            url,
            expires_days,
        } = self;
        if let Some(url) = &base_url
            && !url.starts_with("https://")
        {
            bail!(
                "`--base-url {}` refused: archives are served over https only; give an \
                 `https://` URL",
                zotbox::text::Shown(url)
            );
        }
        if let Some(url) = &url
            && !url.starts_with("https://")
        {
            bail!(
                "`--url {}` refused: an index is served over https only; give the `https://` URL \
                 clients list in their policy",
                zotbox::text::Shown(url)
            );
        }
        let key = SecretKey::load(&key)?;
        let now = UtcTime::from_system(std::time::SystemTime::now());
        let expires = UtcTime::from_unix(now.unix().saturating_add(expires_days * 86_400));
        let (text, signed) = registry::build_index_at(
            &dir,
            url.as_deref(),
            base_url.as_deref(),
            &key,
            None,
            Some(expires),
        )?;
        let index = registry::Index::parse(text.as_bytes())?;
        let index_path = dir.join(registry::build::INDEX_FILE);
        let signature_path = dir.join(registry::build::INDEX_SIGNATURE_FILE);
        // The index first: a reader between the two writes sees the new
        // index with the old signature, which fails closed.
        for (path, content) in [(&index_path, &text), (&signature_path, &signed)] {
            zotbox::home::write_atomic(path, content.as_bytes())
                .with_context(|| format!("cannot write `{}`", path.display()))?;
        }
        let id = key.public().id();
        if context.json {
            json_line(&serde_json::json!({
                "index": index_path,
                "signature": signature_path,
                "version": index.version,
                "expires": index.expires.to_string(),
                "entries": index.entries.len(),
                "key_id": id.to_string(),
            }))?;
        } else {
            println!(
                "index version {} of {} entries, expires {}, signed with key {id}: {}",
                index.version,
                index.entries.len(),
                index.expires,
                index_path.display()
            );
        }
        Ok(EXIT_OK)
    }
}
