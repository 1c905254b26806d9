//! `ext install SOURCE`: turning the source text into a folder to install,
//! fetching git and archive sources (the library does the work; this says
//! what was fetched).

use std::path::PathBuf;

use anyhow::Result;
use zotbox::home::ZotHome;
use zotbox::store::fetch::Limits;
use zotbox::store::registry::client::{Client, Obtained};
use zotbox::store::source::{self, Fetched, Source};
use zotbox::text::{Shown, shown};

use super::Context;

/// The folder an install reads.
pub(crate) enum Got {
    /// A folder on this machine, installed as it is.
    Folder(PathBuf),
    /// A fetched source, in a private folder removed when this is dropped.
    Fetched(Fetched),
}

/// Parses `text` and fetches it when it is git or an archive.
pub(crate) async fn fetch(
    context: &Context,
    text: &str,
    home: &ZotHome,
    policy: &zotbox::policy::Policy,
) -> Result<Got> {
    let parsed = Source::parse(text)?;
    match &parsed {
        Source::Folder(path) => Ok(Got::Folder(path.clone())),
        Source::Registry { name, version } => {
            let obtained = from_registry(context, home, policy, name, version.as_deref()).await?;
            Ok(Got::Fetched(obtained.fetched))
        }
        Source::Git { .. } | Source::Archive { .. } => {
            if !context.json {
                eprintln!("fetching {}", shown(&parsed.to_string()));
            }
            let fetched =
                source::fetch_source(&parsed, &Limits::default(), &policy.http_config()).await?;
            if !context.json {
                let recorded = &fetched.recorded;
                if let Some(commit) = &recorded.commit {
                    eprintln!("fetched commit {}", Shown(commit));
                }
                if let Some(sha256) = &recorded.sha256 {
                    eprintln!("fetched archive, sha256 {}", Shown(sha256));
                }
            }
            Ok(Got::Fetched(fetched))
        }
    }
}

/// Finds `name` (at `version`) in the policy's registries, downloads and
/// checks its archive, and says on stderr where it came from and who
/// signed it.
pub(crate) async fn from_registry(
    context: &Context,
    home: &ZotHome,
    policy: &zotbox::policy::Policy,
    name: &str,
    version: Option<&str>,
) -> Result<Obtained> {
    let client = Client::new(home, policy);
    let found = client.find(name, version).await?;
    if !context.json {
        eprintln!(
            "fetching `{}` {} from {}",
            Shown(&found.entry.name),
            Shown(&found.entry.version),
            shown(&found.registry.url)
        );
    }
    let obtained = client.obtain(found).await?;
    if !context.json {
        eprintln!("{}", signature_status(&obtained));
    }
    Ok(obtained)
}

/// One line on who signed an obtained archive.
pub(crate) fn signature_status(obtained: &Obtained) -> String {
    let sha256 = &obtained.found.entry.sha256;
    match obtained.verified.key {
        Some(key) => format!("archive sha256 {sha256}, signed by publisher key {key} (trusted)"),
        None => {
            format!("archive sha256 {sha256}, unsigned (the policy does not require a signature)")
        }
    }
}
