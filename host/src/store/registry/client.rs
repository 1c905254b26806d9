//! Asking the registries the policy lists: their indexes, verified and
//! recorded, and an entry's archive, checked and unpacked.
//!
//! Everything goes through the rules of the parent module, in this order:
//!
//! 1. The index and its `.minisig` (the index URL with `.minisig` added)
//!    are downloaded over HTTPS with the `http` capability's client
//!    ([`crate::store::fetch`]), checked by [`verify_index`] against the
//!    registry's keys, its expiry and the last version seen, and only then
//!    is the version recorded ([`RegistryState`]).
//! 2. Registries are asked in the policy's order (the system file's first);
//!    the first that lists the name (at the version, when one is given)
//!    answers. An index that cannot be had is skipped only if another
//!    registry lists the name; otherwise its refusal is the answer. A name
//!    listed only as revoked is refused as revoked.
//! 3. An archive is downloaded, then [`check_entry`] (revocation, native
//!    ban, digest, signature and publishers) and [`check_archive_manifest`]
//!    (it holds the listed extension, declaring the listed capabilities)
//!    pass before a byte is unpacked, into a private folder
//!    ([`crate::store::unpack`]). The install then goes through
//!    [`crate::store::install`] like a folder's.

use std::time::SystemTime;

use super::{
    Entry, Index, RegistryError, RegistryState, Verified, check_archive_manifest, check_entry,
    compare_versions, parse_keys, verify_index,
};
use crate::home::ZotHome;
use crate::policy::{Policy, Registry};
use crate::store::fetch::{FetchError, Limits, download};
use crate::store::source::{Fetched, Provenance, Source, SourceError, private_folder};
use crate::store::unpack::{Caps, UnpackError, unpack};
use crate::text::Shown;

/// Why a registry could not answer.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// The policy lists no registry.
    #[error(
        "no registry is configured; add one to the policy: `\"registries\": [{{\"url\": \
         \"https://…/index.json\", \"keys\": [\"<the registry's public key>\"]}}]`"
    )]
    NoRegistry,
    /// A download failed.
    #[error("registry `{}`", Shown(url))]
    Fetch {
        /// The registry's index URL.
        url: String,
        /// What failed.
        #[source]
        source: FetchError,
    },
    /// The index or the entry was refused.
    #[error("registry `{}`", Shown(url))]
    Refused {
        /// The registry's index URL.
        url: String,
        /// The rule that refused it.
        #[source]
        source: RegistryError,
    },
    /// No registry lists the name (at the version).
    #[error("no registry lists `{}`{}", Shown(name), version.as_ref().map(|v| format!(" at version {}", Shown(v))).unwrap_or_default())]
    NotListed {
        /// The name asked for.
        name: String,
        /// The version asked for.
        version: Option<String>,
    },
    /// `ext update`: the registry an extension came from no longer lists it.
    #[error(
        "registry `{}` no longer lists `{}`; it is left as installed",
        Shown(url),
        Shown(name)
    )]
    NotListedIn {
        /// The registry's index URL.
        url: String,
        /// The extension.
        name: String,
    },
    /// `ext update`: the registry an extension came from revoked the
    /// version installed, and lists no newer one.
    #[error(
        "registry `{}` revoked `{}` {}, the version installed ({}); it is left as installed: \
         remove it (`zotbox ext remove {}`) or install another version",
        Shown(url),
        Shown(name),
        Shown(version),
        Shown(reason.as_deref().unwrap_or("no reason given")),
        Shown(name)
    )]
    InstalledRevoked {
        /// The registry's index URL.
        url: String,
        /// The extension.
        name: String,
        /// The version installed.
        version: String,
        /// Why the registry withdrew it.
        reason: Option<String>,
    },
    /// `ext update`: the registry an extension came from is not in the
    /// policy any more.
    #[error(
        "`{}` came from registry `{}`, which the policy no longer lists; it is left as \
         installed (reinstall it from a configured registry to update it)",
        Shown(name),
        Shown(url)
    )]
    Unconfigured {
        /// The registry's index URL.
        url: String,
        /// The extension.
        name: String,
    },
    /// The archive could not be unpacked.
    #[error("registry `{}`", Shown(url))]
    Unpack {
        /// The registry's index URL.
        url: String,
        /// The unpacking rule that refused it.
        #[source]
        source: UnpackError,
    },
    /// A private folder could not be made.
    #[error(transparent)]
    Source(#[from] SourceError),
}

/// The registries in force, asked with one set of limits.
#[derive(Debug)]
pub struct Client<'a> {
    home: &'a ZotHome,
    policy: &'a Policy,
    limits: Limits,
}

/// An entry found in a registry's index.
#[derive(Debug, Clone)]
pub struct Found {
    /// The registry that listed it.
    pub registry: Registry,
    /// The entry.
    pub entry: Entry,
}

/// An entry's archive, checked and unpacked into a private folder.
#[derive(Debug)]
pub struct Obtained {
    /// The unpacked folder and what to record in the lock.
    pub fetched: Fetched,
    /// Where it came from.
    pub found: Found,
    /// Who signed it.
    pub verified: Verified,
}

impl<'a> Client<'a> {
    /// A client of the registries `policy` lists, recording what it saw
    /// under `home`.
    pub fn new(home: &'a ZotHome, policy: &'a Policy) -> Self {
        Self {
            home,
            policy,
            limits: Limits::default(),
        }
    }

    /// The registries in force; [`ClientError::NoRegistry`] when none is.
    ///
    /// # Errors
    ///
    /// [`ClientError::NoRegistry`].
    pub fn registries(&self) -> Result<Vec<Registry>, ClientError> {
        let registries = self.policy.registries();
        if registries.is_empty() {
            return Err(ClientError::NoRegistry);
        }
        Ok(registries)
    }

    /// The verified index of `registry` (rule 1).
    ///
    /// # Errors
    ///
    /// [`ClientError::Fetch`] or [`ClientError::Refused`].
    pub async fn index(&self, registry: &Registry) -> Result<Index, ClientError> {
        let url = registry.url.clone();
        let http = self.policy.http_config();
        let fetch = |source| ClientError::Fetch {
            url: url.clone(),
            source,
        };
        let refused = |source| ClientError::Refused {
            url: url.clone(),
            source,
        };
        // The index and its signature have caps of their own, far below an
        // archive's: a mirror serving a huge one is stopped at the cap, not
        // read to 100 MiB and refused after.
        let capped = |max: usize| Limits {
            max_bytes: max as u64,
            ..self.limits.clone()
        };
        let bytes = download(&url, &capped(super::MAX_INDEX_BYTES), &http)
            .await
            .map_err(fetch)?;
        let signature = download(
            &format!("{url}.minisig"),
            &capped(crate::store::signature::MAX_SIGNATURE_TEXT),
            &http,
        )
        .await
        .map_err(fetch)?;
        let signature = String::from_utf8(signature).map_err(|_| {
            refused(RegistryError::Malformed {
                subject: "the index signature".to_owned(),
                detail: "it is not text".to_owned(),
            })
        })?;
        let keys = parse_keys(&registry.keys).map_err(refused)?;
        let mut state = RegistryState::load(&self.home.registry_state()).map_err(refused)?;
        let index = verify_index(
            &bytes,
            &signature,
            &keys,
            SystemTime::now(),
            state.last_seen(&url),
        )
        .map_err(refused)?;
        // Before its version is recorded: another registry's index must not
        // freeze this one.
        if let Some(named) = index.registry.as_ref().filter(|named| **named != url) {
            return Err(refused(RegistryError::ForAnotherRegistry {
                named: named.clone(),
            }));
        }
        state.record(&url, index.version).map_err(refused)?;
        Ok(index)
    }

    /// Every registry's index, each with its own outcome.
    ///
    /// # Errors
    ///
    /// [`ClientError::NoRegistry`].
    pub async fn indexes(
        &self,
    ) -> Result<Vec<(Registry, Result<Index, ClientError>)>, ClientError> {
        let mut all = Vec::new();
        for registry in self.registries()? {
            let index = self.index(&registry).await;
            all.push((registry, index));
        }
        Ok(all)
    }

    /// The first registry's entry for `name` (at `version`, else its newest
    /// version that is not revoked) (rule 2).
    ///
    /// # Errors
    ///
    /// [`ClientError::NotListed`], or the first refusal of a registry that
    /// could not be read: the registries after it are not asked, so a later
    /// one never stands in for an earlier one.
    pub async fn find(&self, name: &str, version: Option<&str>) -> Result<Found, ClientError> {
        // One registry at a time: the first that lists the name answers,
        // and the indexes after it are not downloaded. A registry that
        // cannot be read is the answer too: a later one (a user's, or an
        // attacker's mirror) never stands in for an earlier one that is
        // down or refused.
        for registry in self.registries()? {
            let index = self.index(&registry).await?;
            if let Some(entry) = index.find(name, version) {
                return Ok(Found {
                    registry,
                    entry: entry.clone(),
                });
            }
            // Listed, but only as withdrawn: say so, not "unknown".
            if let Some(withdrawn) = index.entries.iter().rev().find(|entry| {
                entry.revoked
                    && entry.name == name
                    && version.is_none_or(|version| entry.version == version)
            }) {
                return Err(ClientError::Refused {
                    url: registry.url,
                    source: RegistryError::Revoked {
                        name: withdrawn.name.clone(),
                        version: withdrawn.version.clone(),
                        reason: withdrawn.reason.clone(),
                    },
                });
            }
        }
        Err(ClientError::NotListed {
            name: name.to_owned(),
            version: version.map(str::to_owned),
        })
    }

    /// The newest entry `name` in the one registry at `url` (what `ext
    /// update` asks: the registry the extension came from, never another
    /// one listing the same name, and not another one when it is down).
    ///
    /// # Errors
    ///
    /// [`ClientError::Unconfigured`] when the policy no longer lists `url`,
    /// [`ClientError::NotListedIn`], or why its index was refused.
    pub async fn find_in(
        &self,
        url: &str,
        name: &str,
        installed: &str,
    ) -> Result<Found, ClientError> {
        let registry = self
            .policy
            .registries()
            .into_iter()
            .find(|registry| registry.url == url)
            .ok_or_else(|| ClientError::Unconfigured {
                url: url.to_owned(),
                name: name.to_owned(),
            })?;
        let index = self.index(&registry).await?;
        // The version installed, withdrawn: said, unless a newer one
        // replaces it.
        let revoked = index
            .find(name, Some(installed))
            .filter(|entry| entry.revoked);
        match index.find(name, None) {
            Some(entry)
                if revoked.is_none()
                    || compare_versions(&entry.version, installed)
                        == std::cmp::Ordering::Greater =>
            {
                Ok(Found {
                    entry: entry.clone(),
                    registry,
                })
            }
            _ => Err(match revoked {
                Some(entry) => ClientError::InstalledRevoked {
                    url: url.to_owned(),
                    name: name.to_owned(),
                    version: installed.to_owned(),
                    reason: entry.reason.clone(),
                },
                None => ClientError::NotListedIn {
                    url: url.to_owned(),
                    name: name.to_owned(),
                },
            }),
        }
    }

    /// Downloads, checks and unpacks the archive of `found` (rule 3).
    ///
    /// # Errors
    ///
    /// [`ClientError`] naming the rule; nothing is left on disk.
    pub async fn obtain(&self, found: Found) -> Result<Obtained, ClientError> {
        let url = found.registry.url.clone();
        let refused = |source| ClientError::Refused {
            url: url.clone(),
            source,
        };
        let archive = found.entry.archive_url(&url).map_err(refused)?;
        let bytes = download(&archive, &self.limits, &self.policy.http_config())
            .await
            .map_err(|source| ClientError::Fetch {
                url: url.clone(),
                source,
            })?;
        let verified =
            check_entry(&found.entry, &bytes, &self.policy.publisher_rules()).map_err(refused)?;
        check_archive_manifest(&found.entry, &bytes).map_err(refused)?;
        let temp = private_folder()?;
        let into = temp.path().to_owned();
        let top = tokio::task::spawn_blocking(move || unpack(&bytes, &into, Caps::default()))
            .await
            .map_err(|err| SourceError::Io(std::io::Error::other(err.to_string())))?
            .map_err(|source| ClientError::Unpack {
                url: url.clone(),
                source,
            })?;
        let source = Source::Registry {
            name: found.entry.name.clone(),
            version: Some(found.entry.version.clone()),
        };
        let recorded = Provenance {
            sha256: Some(found.entry.sha256.clone()),
            publisher_key: verified.key.map(|key| key.to_string()),
            publisher: verified.public.clone(),
            registry: Some(url.clone()),
            ..Provenance::of_source(source.to_string())
        };
        Ok(Obtained {
            fetched: Fetched::new(top, recorded, temp),
            found,
            verified,
        })
    }
}
