//! URLs that may carry credentials in their user information (`user:password@`, as a
//! clouds.yaml `auth_url` may): [`mask_url`] prints them masked, and [`CredentialUrl`] holds
//! one so that it can be printed no other way. Its own file: the guard's errors and its
//! clouds.yaml reader both hold such URLs, and neither may use the other.

use std::fmt;

/// A URL that may hold credentials in its user information (clouds.yaml `auth_url`, a URL
/// being reported): it prints only through [`mask_url`], so no message, log field or error
/// can show it unmasked; the one request that needs it calls [`CredentialUrl::expose`].
#[derive(Clone, PartialEq, Eq)]
pub struct CredentialUrl(String);

impl CredentialUrl {
    /// Wraps a URL as written.
    pub fn new(url: String) -> Self {
        Self(url)
    }

    /// The URL as written, for the request that is sent to it (never for a message).
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for CredentialUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&mask_url(&self.0))
    }
}

impl fmt::Debug for CredentialUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:?}", mask_url(&self.0))
    }
}

/// What [`mask_url`] prints for text it cannot read as an http(s) URL: nothing of it.
pub const UNREADABLE_URL: &str = "<not an http(s) URL, not shown>";

/// `url` for messages and logs, with any user information (`user:password@`) replaced by
/// `***@`, whatever it contains.
///
/// Read by a URL parser (WHATWG, the `url` crate), never by scanning for the end of the
/// authority: a password may hold `/`, `?`, `#`, `@` or percent-escapes, which end the
/// authority in any parser's reading (so the whole URL may not even parse). So every `@`
/// counts: everything between `http(s)://` and the *last* `@` of the text is masked, and what
/// follows it must parse as an http(s) URL with a host; it is shown as the parser writes it.
/// Text that does not (no scheme, another scheme, no host, garbage, a non-ASCII host) is
/// masked whole (`UNREADABLE_URL`): it is never printed raw.
pub fn mask_url(url: &str) -> String {
    let url = url.trim();
    let Some((scheme, after)) = url.split_once("://") else {
        return UNREADABLE_URL.to_owned();
    };
    if !(scheme.eq_ignore_ascii_case("https") || scheme.eq_ignore_ascii_case("http")) {
        return UNREADABLE_URL.to_owned();
    }
    let (had_user, rest) = match after.rfind('@') {
        Some(at) => (true, &after[at + 1..]),
        None => (false, after),
    };
    let Some(parsed) = web_url(&format!("{scheme}://{rest}")) else {
        return UNREADABLE_URL.to_owned();
    };
    let shown: String = parsed.into();
    match (had_user, shown.find("://")) {
        (true, Some(i)) => format!("{}***@{}", &shown[..i + 3], &shown[i + 3..]),
        _ => shown,
    }
}

/// `text` parsed as an http(s) URL with a non-empty host.
fn web_url(text: &str) -> Option<url::Url> {
    let parsed = url::Url::parse(text).ok()?;
    let web = matches!(parsed.scheme(), "http" | "https");
    (web && parsed.host_str().is_some_and(|h| !h.is_empty())).then_some(parsed)
}
