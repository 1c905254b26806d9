//! Downloading an extension archive.
//!
//! # Rules
//!
//! 1. **HTTPS only**, through the `http` capability's own client
//!    ([`HttpClient`]): no proxy from the environment, no cookies, redirects
//!    followed by hand and each hop re-checked (a hop to `http://` is
//!    refused), names resolving only to public addresses, the policy's
//!    `extra_root_certificates` trusted beside the webpki roots.
//! 2. **Only the URL's origin**, plus the origins the caller names in
//!    [`Limits::also`] (a registry's mirror): a redirect anywhere else is
//!    refused, as a grant would refuse it.
//! 3. **Bounded**: the body is streamed and stops past [`Limits::max_bytes`]
//!    (by default [`MAX_DOWNLOAD_BYTES`]); the whole exchange, redirects
//!    included, runs under [`Limits::timeout`].
//! 4. **A success is a `2xx`**: any other status is an error naming it,
//!    and its body is never unpacked.

use std::time::Duration;

use crate::capability::CapabilityError;
use crate::capability::http::{HttpClient, HttpConfig, HttpGrant, Request};
use crate::text::Shown;

/// The largest download: 100 MiB (the install cap; an archive compresses).
pub const MAX_DOWNLOAD_BYTES: u64 = 100 * 1024 * 1024;
/// The deadline of one download: 5 minutes.
pub const DOWNLOAD_TIMEOUT: Duration = Duration::from_secs(300);

/// The caps of one download.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Limits {
    /// The largest body, in bytes.
    pub max_bytes: u64,
    /// The deadline of the whole exchange.
    pub timeout: Duration,
    /// Origins (`https://host[:port]`) a redirect may lead to besides the
    /// URL's own.
    pub also: Vec<String>,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            max_bytes: MAX_DOWNLOAD_BYTES,
            timeout: DOWNLOAD_TIMEOUT,
            also: Vec::new(),
        }
    }
}

/// Why a download failed; nothing was kept.
#[derive(Debug, thiserror::Error)]
pub enum FetchError {
    /// Rule 1: not an `https://` URL.
    #[error("download of `{}` refused: only `https://` URLs are downloaded", Shown(.url))]
    NotHttps {
        /// The URL.
        url: String,
    },
    /// Rules 1 and 2: the URL or a redirect hop broke a rule.
    #[error("download of `{}` refused: {reason}", Shown(.url))]
    Denied {
        /// The URL.
        url: String,
        /// The rule, from the HTTP client.
        reason: String,
    },
    /// Rule 3: past the size cap.
    #[error("download of `{}` stopped: it is larger than {}", Shown(.url), crate::text::limit_size(*.limit))]
    TooLarge {
        /// The URL.
        url: String,
        /// The cap, in bytes.
        limit: u64,
    },
    /// Rule 3: past the deadline.
    #[error("download of `{}` stopped: it took longer than {secs} s", Shown(.url))]
    Timeout {
        /// The URL.
        url: String,
        /// The deadline, in seconds.
        secs: u64,
    },
    /// Rule 4: not a success.
    #[error("download of `{}` failed: the server answered {status}", Shown(.url))]
    Status {
        /// The URL.
        url: String,
        /// The HTTP status.
        status: u16,
    },
    /// The network, TLS or the client failed.
    #[error("download of `{}` failed: {reason}", Shown(.url))]
    Failed {
        /// The URL.
        url: String,
        /// What failed.
        reason: String,
    },
}

/// Downloads `url` (rules above) with the client settings of `http` (its
/// `extra_roots`; the size and time caps come from `limits`).
///
/// # Errors
///
/// [`FetchError`] naming the URL and the rule.
pub async fn download(
    url: &str,
    limits: &Limits,
    http: &HttpConfig,
) -> Result<Vec<u8>, FetchError> {
    let failed = |reason: String| FetchError::Failed {
        url: url.to_owned(),
        reason,
    };
    let parsed = reqwest::Url::parse(url).map_err(|err| failed(format!("not a URL: {err}")))?;
    if parsed.scheme() != "https" {
        return Err(FetchError::NotHttps {
            url: url.to_owned(),
        });
    }
    let mut origins = vec![parsed.origin().ascii_serialization()];
    origins.extend(limits.also.iter().cloned());
    let grant = HttpGrant::new(&origins).map_err(|err| failed(err.to_string()))?;
    let config = HttpConfig {
        max_body: limits.max_bytes,
        timeout: limits.timeout,
        extra_roots: http.extra_roots.clone(),
    };
    let client = HttpClient::new(config).map_err(|err| failed(err.to_string()))?;
    let response = client
        .fetch(&grant, Request::get(url))
        .await
        .map_err(|err| match err {
            CapabilityError::Denied { reason, .. } => FetchError::Denied {
                url: url.to_owned(),
                reason,
            },
            CapabilityError::TooLarge { limit, .. } => FetchError::TooLarge {
                url: url.to_owned(),
                limit,
            },
            CapabilityError::Timeout { .. } => FetchError::Timeout {
                url: url.to_owned(),
                secs: limits.timeout.as_secs(),
            },
            other => failed(other.to_string()),
        })?;
    if !(200..300).contains(&response.status) {
        return Err(FetchError::Status {
            url: url.to_owned(),
            status: response.status,
        });
    }
    Ok(response.body)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn only_https_is_downloaded_and_nothing_is_sent_otherwise() {
        let limits = Limits::default();
        let config = HttpConfig::default();
        // Nothing listens there: a request would fail as `Failed`, not `NotHttps`.
        let err = download("http://127.0.0.1:9/x.tar.gz", &limits, &config)
            .await
            .unwrap_err();
        assert_eq!(
            err.to_string(),
            "download of `http://127.0.0.1:9/x.tar.gz` refused: only `https://` URLs are downloaded"
        );
        let err = download("ftp://example.com/x.tar.gz", &limits, &config)
            .await
            .unwrap_err();
        assert!(matches!(err, FetchError::NotHttps { .. }), "{err}");
    }
}
