//! HTTPS requests to granted origins: the `zot:host/http` interface.
//!
//! The rules, each enforced here and not left to the HTTP library:
//!
//! - only `https://` URLs, without user info (`https://allowed@evil/` is refused);
//! - only origins the [`HttpGrant`] names: an exact host or `*.domain`
//!   (any subdomain, never the domain itself), with a port that defaults to 443;
//! - redirects are followed by hand, at most [`MAX_REDIRECTS`] hops, and every
//!   hop is checked like the first request; a redirect to `http://` is refused;
//! - a *name* may only reach public addresses: the DNS resolver refuses
//!   loopback, private, link-local, cloud-metadata, CGNAT, multicast and other
//!   special ranges (also when IPv4 hides inside IPv6). To reach such an
//!   address, grant its literal (`https://127.0.0.1:8443`) and use it in the
//!   URL; an address literal matches only a grant that names it. The address
//!   actually connected to is checked again after connecting;
//! - no proxy settings from the environment (`HTTPS_PROXY`, `ALL_PROXY`, …),
//!   no cookies, no `Referer`;
//! - the response body is streamed and capped, and the whole exchange,
//!   redirects included, runs under one deadline;
//! - a secret travels only as its placeholder (`{{secret:NAME}}`, see
//!   [`placeholder`]) until the moment of sending: the host replaces it in
//!   header values, and in the query string where the secret allows it
//!   ([`BoundSecret`]), only for a hop to an origin the secret is bound to.
//!   A placeholder in a body, in the URL outside its query string, in the
//!   query string of a secret not allowed there, or headed for any other
//!   origin (the first request or a redirect hop) refuses the whole request.
//!   The value is never in an error: messages quote the URL as the caller
//!   wrote it, placeholders and all. Every value of the grant, and its
//!   percent-encoded form, is redacted from the response (headers and body)
//!   before the caller sees it.

use std::error::Error as StdError;
use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use reqwest::Url;
use reqwest::dns::{Addrs, Name, Resolve, Resolving};
use reqwest::header::{HeaderMap, HeaderName, HeaderValue};

use super::{Capability, CapabilityError, granted_list};

/// Default cap on a response body: 10 MiB.
pub const DEFAULT_MAX_BODY: u64 = 10 * 1024 * 1024;
/// Default deadline of one fetch, redirects and body included: 20 s.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(20);
/// The most redirects one fetch follows.
pub const MAX_REDIRECTS: usize = 5;
/// Origins a client keeps connections open to. One more replaces its
/// connection pool with an empty one: each open connection is a file
/// descriptor of the host, which every extension of the shared host
/// shares, so a guest granted `*.example.com` must not hold one per
/// name it can make up.
pub const MAX_POOLED_ORIGINS: usize = 8;
/// Idle connections kept per origin.
const MAX_IDLE_PER_ORIGIN: usize = 2;
/// How long an idle connection is kept.
const IDLE_TIMEOUT: Duration = Duration::from_secs(30);

/// Request headers the host manages itself; a caller may not set them.
const MANAGED_HEADERS: &[&str] = &[
    "connection",
    "content-length",
    "keep-alive",
    "proxy-authorization",
    "proxy-connection",
    "te",
    "trailer",
    "transfer-encoding",
    "upgrade",
];

/// What a secret's placeholder starts with: `{{secret:NAME}}`.
pub const PLACEHOLDER_OPEN: &str = "{{secret:";
const PLACEHOLDER_CLOSE: &str = "}}";
/// The longest secret name.
pub const MAX_SECRET_NAME: usize = 64;

/// The placeholder a caller writes for the secret `name`: `{{secret:NAME}}`.
pub fn placeholder(name: &str) -> String {
    format!("{PLACEHOLDER_OPEN}{name}{PLACEHOLDER_CLOSE}")
}

/// Whether `name` is a valid secret name: 1 to 64 of `A-Z a-z 0-9 _ . -`.
pub fn valid_secret_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= MAX_SECRET_NAME
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'.' | b'-'))
}

/// Where in a request a placeholder was found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Place {
    Header,
    Query,
    Url,
    Body,
}

/// The secret names of the placeholders in `text`, in order.
///
/// # Errors
///
/// A phrase when `{{secret:` starts something that is not a well-formed
/// placeholder (a guessed-at syntax would otherwise travel as it is).
pub fn placeholder_names(text: &str) -> Result<Vec<String>, String> {
    let mut names = Vec::new();
    let mut rest = text;
    while let Some(start) = rest.find(PLACEHOLDER_OPEN) {
        let after = &rest[start + PLACEHOLDER_OPEN.len()..];
        let name = after
            .find(PLACEHOLDER_CLOSE)
            .map(|end| &after[..end])
            .filter(|name| valid_secret_name(name))
            .ok_or_else(|| {
                "a secret placeholder is malformed; write `{{secret:NAME}}`, NAME being 1 to 64 \
                 of `A-Z a-z 0-9 _ . -`"
                    .to_owned()
            })?;
        names.push(name.to_owned());
        rest = &after[name.len() + PLACEHOLDER_CLOSE.len()..];
    }
    Ok(names)
}

/// One secret the host may substitute into a request: its value, the
/// origins it may be sent to, and whether the query string may carry it.
/// Its `Debug` never shows the value.
#[derive(Clone)]
pub struct BoundSecret {
    name: String,
    value: String,
    origins: Vec<Origin>,
    query: bool,
}

impl fmt::Debug for BoundSecret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("BoundSecret")
            .field("name", &self.name)
            .field("origins", &self.origins)
            .field("query", &self.query)
            .finish_non_exhaustive()
    }
}

impl BoundSecret {
    /// The secret `name` with `value`, sent only to `origins`
    /// (`https://host[:port]`, as in a grant); `query`: whether the query
    /// string may carry it too.
    ///
    /// # Errors
    ///
    /// [`CapabilityError::Invalid`] when an origin does not parse.
    pub fn new(
        name: &str,
        value: String,
        origins: &[String],
        query: bool,
    ) -> Result<Self, CapabilityError> {
        Ok(Self {
            name: name.to_owned(),
            value,
            origins: origins
                .iter()
                .map(|origin| parse_origin(origin))
                .collect::<Result<_, _>>()?,
            query,
        })
    }

    /// The secret's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    fn admits(&self, url: &Url) -> bool {
        let Some(host) = url_host(url) else {
            return false;
        };
        let port = url.port_or_known_default().unwrap_or(443);
        url.scheme() == "https"
            && self
                .origins
                .iter()
                .any(|origin| origin.port == port && origin.host.matches(&host))
    }

    fn bound_to(&self) -> String {
        granted_list(self.origins.iter().map(|origin| origin.shown.as_str()))
    }

    /// `[redacted secret NAME]`: what replaces the value in a response.
    fn redacted(&self) -> String {
        format!("[redacted secret {}]", self.name)
    }
}

/// How an echo of `value` may be written: as it is, percent-encoded with
/// upper- or lowercase hex, and with `/` escaped as JSON writers (PHP's)
/// do. A server that transforms it otherwise defeats redaction.
fn echo_forms(value: &str) -> Vec<String> {
    let mut forms = vec![
        value.to_owned(),
        percent_encode_in(value, Hex::Lower),
        value.replace('/', "\\/"),
        percent_encode(value),
    ];
    forms.retain(|form| !form.is_empty());
    forms.dedup();
    forms
}

/// Replaces every value of `secrets` in `text`, in each of its
/// `echo_forms`, with `[redacted secret NAME]`.
pub fn redact(secrets: &[BoundSecret], text: &str) -> String {
    let mut text = text.to_owned();
    for secret in secrets {
        for form in echo_forms(&secret.value) {
            if text.contains(&form) {
                text = text.replace(&form, &secret.redacted());
            }
        }
    }
    text
}

/// `secrets` with their values lowercased: what a response header's name,
/// which arrives lowercased, is cleaned of.
fn lowercased(secrets: &[BoundSecret]) -> Vec<BoundSecret> {
    secrets
        .iter()
        .map(|secret| BoundSecret {
            value: secret.value.to_ascii_lowercase(),
            ..secret.clone()
        })
        .collect()
}

/// [`redact`] on bytes, which need not be text.
fn redact_bytes(secrets: &[BoundSecret], bytes: Vec<u8>) -> Vec<u8> {
    let mut bytes = bytes;
    for secret in secrets {
        for form in echo_forms(&secret.value) {
            let form = form.as_bytes();
            let redacted = secret.redacted().into_bytes();
            let mut out = Vec::with_capacity(bytes.len());
            let mut index = 0;
            while index < bytes.len() {
                if bytes[index..].starts_with(form) {
                    out.extend_from_slice(&redacted);
                    index += form.len();
                } else {
                    out.push(bytes[index]);
                    index += 1;
                }
            }
            bytes = out;
        }
    }
    bytes
}

/// Every byte but `A-Z a-z 0-9 - . _ ~` as `%XX`: a value safe in a query.
fn percent_encode(value: &str) -> String {
    percent_encode_in(value, Hex::Upper)
}

/// The case of the hex digits of a `%XX`.
#[derive(Clone, Copy)]
enum Hex {
    Upper,
    Lower,
}

/// [`percent_encode`] with `hex` digits (a server may echo either).
fn percent_encode_in(value: &str, hex: Hex) -> String {
    let mut out = String::with_capacity(value.len());
    for byte in value.bytes() {
        if byte.is_ascii_alphanumeric() || matches!(byte, b'-' | b'.' | b'_' | b'~') {
            out.push(char::from(byte));
        } else {
            match hex {
                Hex::Upper => out.push_str(&format!("%{byte:02X}")),
                Hex::Lower => out.push_str(&format!("%{byte:02x}")),
            }
        }
    }
    out
}

/// The placeholders of `request` by where they are, or a refusal for one
/// that is malformed.
fn placeholders_of(request: &Request) -> Result<Vec<(String, Place)>, CapabilityError> {
    let malformed =
        |problem: String| CapabilityError::denied(Capability::Http, &request.url, problem);
    let mut found = Vec::new();
    // The raw URL as the caller wrote it: `{` in a path would be
    // percent-encoded by parsing, and hidden from the scan.
    let end = request.url.find('#').unwrap_or(request.url.len());
    let (before, query) = match request.url[..end].find('?') {
        Some(mark) => (
            format!("{}{}", &request.url[..mark], &request.url[end..]),
            &request.url[mark..end],
        ),
        None => (request.url.clone(), ""),
    };
    for (text, place) in [(before.as_str(), Place::Url), (query, Place::Query)] {
        for name in placeholder_names(text).map_err(malformed)? {
            found.push((name, place));
        }
    }
    for (name, value) in &request.headers {
        for text in [name, value] {
            for name in placeholder_names(text).map_err(malformed)? {
                found.push((name, Place::Header));
            }
        }
    }
    if let Some(body) = &request.body {
        let text = String::from_utf8_lossy(body);
        for name in placeholder_names(&text).map_err(malformed)? {
            found.push((name, Place::Body));
        }
    }
    Ok(found)
}

/// The names of the secrets `request` uses, once every placeholder is
/// where a placeholder may be: a header value, or the query string of a
/// secret whose `query_allowed` says so.
///
/// # Errors
///
/// [`CapabilityError::Denied`] (`http`) naming the secret and the rule.
pub fn secrets_used(
    request: &Request,
    query_allowed: impl Fn(&str) -> bool,
) -> Result<Vec<String>, CapabilityError> {
    let only = "placeholders are only replaced in header values (and in the query string of a \
                secret whose manifest entry says `\"query\": true`)";
    // The scan reads the URL as written, the request sends it as parsed,
    // and parsing drops every tab and line break: `{{sec<TAB>ret:K}}` is
    // no placeholder to the scan and one in the query string sent. No URL
    // holds a control character, so none is taken.
    if let Some(control) = request.url.chars().find(|c| c.is_control()) {
        return Err(CapabilityError::Invalid(format!(
            "`{}` is not a valid URL: it holds the control character {}",
            crate::text::Shown(&request.url),
            control.escape_unicode()
        )));
    }
    let mut names: Vec<String> = Vec::new();
    for (name, place) in placeholders_of(request)? {
        let refuse = |rule: String| {
            Err(CapabilityError::denied(
                Capability::Http,
                &request.url,
                rule,
            ))
        };
        match place {
            Place::Body => {
                return refuse(format!(
                    "secret `{name}` may not be used in a request body: {only}"
                ));
            }
            Place::Url => {
                return refuse(format!(
                    "secret `{name}` may not be used in the URL outside its query string: {only}"
                ));
            }
            Place::Query if !query_allowed(&name) => {
                return refuse(format!(
                    "secret `{name}` may not be used in the query string: its manifest entry \
                     does not say `\"query\": true`"
                ));
            }
            Place::Header | Place::Query => {}
        }
        if !names.contains(&name) {
            names.push(name);
        }
    }
    Ok(names)
}

/// Refuses a hop to `url` when `headers` or `query` carry the placeholder
/// of a secret not bound to its origin (or of no secret in `secrets`).
fn check_hop(
    url: &Url,
    names: &[String],
    secrets: &[BoundSecret],
    redirected_from: Option<&Url>,
) -> Result<(), CapabilityError> {
    for name in names {
        let secret = secrets.iter().find(|secret| &secret.name == name);
        let rule = match secret {
            Some(secret) if secret.admits(url) => continue,
            Some(secret) => format!(
                "secret `{name}` may only be sent to {}, not to `{}`",
                secret.bound_to(),
                url.host_str()
                    .map_or_else(String::new, |host| match url.port() {
                        Some(port) => format!("{host}:{port}"),
                        None => host.to_owned(),
                    })
            ),
            None => format!("secret `{name}` is not available to this request"),
        };
        let rule = match redirected_from {
            Some(from) => format!("{rule} (redirected from `{from}`)"),
            None => rule,
        };
        return Err(CapabilityError::denied(
            Capability::Http,
            url.as_str(),
            rule,
        ));
    }
    Ok(())
}

/// `text` with each placeholder of `secrets` replaced by its value
/// (`encode`d); other text as it is. One pass over `text`: a value is
/// never read again, so one that ends in `{` cannot complete a second
/// placeholder after it, whose secret the hop's check never saw.
///
/// `None` once the text would pass `at_most` bytes: the caps on what a
/// guest may send count its placeholders, each a few bytes, and a long
/// secret written in thousands of times would otherwise be built (and
/// sent) at thousands of times its length.
fn substitute(text: &str, secrets: &[BoundSecret], encode: bool, at_most: usize) -> Option<String> {
    let mut out = String::with_capacity(text.len().min(at_most));
    let mut rest = text;
    while let Some(start) = rest.find(PLACEHOLDER_OPEN) {
        let after = &rest[start + PLACEHOLDER_OPEN.len()..];
        let Some(end) = after.find(PLACEHOLDER_CLOSE) else {
            break;
        };
        let name = &after[..end];
        out.push_str(&rest[..start]);
        match secrets.iter().find(|secret| secret.name == name) {
            Some(secret) if encode => out.push_str(&percent_encode(&secret.value)),
            Some(secret) => out.push_str(&secret.value),
            None => out.push_str(&rest[start..start + PLACEHOLDER_OPEN.len() + end + 2]),
        }
        if out.len() > at_most {
            return None;
        }
        rest = &after[end + PLACEHOLDER_CLOSE.len()..];
    }
    out.push_str(rest);
    (out.len() <= at_most).then_some(out)
}

/// Request headers a fetch that sent a secret sends as the host sets them:
/// a compressed or partial answer would hold an echo of the value in a
/// form redaction cannot read (the guest inflates it, or joins halves).
const ECHO_HIDING_HEADERS: &[&str] = &["accept-encoding", "range", "if-range"];

/// Headers that carry credentials; dropped when a redirect changes origin.
const CREDENTIAL_HEADERS: &[&str] = &["authorization", "cookie"];

/// The origins an extension may fetch from.
///
/// Each origin is `https://host[:port]`: `host` is a DNS name, `*.domain`
/// (any subdomain of `domain`, at any depth, but not `domain` itself), an
/// IPv4 address or a bracketed IPv6 address. Without a port only 443 is
/// granted. An empty grant allows nothing.
#[derive(Debug, Clone, Default)]
pub struct HttpGrant {
    origins: Vec<Origin>,
}

/// One granted origin: `https://host[:port]`, where a missing port means
/// 443. The one parser for origins, used by grants and by policy ceilings
/// alike ([`Origin::covers`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Origin {
    host: HostPattern,
    port: u16,
    /// As declared, without the scheme, for messages.
    shown: String,
}

/// An origin that does not parse: the message names the origin and what is
/// wrong with it. In a manifest or a policy file it is that file's error;
/// in a grant being built it is a [`CapabilityError::Invalid`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("http origin `{}` {problem}", crate::text::Shown(.origin))]
pub struct OriginError {
    origin: String,
    problem: String,
}

impl OriginError {
    /// The origin and its problem, said of a file's field, to follow
    /// ``field `http[0]` ``: "is `…`, which must …".
    pub fn of_field(&self) -> String {
        format!(
            "is `{}`, which {}",
            crate::text::Shown(&self.origin),
            self.problem
        )
    }
}

impl From<OriginError> for CapabilityError {
    fn from(err: OriginError) -> Self {
        Self::Invalid(err.to_string())
    }
}

impl Origin {
    /// Parses `https://host[:port]` (`*.domain` and IP literals allowed).
    ///
    /// # Errors
    ///
    /// [`OriginError`] naming the origin and what is wrong.
    pub fn parse(origin: &str) -> Result<Self, OriginError> {
        parse_origin(origin)
    }

    /// Whether every URL this origin admits is admitted by `self` too: the
    /// same port, and a host pattern that includes `other`'s (`*.x.com`
    /// includes `a.x.com` and `*.a.x.com`, never `x.com`).
    pub fn covers(&self, other: &Origin) -> bool {
        self.port == other.port && self.host.includes(&other.host)
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum HostPattern {
    /// One DNS name, lowercase.
    Exact(String),
    /// Any subdomain of this domain (lowercase, without `*.`).
    Subdomains(String),
    /// One address.
    Ip(IpAddr),
}

/// A URL host after parsing.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Host {
    Name(String),
    Ip(IpAddr),
}

impl fmt::Display for Host {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Name(name) => f.write_str(name),
            Self::Ip(IpAddr::V6(ip)) => write!(f, "[{ip}]"),
            Self::Ip(ip) => write!(f, "{ip}"),
        }
    }
}

impl HttpGrant {
    /// Parses declared origins such as `https://api.open-meteo.com`,
    /// `https://*.example.com`, `https://127.0.0.1:8443`.
    ///
    /// # Errors
    ///
    /// [`CapabilityError::Invalid`] naming the origin and what is wrong: not
    /// `https`, a path, user info, a bad host, wildcard or port.
    pub fn new(origins: &[String]) -> Result<Self, CapabilityError> {
        let origins = origins
            .iter()
            .map(|origin| parse_origin(origin))
            .collect::<Result<_, _>>()?;
        Ok(Self { origins })
    }

    /// A grant that allows nothing.
    pub fn none() -> Self {
        Self::default()
    }

    /// Whether the grant alone admits `url` (scheme, user info, origin),
    /// without any network access.
    pub fn admits(&self, url: &str) -> bool {
        Url::parse(url).is_ok_and(|url| self.check(&url).is_ok())
    }

    /// Checks a URL against the scheme, user-info and origin rules, without
    /// any network access.
    fn check(&self, url: &Url) -> Result<Host, String> {
        if url.scheme() != "https" {
            return Err("only https URLs are allowed".to_owned());
        }
        if !url.username().is_empty() || url.password().is_some() {
            return Err(
                "URLs with user info (`user@`) are not allowed; send credentials in a header"
                    .to_owned(),
            );
        }
        let host = url_host(url).ok_or_else(|| "the URL has no host".to_owned())?;
        let port = url.port_or_known_default().unwrap_or(443);
        let host_matches: Vec<&Origin> = self
            .origins
            .iter()
            .filter(|origin| origin.host.matches(&host))
            .collect();
        if host_matches.iter().any(|origin| origin.port == port) {
            return Ok(host);
        }
        let granted = self.granted();
        if !host_matches.is_empty() {
            return Err(format!(
                "port {port} of `{host}` is not granted (granted: {granted})"
            ));
        }
        match &host {
            Host::Ip(ip) => match address_class(*ip) {
                Some(class) => Err(format!(
                    "`{host}` is {} {class} address; only an origin naming it \
                     (`https://{host}:{port}`) allows it (granted: {granted})",
                    article(class)
                )),
                None => Err(format!("host `{host}` is not granted (granted: {granted})")),
            },
            Host::Name(_) => Err(format!("host `{host}` is not granted (granted: {granted})")),
        }
    }

    fn granted(&self) -> String {
        granted_list(self.origins.iter().map(|origin| origin.shown.as_str()))
    }
}

impl HostPattern {
    /// Whether every host `other` matches is matched by `self`.
    fn includes(&self, other: &HostPattern) -> bool {
        match (self, other) {
            (Self::Exact(a), Self::Exact(b)) => a == b,
            (Self::Ip(a), Self::Ip(b)) => a == b,
            (Self::Subdomains(_), Self::Exact(name)) => self.matches(&Host::Name(name.clone())),
            (Self::Subdomains(domain), Self::Subdomains(sub)) => {
                sub == domain || Self::Subdomains(domain.clone()).matches(&Host::Name(sub.clone()))
            }
            _ => false,
        }
    }

    fn matches(&self, host: &Host) -> bool {
        match (self, host) {
            (Self::Exact(name), Host::Name(host)) => name == host,
            (Self::Subdomains(domain), Host::Name(host)) => host
                .strip_suffix(domain.as_str())
                .and_then(|prefix| prefix.strip_suffix('.'))
                .is_some_and(|label| !label.is_empty()),
            (Self::Ip(ip), Host::Ip(host)) => ip == host,
            _ => false,
        }
    }
}

fn parse_origin(origin: &str) -> Result<Origin, OriginError> {
    let invalid = |problem: &str| OriginError {
        origin: origin.to_owned(),
        problem: problem.to_owned(),
    };
    let Some(rest) = origin.strip_prefix("https://") else {
        return Err(invalid("must start with `https://`; only https is allowed"));
    };
    let rest = rest.strip_suffix('/').unwrap_or(rest);
    if rest.contains(['/', '?', '#']) {
        return Err(invalid("must not have a path, query or fragment"));
    }
    if rest.contains('@') {
        return Err(invalid("must not have user info"));
    }
    let (host, port) = if let Some(bracketed) = rest.strip_prefix('[') {
        let (ip, after) = bracketed
            .split_once(']')
            .ok_or_else(|| invalid("has an unclosed `[`"))?;
        let ip: Ipv6Addr = ip
            .parse()
            .map_err(|_| invalid("has an invalid IPv6 address"))?;
        let port = match after {
            "" => None,
            _ => Some(
                after
                    .strip_prefix(':')
                    .ok_or_else(|| invalid("has text after the IPv6 address"))?,
            ),
        };
        (HostPattern::Ip(IpAddr::V6(ip)), port)
    } else {
        let (host, port) = match rest.rsplit_once(':') {
            Some((host, port)) => (host, Some(port)),
            None => (rest, None),
        };
        (parse_host_pattern(host).map_err(|p| invalid(&p))?, port)
    };
    let port = match port {
        None => 443,
        Some(port) => match port.parse::<u16>() {
            Ok(port) if port != 0 => port,
            _ => return Err(invalid("has an invalid port; use 1 to 65535")),
        },
    };
    Ok(Origin {
        host,
        port,
        shown: rest.to_ascii_lowercase(),
    })
}

fn parse_host_pattern(host: &str) -> Result<HostPattern, String> {
    let host = host.to_ascii_lowercase();
    if let Ok(ip) = host.parse::<Ipv4Addr>() {
        return Ok(HostPattern::Ip(IpAddr::V4(ip)));
    }
    let (wildcard, domain) = match host.strip_prefix("*.") {
        Some(domain) => (true, domain.to_owned()),
        None => (false, host.clone()),
    };
    let labels_ok = !domain.is_empty()
        && domain.split('.').all(|label| {
            !label.is_empty()
                && label
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
        });
    if !labels_ok {
        return Err(if domain.contains('*') {
            "may only use `*` as the whole first label (`*.example.com`)".to_owned()
        } else {
            "has an invalid host; use a DNS name (punycode for non-ASCII), `*.domain` \
             or an IP address"
                .to_owned()
        });
    }
    if wildcard {
        if domain.parse::<Ipv4Addr>().is_ok() {
            return Err("puts a wildcard on an IP address".to_owned());
        }
        Ok(HostPattern::Subdomains(domain))
    } else {
        Ok(HostPattern::Exact(domain))
    }
}

/// The URL's host, with IP literals told apart from names.
fn url_host(url: &Url) -> Option<Host> {
    let host = url.host_str()?;
    if let Some(v6) = host.strip_prefix('[').and_then(|h| h.strip_suffix(']')) {
        return v6.parse().ok().map(|ip: Ipv6Addr| Host::Ip(IpAddr::V6(ip)));
    }
    match host.parse::<Ipv4Addr>() {
        Ok(ip) => Some(Host::Ip(IpAddr::V4(ip))),
        Err(_) => Some(Host::Name(host.to_ascii_lowercase())),
    }
}

/// Why an address is not public, or `None` for a public one.
///
/// Covers IPv4 and IPv6, and IPv4 addresses carried inside IPv6
/// (IPv4-mapped, IPv4-compatible, NAT64 `64:ff9b::/96`, 6to4 `2002::/16`).
pub fn address_class(ip: IpAddr) -> Option<&'static str> {
    match ip {
        IpAddr::V4(ip) => v4_class(ip),
        IpAddr::V6(ip) => v6_class(ip),
    }
}

fn v4_class(ip: Ipv4Addr) -> Option<&'static str> {
    let [a, b, c, _] = ip.octets();
    let class = match (a, b, c) {
        _ if ip == Ipv4Addr::new(169, 254, 169, 254) => "cloud metadata",
        _ if ip.is_unspecified() => "unspecified",
        (0, _, _) => "unspecified (this network)",
        (127, _, _) => "loopback",
        (10, _, _) | (192, 168, _) => "private",
        (172, 16..=31, _) => "private",
        (169, 254, _) => "link-local",
        (100, 64..=127, _) => "shared (CGNAT)",
        (224..=239, _, _) => "multicast",
        _ if ip.is_broadcast() => "broadcast",
        (240..=255, _, _) => "reserved",
        (192, 0, 0) => "reserved (IETF protocol assignments)",
        (192, 0, 2) | (198, 51, 100) | (203, 0, 113) => "documentation",
        (198, 18..=19, _) => "benchmarking",
        _ => return None,
    };
    Some(class)
}

fn v6_class(ip: Ipv6Addr) -> Option<&'static str> {
    let segments = ip.segments();
    if ip == Ipv6Addr::new(0xfd00, 0x0ec2, 0, 0, 0, 0, 0, 0x0254) {
        return Some("cloud metadata");
    }
    if ip.is_unspecified() {
        return Some("unspecified");
    }
    if ip.is_loopback() {
        return Some("loopback");
    }
    if let Some(v4) = ip.to_ipv4_mapped() {
        return v4_class(v4);
    }
    let embedded = |high: u16, low: u16| {
        let [a, b] = high.to_be_bytes();
        let [c, d] = low.to_be_bytes();
        Ipv4Addr::new(a, b, c, d)
    };
    // IPv4-compatible (`::a.b.c.d`, deprecated) and NAT64 (`64:ff9b::/96`).
    if segments[..6] == [0; 6] || segments[..6] == [0x64, 0xff9b, 0, 0, 0, 0] {
        return v4_class(embedded(segments[6], segments[7])).or(Some("reserved"));
    }
    // 6to4 (`2002:a.b.c.d::/48`): reaches the embedded IPv4 host.
    if segments[0] == 0x2002
        && let Some(class) = v4_class(embedded(segments[1], segments[2]))
    {
        return Some(class);
    }
    let class = match segments[0] {
        s if s & 0xfe00 == 0xfc00 => "private (unique local)",
        s if s & 0xffc0 == 0xfe80 => "link-local",
        s if s & 0xffc0 == 0xfec0 => "private (site-local)",
        s if s & 0xff00 == 0xff00 => "multicast",
        0x2001 if segments[1] == 0x0db8 => "documentation",
        _ => return None,
    };
    Some(class)
}

/// `a` or `an` before an address class.
fn article(class: &str) -> &'static str {
    if class.starts_with(['a', 'e', 'i', 'o', 'u']) {
        "an"
    } else {
        "a"
    }
}

/// What the resolver refused; found again in the error chain of a failed send.
#[derive(Debug)]
struct AddressRefused {
    host: String,
    address: IpAddr,
    class: &'static str,
}

impl AddressRefused {
    /// The refusal, with the origin to grant instead: the address, with
    /// the URL's `port` (a grant without one means 443).
    fn explain(&self, port: Option<u16>) -> String {
        let port = port.map(|port| format!(":{port}")).unwrap_or_default();
        format!(
            "host `{}` resolves to `{}`, {} {} address; names may only reach public addresses \
             (grant the address itself, as `https://{}{port}`, and use it in the URL to allow it)",
            self.host,
            self.address,
            article(self.class),
            self.class,
            Host::Ip(self.address),
        )
    }
}

impl fmt::Display for AddressRefused {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.explain(None))
    }
}

impl StdError for AddressRefused {}

/// Resolves names with the system resolver and refuses any answer that
/// contains a non-public address (all of them, not just that one, so a
/// mixed answer cannot be used for DNS rebinding).
#[derive(Debug)]
struct PublicOnlyResolver;

impl Resolve for PublicOnlyResolver {
    fn resolve(&self, name: Name) -> Resolving {
        let host = name.as_str().to_owned();
        Box::pin(async move {
            let addrs: Vec<SocketAddr> =
                tokio::net::lookup_host((host.as_str(), 0)).await?.collect();
            if let Some((address, class)) = addrs
                .iter()
                .find_map(|addr| address_class(addr.ip()).map(|class| (addr.ip(), class)))
            {
                return Err(Box::new(AddressRefused {
                    host,
                    address,
                    class,
                }) as Box<dyn StdError + Send + Sync>);
            }
            Ok(Box::new(addrs.into_iter()) as Addrs)
        })
    }
}

/// How an [`HttpClient`] behaves.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HttpConfig {
    /// The largest response body, in bytes; protects the host from memory
    /// exhaustion by a hostile server. Default 10 MiB.
    pub max_body: u64,
    /// The deadline of one fetch, redirects and body included. Default 20 s.
    pub timeout: Duration,
    /// PEM certificates (or bundles) trusted in addition to the webpki
    /// roots. Default none.
    pub extra_roots: Vec<Vec<u8>>,
}

impl Default for HttpConfig {
    fn default() -> Self {
        Self {
            max_body: DEFAULT_MAX_BODY,
            timeout: DEFAULT_TIMEOUT,
            extra_roots: Vec::new(),
        }
    }
}

/// The request method.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Method {
    /// `GET`.
    Get,
    /// `HEAD`.
    Head,
    /// `POST`.
    Post,
    /// `PUT`.
    Put,
    /// `PATCH`.
    Patch,
    /// `DELETE`.
    Delete,
}

impl Method {
    fn to_reqwest(self) -> reqwest::Method {
        match self {
            Self::Get => reqwest::Method::GET,
            Self::Head => reqwest::Method::HEAD,
            Self::Post => reqwest::Method::POST,
            Self::Put => reqwest::Method::PUT,
            Self::Patch => reqwest::Method::PATCH,
            Self::Delete => reqwest::Method::DELETE,
        }
    }
}

/// A request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Request {
    /// The method.
    pub method: Method,
    /// An absolute `https://` URL.
    pub url: String,
    /// Request headers, `(name, value)`; names are case-insensitive.
    pub headers: Vec<(String, String)>,
    /// The body, if any.
    pub body: Option<Vec<u8>>,
}

impl Request {
    /// A `GET` of `url` without headers.
    pub fn get(url: impl Into<String>) -> Self {
        Self {
            method: Method::Get,
            url: url.into(),
            headers: Vec::new(),
            body: None,
        }
    }
}

/// A response; any status is a response, not an error.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Response {
    /// The HTTP status code.
    pub status: u16,
    /// Response headers, `(lowercase name, value)`; values lossily decoded.
    pub headers: Vec<(String, String)>,
    /// The body, at most the body cap.
    pub body: Vec<u8>,
}

/// The HTTPS client behind the `http` capability; build it once and share it.
///
/// It keeps connections open to at most [`MAX_POOLED_ORIGINS`] origins
/// (and 2 idle ones to each, for 30 s): a
/// request to one more origin starts an empty pool, and the connections of
/// the one it replaces close as their requests end.
#[derive(Debug, Clone)]
pub struct HttpClient {
    pool: Arc<std::sync::Mutex<Pool>>,
    config: HttpConfig,
}

/// One reqwest client (its connection pool) and the origins it has been
/// used for, as `(host, port as written)`: how reqwest keys its pool.
#[derive(Debug)]
struct Pool {
    client: reqwest::Client,
    origins: Vec<(String, Option<u16>)>,
}

impl HttpClient {
    /// Builds the client: rustls with the webpki roots plus
    /// `config.extra_roots`, no proxies, no cookies, no automatic redirects,
    /// and a resolver that refuses non-public addresses.
    ///
    /// # Errors
    ///
    /// [`CapabilityError::Invalid`] when an extra root is not a PEM
    /// certificate; [`CapabilityError::Failed`] when the TLS backend cannot
    /// be set up.
    pub fn new(config: HttpConfig) -> Result<Self, CapabilityError> {
        let client = build_client(&config)?;
        Ok(Self {
            pool: Arc::new(std::sync::Mutex::new(Pool {
                client,
                origins: Vec::new(),
            })),
            config,
        })
    }

    /// The reqwest client to send a request to `url` with: the pool's, or,
    /// when `url`'s origin would be one too many, a new one.
    fn client_for(&self, url: &Url) -> Result<reqwest::Client, CapabilityError> {
        let origin = (url.host_str().unwrap_or_default().to_owned(), url.port());
        let mut pool = self
            .pool
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if !pool.origins.contains(&origin) {
            if pool.origins.len() >= MAX_POOLED_ORIGINS {
                pool.client = build_client(&self.config)?;
                pool.origins.clear();
            }
            pool.origins.push(origin);
        }
        Ok(pool.client.clone())
    }

    /// The configuration the client was built with.
    pub fn config(&self) -> &HttpConfig {
        &self.config
    }

    /// Sends a request and waits for the whole response.
    ///
    /// # Errors
    ///
    /// [`CapabilityError::Denied`] (`http`) when the URL or a redirect hop
    /// breaks a rule (scheme, user info, origin, address) or a `Host` header
    /// disagrees with the URL; [`CapabilityError::Invalid`] for a malformed
    /// URL or header, or a header the host manages; [`CapabilityError::TooLarge`]
    /// when the body passes the cap (reading stops there);
    /// [`CapabilityError::Timeout`] when the deadline passes;
    /// [`CapabilityError::Failed`] for network and TLS errors or too many
    /// redirects.
    pub async fn fetch(
        &self,
        grant: &HttpGrant,
        request: Request,
    ) -> Result<Response, CapabilityError> {
        self.fetch_with_secrets(grant, request, &[]).await
    }

    /// [`HttpClient::fetch`], replacing the placeholders of `secrets` where
    /// the rules allow (see the module docs) and redacting their values from
    /// the response.
    ///
    /// # Errors
    ///
    /// As [`HttpClient::fetch`]; [`CapabilityError::Denied`] (`http`) also
    /// for a placeholder where none may be, or headed for an origin its
    /// secret is not bound to. No error holds a value.
    pub async fn fetch_with_secrets(
        &self,
        grant: &HttpGrant,
        request: Request,
        secrets: &[BoundSecret],
    ) -> Result<Response, CapabilityError> {
        let subject = request.url.clone();
        let query_allowed = |name: &str| {
            secrets
                .iter()
                .any(|secret| secret.name == name && secret.query)
        };
        secrets_used(&request, query_allowed)?;
        match tokio::time::timeout(
            self.config.timeout,
            self.fetch_within(grant, request, secrets),
        )
        .await
        {
            Ok(result) => result,
            Err(_) => Err(CapabilityError::Timeout {
                what: format!("fetch of `{subject}`"),
                ms: u64::try_from(self.config.timeout.as_millis()).unwrap_or(u64::MAX),
            }),
        }
    }

    async fn fetch_within(
        &self,
        grant: &HttpGrant,
        request: Request,
        secrets: &[BoundSecret],
    ) -> Result<Response, CapabilityError> {
        // `url` stays as the caller wrote it (placeholders, never values):
        // it is what errors quote and redirects are resolved against.
        let mut url = Url::parse(&request.url).map_err(|err| {
            CapabilityError::Invalid(format!("`{}` is not a valid URL: {err}", request.url))
        })?;
        let mut host = grant
            .check(&url)
            .map_err(|reason| CapabilityError::denied(Capability::Http, url.as_str(), reason))?;
        let mut headers = request_headers(&url, &host, &request.headers)?;
        let query_names = match url.query() {
            Some(query) => placeholder_names(query).unwrap_or_default(),
            None => Vec::new(),
        };
        let mut method = request.method;
        let mut body = request.body;
        let mut hops = 0usize;
        let mut from: Option<Url> = None;
        // The secrets sent so far: what the answer is cleaned of.
        let mut sent: Vec<&BoundSecret> = Vec::new();
        loop {
            let mut names = header_placeholders(&headers);
            if hops == 0 {
                names.extend(query_names.iter().cloned());
            }
            check_hop(&url, &names, secrets, from.as_ref())?;
            let carried: Vec<&BoundSecret> = secrets
                .iter()
                .filter(|secret| names.contains(&secret.name))
                .collect();
            for secret in &carried {
                if !sent.iter().any(|known| known.name == secret.name) {
                    sent.push(secret);
                }
            }
            // Only the caller's own query string carries a secret; a
            // redirect's URL is the server's.
            let mut sent_url = url.clone();
            if hops == 0
                && let Some(query) = url.query()
            {
                let too_long = || {
                    CapabilityError::Invalid(format!(
                        "the URL with its secrets put in is longer than the most allowed, {} \
                         bytes",
                        crate::capability::MAX_URL_BYTES
                    ))
                };
                let query = substitute(query, secrets, true, crate::capability::MAX_URL_BYTES)
                    .ok_or_else(too_long)?;
                sent_url.set_query(Some(&query));
                if sent_url.as_str().len() > crate::capability::MAX_URL_BYTES {
                    return Err(too_long());
                }
            }
            let mut sent_headers = substitute_headers(&headers, secrets)?;
            // From the first hop that carried one on: a same-origin
            // redirect may keep a query secret in the URL it names.
            if !sent.is_empty() {
                for name in ECHO_HIDING_HEADERS {
                    sent_headers.remove(*name);
                }
                append_header(
                    &mut sent_headers,
                    reqwest::header::ACCEPT_ENCODING,
                    HeaderValue::from_static("identity"),
                )?;
            }
            let mut builder = self
                .client_for(&sent_url)?
                .request(method.to_reqwest(), sent_url)
                .headers(sent_headers);
            if let Some(body) = &body {
                builder = builder.body(body.clone());
            }
            let response = builder
                .send()
                .await
                .map_err(|err| send_error(&url, &err.without_url()))?;
            check_connected(&url, &host, response.remote_addr())?;
            let status = response.status();
            let location = response
                .headers()
                .get(reqwest::header::LOCATION)
                .map(|value| String::from_utf8_lossy(value.as_bytes()).into_owned());
            let Some(location) = location.filter(|_| status.is_redirection()) else {
                // Cleaned of what was sent, and of what is bound where it
                // came from; not of every secret (each guess the guest
                // wrote would be tested).
                let cleaned: Vec<BoundSecret> = secrets
                    .iter()
                    .filter(|secret| {
                        secret.admits(&url) || sent.iter().any(|known| known.name == secret.name)
                    })
                    .cloned()
                    .collect();
                if !sent.is_empty() {
                    refuse_encoded(&url, &response)?;
                }
                return self.read_response(&url, response, &cleaned).await;
            };
            let location = redact(secrets, &location);
            // A secret this hop carried that the caller's query names (the
            // query goes out with the first hop only).
            let query_secret = carried
                .iter()
                .find(|secret| query_names.contains(&secret.name))
                .map(|secret| secret.name.clone());
            hops += 1;
            if hops > MAX_REDIRECTS {
                return Err(CapabilityError::Failed(format!(
                    "fetch of `{}` failed: more than {MAX_REDIRECTS} redirects",
                    request.url
                )));
            }
            let next = url.join(&location).map_err(|err| {
                // It may spell a query secret in a way redaction misses.
                let location = if query_secret.is_some() {
                    "(withheld: the request carried a secret in its query)"
                } else {
                    location.as_str()
                };
                CapabilityError::Failed(format!(
                    "fetch of `{url}` failed: the redirect to `{location}` is not a valid URL: {err}"
                ))
            })?;
            if next.origin() != url.origin() {
                // A secret sent in the query may come back in the server's
                // `Location` in any spelling (`%2f`, half-encoded): the
                // request stays with the origins it is bound to.
                if let Some(name) = query_secret.as_ref().filter(|_| hops == 1) {
                    return Err(CapabilityError::denied(
                        Capability::Http,
                        request.url.as_str(),
                        format!(
                            "a request with secret `{name}` in its query follows no redirect to \
                             another origin (`{}` redirected to `{}`)",
                            origin_of(&url),
                            origin_of(&next)
                        ),
                    ));
                }
            }
            let next_host = grant.check(&next).map_err(|reason| {
                let reason = if next.scheme() == "http" && url.scheme() == "https" {
                    format!("{reason}; a redirect may not downgrade https to http")
                } else {
                    reason
                };
                CapabilityError::denied(
                    Capability::Http,
                    next.as_str(),
                    format!("{reason} (redirected from `{url}`)"),
                )
            })?;
            // As browsers do: 303, and 301/302 after a POST, become a GET without body.
            let code = status.as_u16();
            if code == 303 || (matches!(code, 301 | 302) && method == Method::Post) {
                if method != Method::Head {
                    method = Method::Get;
                }
                body = None;
                headers.remove(reqwest::header::CONTENT_TYPE);
            }
            if next.origin() != url.origin() {
                // A placeholder bound elsewhere refuses the hop (above, on
                // the next turn) even in a header that would be dropped here.
                check_hop(&next, &header_placeholders(&headers), secrets, Some(&url))?;
                for name in CREDENTIAL_HEADERS {
                    headers.remove(*name);
                }
            }
            from = Some(url);
            url = next;
            host = next_host;
        }
    }

    async fn read_response(
        &self,
        url: &Url,
        mut response: reqwest::Response,
        secrets: &[BoundSecret],
    ) -> Result<Response, CapabilityError> {
        let limit = self.config.max_body;
        let too_large = || CapabilityError::TooLarge {
            what: format!("response body of `{url}`"),
            limit,
        };
        if response
            .content_length()
            .is_some_and(|length| length > limit)
        {
            return Err(too_large());
        }
        let status = response.status().as_u16();
        let in_names = lowercased(secrets);
        let headers = response
            .headers()
            .iter()
            .map(|(name, value)| {
                (
                    redact(&in_names, name.as_str()),
                    redact(secrets, &String::from_utf8_lossy(value.as_bytes())),
                )
            })
            .collect();
        let mut body = Vec::new();
        while let Some(chunk) = response
            .chunk()
            .await
            .map_err(|err| send_error(url, &err.without_url()))?
        {
            let length = u64::try_from(body.len().saturating_add(chunk.len())).unwrap_or(u64::MAX);
            if length > limit {
                return Err(too_large());
            }
            body.extend_from_slice(&chunk);
        }
        Ok(Response {
            status,
            headers,
            body: redact_bytes(secrets, body),
        })
    }
}

/// A reqwest client as [`HttpClient::new`] describes it.
fn build_client(config: &HttpConfig) -> Result<reqwest::Client, CapabilityError> {
    let mut builder = reqwest::Client::builder()
        .use_rustls_tls()
        .no_proxy()
        .redirect(reqwest::redirect::Policy::none())
        .referer(false)
        .https_only(true)
        .dns_resolver(Arc::new(PublicOnlyResolver))
        .connect_timeout(config.timeout)
        .pool_max_idle_per_host(MAX_IDLE_PER_ORIGIN)
        .pool_idle_timeout(IDLE_TIMEOUT)
        .user_agent(concat!("zotbox/", env!("CARGO_PKG_VERSION")));
    for (index, pem) in config.extra_roots.iter().enumerate() {
        let certificates = reqwest::Certificate::from_pem_bundle(pem).map_err(|err| {
            CapabilityError::Invalid(format!(
                "extra root certificate #{} is not valid PEM: {err}",
                index + 1
            ))
        })?;
        if certificates.is_empty() {
            return Err(CapabilityError::Invalid(format!(
                "extra root certificate #{} holds no certificate",
                index + 1
            )));
        }
        for certificate in certificates {
            builder = builder.add_root_certificate(certificate);
        }
    }
    builder.build().map_err(|err| {
        CapabilityError::Failed(format!(
            "cannot set up the HTTPS client: {}",
            crate::text::chain(&err)
        ))
    })
}

/// `scheme://host[:port]` of `url`, for messages that must not quote its
/// path or query.
fn origin_of(url: &Url) -> String {
    url.origin().ascii_serialization()
}

/// Refuses the answer to a fetch that sent a secret when it is encoded
/// (`Content-Encoding` other than `identity`): the host does not decode it,
/// so an echo of the value in it would pass redaction.
fn refuse_encoded(url: &Url, response: &reqwest::Response) -> Result<(), CapabilityError> {
    let encoding = response
        .headers()
        .get_all(reqwest::header::CONTENT_ENCODING)
        .iter()
        .map(|value| {
            String::from_utf8_lossy(value.as_bytes())
                .trim()
                .to_ascii_lowercase()
        })
        .find(|encoding| !encoding.is_empty() && encoding != "identity");
    match encoding {
        Some(encoding) => Err(CapabilityError::Failed(format!(
            "fetch of `{url}` failed: the answer to a request carrying a secret is encoded \
             (`{}`), which would hide an echo of the secret from redaction; the host asked \
             for none",
            crate::text::Shown(&encoding)
        ))),
        None => Ok(()),
    }
}

/// The secret names of the placeholders in header values.
fn header_placeholders(headers: &HeaderMap) -> Vec<String> {
    headers
        .values()
        .filter_map(|value| value.to_str().ok())
        .flat_map(|value| placeholder_names(value).unwrap_or_default())
        .collect()
}

/// `headers` with the placeholders in their values replaced, each such
/// value marked sensitive (never logged, never compressed by index).
///
/// The header block's cap holds for what is sent, too: counted with the
/// placeholders, a short `{{secret:K}}` in every header would send a long
/// secret's length over the cap to its origin.
fn substitute_headers(
    headers: &HeaderMap,
    secrets: &[BoundSecret],
) -> Result<HeaderMap, CapabilityError> {
    let mut sent = HeaderMap::with_capacity(headers.len());
    let mut block = 0usize;
    for (name, value) in headers {
        let text = value.to_str().unwrap_or_default();
        let value = if text.contains(PLACEHOLDER_OPEN) {
            let put_in = substitute(text, secrets, false, crate::capability::MAX_HEADER_BYTES)
                .ok_or_else(|| {
                    CapabilityError::Invalid(format!(
                        "the request's header block with its secrets put in is longer than \
                         the most allowed, {} bytes",
                        crate::capability::MAX_HEADER_BYTES
                    ))
                })?;
            let mut value = HeaderValue::from_str(&put_in).map_err(|_| {
                CapabilityError::Invalid(format!(
                    "the value of header `{name}` is not valid once its secret is put in"
                ))
            })?;
            value.set_sensitive(true);
            value
        } else {
            value.clone()
        };
        block = block.saturating_add(name.as_str().len() + value.len());
        crate::capability::within_size(
            "the request's header block with its secrets put in",
            block,
            crate::capability::MAX_HEADER_BYTES,
        )?;
        append_header(&mut sent, name.clone(), value)?;
    }
    Ok(sent)
}

/// Appends a header, refusing rather than panicking past the most names a
/// [`HeaderMap`] holds (out of reach under the header block's cap today;
/// this keeps it so whatever the cap becomes).
fn append_header(
    map: &mut HeaderMap,
    name: HeaderName,
    value: HeaderValue,
) -> Result<(), CapabilityError> {
    map.try_append(name, value)
        .map(drop)
        .map_err(|_| CapabilityError::Invalid("the request has too many headers".to_owned()))
}

/// Validates the caller's headers: well-formed, none the host manages, and
/// a `Host` only if it agrees with the URL (then it is dropped as redundant).
fn request_headers(
    url: &Url,
    host: &Host,
    headers: &[(String, String)],
) -> Result<HeaderMap, CapabilityError> {
    let mut map = HeaderMap::new();
    for (name, value) in headers {
        let header = HeaderName::from_bytes(name.as_bytes()).map_err(|_| {
            CapabilityError::Invalid(format!(
                "`{}` is not a valid header name",
                name.escape_default()
            ))
        })?;
        let value = HeaderValue::from_str(value).map_err(|_| {
            CapabilityError::Invalid(format!(
                "the value of header `{header}` is not valid (control characters such as CR/LF \
                 are not allowed)"
            ))
        })?;
        if header == reqwest::header::HOST {
            let expected = match url.port() {
                Some(port) => format!("{host}:{port}"),
                None => host.to_string(),
            };
            let given = String::from_utf8_lossy(value.as_bytes()).to_ascii_lowercase();
            if given != expected && given != host.to_string() {
                return Err(CapabilityError::denied(
                    Capability::Http,
                    url.as_str(),
                    format!("header `Host: {given}` does not match the URL's host `{expected}`"),
                ));
            }
            continue;
        }
        if MANAGED_HEADERS.contains(&header.as_str()) {
            return Err(CapabilityError::Invalid(format!(
                "header `{header}` is managed by the host and may not be set"
            )));
        }
        append_header(&mut map, header, value)?;
    }
    Ok(map)
}

/// Defence in depth: the address actually connected to must be allowed too.
fn check_connected(
    url: &Url,
    host: &Host,
    remote: Option<SocketAddr>,
) -> Result<(), CapabilityError> {
    let denied = |reason: String| CapabilityError::denied(Capability::Http, url.as_str(), reason);
    let Some(remote) = remote else {
        return Err(denied(
            "the address connected to is unknown, so it cannot be checked".to_owned(),
        ));
    };
    let ip = match remote.ip() {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(IpAddr::V6(v6), IpAddr::V4),
        v4 => v4,
    };
    match host {
        Host::Ip(expected) if *expected == ip || *expected == remote.ip() => Ok(()),
        Host::Ip(expected) => Err(denied(format!(
            "connected to `{ip}`, not the granted address `{expected}`"
        ))),
        Host::Name(name) => match address_class(ip) {
            None => Ok(()),
            Some(class) => Err(denied(format!(
                "connected to `{ip}` for `{name}`, {} {class} address; names may only reach \
                 public addresses",
                article(class)
            ))),
        },
    }
}

/// Maps a send error; a refusal by the resolver becomes a `Denied`.
fn send_error(url: &Url, err: &reqwest::Error) -> CapabilityError {
    let mut source: Option<&(dyn StdError + 'static)> = Some(err);
    while let Some(current) = source {
        if let Some(refused) = current.downcast_ref::<AddressRefused>() {
            let explained = refused.explain(url.port());
            return CapabilityError::denied(Capability::Http, url.as_str(), explained);
        }
        source = current.source();
    }
    CapabilityError::Failed(format!(
        "fetch of `{url}` failed: {}",
        crate::text::chain(err)
    ))
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    // The tests against a real HTTPS server (fetches, redirects, caps,
    // headers, proxy variables) are e2e tests: `tests/e2e/http_client.rs`.
    use super::*;

    #[test]
    fn wildcard_and_port_matching() {
        let grant = HttpGrant::new(&[
            "https://*.example.com".to_owned(),
            "https://api.open-meteo.com".to_owned(),
            "https://localhost:9000".to_owned(),
            "https://[::1]:8443".to_owned(),
        ])
        .unwrap();
        let cases = [
            // A subdomain matches `*.example.com`, at any depth.
            ("https://sub.example.com/x", true),
            ("https://a.b.example.com/", true),
            // Case does not matter in hosts.
            ("https://SUB.Example.COM/", true),
            // The domain itself does not.
            ("https://example.com/", false),
            // Attack: a suffix that is not a subdomain.
            ("https://evilexample.com/", false),
            // Attack: the granted domain as a prefix of another.
            ("https://sub.example.com.evil.net/", false),
            // No port in the grant means 443 only.
            ("https://sub.example.com:443/", true),
            ("https://sub.example.com:8443/", false),
            ("https://api.open-meteo.com/v1/forecast?x=1", true),
            ("https://open-meteo.com/", false),
            // A port in the grant is the only port.
            ("https://localhost:9000/", true),
            ("https://localhost/", false),
            ("https://[::1]:8443/", true),
            ("https://[::1]/", false),
        ];
        for (url, allowed) in cases {
            let result = grant.check(&Url::parse(url).unwrap());
            assert_eq!(result.is_ok(), allowed, "{url}: {result:?}");
        }
        // An empty grant allows nothing.
        assert!(
            HttpGrant::none()
                .check(&Url::parse("https://sub.example.com/").unwrap())
                .is_err()
        );
    }

    #[test]
    fn placeholders_are_found_only_where_a_secret_may_go() {
        let request = |url: &str, headers: &[(&str, &str)], body: Option<&str>| Request {
            method: Method::Post,
            url: url.to_owned(),
            headers: headers
                .iter()
                .map(|(n, v)| ((*n).to_owned(), (*v).to_owned()))
                .collect(),
            body: body.map(|b| b.as_bytes().to_vec()),
        };
        let query_ok = |name: &str| name == "Q";
        let cases: [(Request, Result<Vec<&str>, &str>); 12] = [
            // Header values, each name once.
            (
                request(
                    "https://a.dev/x",
                    &[
                        ("Authorization", "Bearer {{secret:K}}"),
                        ("X", "{{secret:K}}"),
                    ],
                    None,
                ),
                Ok(vec!["K"]),
            ),
            // The query string of a secret allowed there.
            (
                request("https://a.dev/x?k={{secret:Q}}", &[], None),
                Ok(vec!["Q"]),
            ),
            // Attack: the query string of one bound to headers only.
            (
                request("https://a.dev/x?k={{secret:K}}", &[], None),
                Err("secret `K` may not be used in the query string"),
            ),
            // Attack: the path, host, user info and fragment are not the query.
            (
                request("https://a.dev/{{secret:Q}}", &[], None),
                Err("secret `Q` may not be used in the URL outside its query string"),
            ),
            (
                request("https://{{secret:Q}}@a.dev/", &[], None),
                Err("outside its query string"),
            ),
            (
                request("https://a.dev/?x=1#{{secret:Q}}", &[], None),
                Err("outside its query string"),
            ),
            // Attack: a `?` after the fragment does not start a query.
            (
                request("https://a.dev/#x?k={{secret:Q}}", &[], None),
                Err("outside its query string"),
            ),
            // Attack: the body, which the server may echo or store.
            (
                request("https://a.dev/", &[], Some("{\"k\":\"{{secret:K}}\"}")),
                Err("secret `K` may not be used in a request body"),
            ),
            // A malformed placeholder is refused, not sent as it is.
            (
                request("https://a.dev/", &[("X", "{{secret:K")], None),
                Err("a secret placeholder is malformed"),
            ),
            // Attack: a tab or a line break hides a placeholder from the
            // scan, and parsing the URL drops it, which makes one of it in
            // the query string sent.
            (
                request("https://a.dev/?k={{sec\tret:K}}", &[], None),
                Err("is not a valid URL: it holds the control character \\u{9}"),
            ),
            (
                request("https://a.dev/?k={{secret:K\n}}", &[], None),
                Err("it holds the control character \\u{a}"),
            ),
            (
                request("https://a.dev/\r?k=1", &[], None),
                Err("it holds the control character \\u{d}"),
            ),
        ];
        for (request, expected) in cases {
            let got = secrets_used(&request, query_ok);
            match (&got, expected) {
                (Ok(names), Ok(expected)) => assert_eq!(names, &expected, "{}", request.url),
                (Err(CapabilityError::Denied { reason, .. }), Err(words))
                | (Err(CapabilityError::Invalid(reason)), Err(words)) => {
                    assert!(reason.contains(words), "{}: {reason}", request.url);
                }
                _ => panic!("{}: {got:?}", request.url),
            }
        }
    }

    /// Attack: a value ending in `{` completes, once substituted, the
    /// placeholder of a second secret the hop's check never saw (the text
    /// scanned held only the first). One pass: a value is never read again.
    #[test]
    fn a_substituted_value_is_never_read_as_a_placeholder() {
        let bound = |name: &str, value: &str| {
            BoundSecret::new(name, value.to_owned(), &["https://a.dev".to_owned()], false).unwrap()
        };
        let secrets = [bound("A", "pass{"), bound("B", "sk-live-value")];
        assert_eq!(
            substitute("{{secret:A}}{secret:B}}", &secrets, false, usize::MAX).as_deref(),
            Some("pass{{secret:B}}")
        );
        assert_eq!(
            substitute(
                "x {{secret:B}} {{secret:C}} {{secret:A}}",
                &secrets,
                false,
                usize::MAX
            )
            .as_deref(),
            Some("x sk-live-value {{secret:C}} pass{")
        );
        // What writers make of an echo: `\/`, lowercase `%xx`.
        let secrets = [bound("K", "a+b/c d=")];
        assert_eq!(
            redact(&secrets, "a+b\\/c d= a%2bb%2fc%20d%3d"),
            "[redacted secret K] [redacted secret K]"
        );
    }

    /// Attack: the header block's cap counted the placeholders, so a short
    /// `{{secret:K}}` in every header sent a long secret's length over the
    /// cap, again and again, to its origin.
    #[test]
    fn the_header_cap_counts_the_secrets_put_in() {
        let secret =
            BoundSecret::new("K", "s".repeat(4096), &["https://a.dev".to_owned()], false).unwrap();
        let url = Url::parse("https://a.dev/").unwrap();
        let host = Host::Name("a.dev".to_owned());
        let headers = |count: usize| -> Vec<(String, String)> {
            (0..count)
                .map(|at| (format!("x-h{at:02}"), "{{secret:K}}".to_owned()))
                .collect()
        };
        // Within the cap put in (15 × 4101 bytes); fifty are within it as
        // written (50 × 17), not put in.
        let written = request_headers(&url, &host, &headers(15)).unwrap();
        let sent = substitute_headers(&written, std::slice::from_ref(&secret)).unwrap();
        assert_eq!(sent.len(), 15);
        assert!(
            sent.values()
                .all(|value| value.is_sensitive() && value.len() == 4096)
        );
        let written = request_headers(&url, &host, &headers(50)).unwrap();
        let Err(CapabilityError::Invalid(reason)) =
            substitute_headers(&written, std::slice::from_ref(&secret))
        else {
            panic!("sent past the cap");
        };
        // The sixteenth header is the one past 64 KiB: 16 × (5 + 4096).
        assert_eq!(
            reason,
            "the request's header block with its secrets put in is 65616 bytes; the most is 65536"
        );
    }

    #[test]
    fn a_value_is_redacted_as_written_and_percent_encoded() {
        let secret = BoundSecret::new(
            "K",
            "a+b/c d=".to_owned(),
            &["https://a.dev".to_owned()],
            true,
        )
        .unwrap();
        let secrets = [secret];
        assert_eq!(percent_encode("a+b/c d="), "a%2Bb%2Fc%20d%3D");
        assert_eq!(
            redact(&secrets, "x=a+b/c d=&y=a%2Bb%2Fc%20d%3D"),
            "x=[redacted secret K]&y=[redacted secret K]"
        );
        assert_eq!(
            redact_bytes(&secrets, b"\xffa+b/c d=\xff".to_vec()),
            b"\xff[redacted secret K]\xff".to_vec()
        );
        // Substitution encodes only where asked (the query string).
        assert_eq!(
            substitute("{{secret:K}}", &secrets, true, usize::MAX).as_deref(),
            Some("a%2Bb%2Fc%20d%3D")
        );
        assert_eq!(
            substitute("Bearer {{secret:K}}", &secrets, false, usize::MAX).as_deref(),
            Some("Bearer a+b/c d=")
        );
        // Past `at_most`, nothing: the value is not built whole.
        assert_eq!(
            substitute(&"{{secret:K}}".repeat(1000), &secrets, true, 64),
            None
        );
        // `Debug` never shows the value.
        assert!(!format!("{secrets:?}").contains("a+b"));
        // Bound to its origin alone: same host and port.
        for (url, admitted) in [
            ("https://a.dev/x", true),
            ("https://A.dev:443/x", true),
            ("https://a.dev:8443/x", false),
            ("https://b.a.dev/x", false),
            ("http://a.dev/x", false),
        ] {
            assert_eq!(
                secrets[0].admits(&Url::parse(url).unwrap()),
                admitted,
                "{url}"
            );
        }
    }

    #[test]
    fn bad_origins_are_invalid() {
        let cases = [
            // Only https may be granted.
            ("http://example.com", "must start with `https://`"),
            ("example.com", "must start with `https://`"),
            // Origins, not URLs.
            ("https://example.com/api", "must not have a path"),
            ("https://user@example.com", "must not have user info"),
            // Wildcards only as the whole first label.
            ("https://*", "may only use `*` as the whole first label"),
            ("https://exa mple.com", "has an invalid host"),
            (
                "https://a.*.com",
                "may only use `*` as the whole first label",
            ),
            ("https://*.1.2.3.4", "wildcard on an IP address"),
            // Ports in range.
            ("https://example.com:0", "invalid port"),
            ("https://example.com:99999", "invalid port"),
            ("https://[::1", "unclosed"),
        ];
        for (origin, words) in cases {
            match HttpGrant::new(&[origin.to_owned()]) {
                Err(CapabilityError::Invalid(message)) => {
                    assert!(message.contains(words), "{origin}: `{message}`");
                }
                other => panic!("{origin}: {other:?}"),
            }
        }
    }

    #[test]
    fn address_classes() {
        let cases: [(&str, Option<&str>); 34] = [
            // Public addresses pass.
            ("93.184.216.34", None),
            ("1.1.1.1", None),
            ("2606:4700:4700::1111", None),
            ("172.32.0.1", None),
            ("100.128.0.1", None),
            // Loopback.
            ("127.0.0.1", Some("loopback")),
            ("127.255.255.254", Some("loopback")),
            ("::1", Some("loopback")),
            // RFC 1918 private ranges, edges included.
            ("10.0.0.1", Some("private")),
            ("172.16.0.1", Some("private")),
            ("172.31.255.255", Some("private")),
            ("192.168.1.1", Some("private")),
            // IPv6 unique local.
            ("fc00::1", Some("private (unique local)")),
            ("fd12:3456::1", Some("private (unique local)")),
            // Link-local.
            ("169.254.1.1", Some("link-local")),
            ("fe80::1", Some("link-local")),
            // Cloud metadata services (AWS, GCP, Azure share the v4 one).
            ("169.254.169.254", Some("cloud metadata")),
            ("fd00:ec2::254", Some("cloud metadata")),
            // Unspecified.
            ("0.0.0.0", Some("unspecified")),
            ("::", Some("unspecified")),
            ("0.1.2.3", Some("unspecified (this network)")),
            // Multicast and broadcast.
            ("224.0.0.1", Some("multicast")),
            ("ff02::1", Some("multicast")),
            ("255.255.255.255", Some("broadcast")),
            // CGNAT shared space.
            ("100.64.0.1", Some("shared (CGNAT)")),
            ("100.127.255.255", Some("shared (CGNAT)")),
            // IPv4 hidden in IPv6: mapped, compatible, NAT64, 6to4.
            ("::ffff:127.0.0.1", Some("loopback")),
            ("::ffff:169.254.169.254", Some("cloud metadata")),
            ("::ffff:10.1.2.3", Some("private")),
            ("::127.0.0.1", Some("loopback")),
            ("64:ff9b::10.0.0.1", Some("private")),
            ("2002:7f00:1::", Some("loopback")),
            // Reserved and documentation ranges.
            ("240.0.0.1", Some("reserved")),
            ("2001:db8::1", Some("documentation")),
        ];
        for (address, expected) in cases {
            let ip: IpAddr = address.parse().unwrap();
            assert_eq!(address_class(ip), expected, "{address}");
        }
    }
}
