//! [`RedactedUrl`]: every URL or endpoint the exporter is given (flags,
//! their variables, `--config`, `replay`'s `--prometheus.url`) is held in
//! this one type, whose `Display`, `Debug` and `Serialize` never show the
//! user information (`user:pass@`). The redaction works on the text, before
//! and without parsing, so a URL that does not parse (a bad port, `@@`, an
//! `ftp://` scheme, no scheme at all) is shown without its password too; the
//! text as given is reachable only through
//! [`RedactedUrl::expose_for_request`], called where a request is built.
//! Error texts of the HTTP and gRPC stacks, which may quote the URL, go
//! through [`RedactedUrl::scrub`].

use std::borrow::Cow;
use std::fmt;

/// What stands for the user information in everything the exporter writes.
pub const REDACTED: &str = "<redacted>";

/// A URL or endpoint as given, shown without its credentials.
#[derive(Clone, PartialEq, Eq)]
pub struct RedactedUrl {
    raw: String,
    shown: String,
}

impl RedactedUrl {
    /// Hold `raw`; what it shows is computed once, here.
    pub fn new(raw: impl Into<String>) -> Self {
        let raw = raw.into();
        let shown = redact_whole(&raw);
        RedactedUrl { raw, shown }
    }

    /// The text as given, credentials included: for building a request
    /// (reqwest, the etcd client) and nothing else. Never format it.
    pub fn expose_for_request(&self) -> &str {
        &self.raw
    }

    /// The text as shown: the user information replaced by `<redacted>`.
    pub fn redacted(&self) -> &str {
        &self.shown
    }

    /// Whether the user information is not empty (something was redacted).
    pub fn has_credentials(&self) -> bool {
        self.shown != self.raw
    }

    /// The same URL without surrounding whitespace.
    pub fn trimmed(&self) -> RedactedUrl {
        RedactedUrl::new(self.raw.trim())
    }

    /// The same URL without trailing `/`.
    pub fn without_trailing_slash(&self) -> RedactedUrl {
        RedactedUrl::new(self.raw.trim_end_matches('/'))
    }

    /// The URL with `suffix` appended (a path, a query).
    pub fn join(&self, suffix: &str) -> RedactedUrl {
        RedactedUrl::new(format!("{}{suffix}", self.raw))
    }

    /// Whether the text starts with `prefix` (a scheme such as `https://`).
    pub fn starts_with(&self, prefix: &str) -> bool {
        self.raw.starts_with(prefix)
    }

    /// Whether the text contains a character matching `pat`.
    pub fn contains(&self, pat: impl Fn(char) -> bool) -> bool {
        self.raw.contains(pat)
    }

    /// The URL parsed, or why it does not parse; an absolute http(s) URL
    /// only. The parse error's text does not quote the input.
    pub fn parse_http(&self) -> Result<HttpUrl, UrlProblem> {
        let url = reqwest::Url::parse(&self.raw).map_err(|e| UrlProblem::Parse(e.to_string()))?;
        if !matches!(url.scheme(), "http" | "https") {
            return Err(UrlProblem::Scheme);
        }
        Ok(HttpUrl(url))
    }

    /// `text` (an error message of a library that may quote this URL) with
    /// this URL's user information removed wherever it appears, however
    /// the library spelt the URL around it, and the user information of any
    /// other `scheme://user@host` in it too.
    pub fn scrub<'a>(&self, text: &'a str) -> Cow<'a, str> {
        let generic = redact_in_text(text);
        match userinfo(&self.raw) {
            Some(secret) if !secret.is_empty() && generic.contains(secret) => {
                Cow::Owned(generic.replace(secret, REDACTED))
            }
            _ => generic,
        }
    }
}

/// A parsed http(s) URL: what a connection needs (host, port), never its
/// credentials.
pub struct HttpUrl(reqwest::Url);

impl HttpUrl {
    /// Whether the path is empty or `/` (etcd's `--listen-metrics-urls`
    /// spelling, to which `/metrics` is added).
    pub fn has_empty_path(&self) -> bool {
        matches!(self.0.path(), "" | "/")
    }

    /// The host (without IPv6 brackets) and the port (or the scheme's).
    pub fn host_and_port(&self) -> Option<(String, u16)> {
        let host = self
            .0
            .host_str()?
            .trim_start_matches('[')
            .trim_end_matches(']')
            .to_string();
        Some((host, self.0.port_or_known_default()?))
    }
}

/// Why a URL is not an absolute http(s) URL.
#[derive(Debug, thiserror::Error)]
pub enum UrlProblem {
    /// The parser's reason (`invalid port number`), which quotes nothing.
    #[error("{0}")]
    Parse(String),
    #[error("the scheme must be http or https")]
    Scheme,
}

impl fmt::Display for RedactedUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.shown)
    }
}

impl fmt::Debug for RedactedUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&self.shown, f)
    }
}

impl std::str::FromStr for RedactedUrl {
    type Err = std::convert::Infallible;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Ok(RedactedUrl::new(s))
    }
}

impl From<&str> for RedactedUrl {
    fn from(s: &str) -> Self {
        RedactedUrl::new(s)
    }
}

impl From<String> for RedactedUrl {
    fn from(s: String) -> Self {
        RedactedUrl::new(s)
    }
}

impl serde::Serialize for RedactedUrl {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.shown)
    }
}

impl<'de> serde::Deserialize<'de> for RedactedUrl {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        String::deserialize(d).map(RedactedUrl::new)
    }
}

/// `text` (a parser's message quoting lines of a file that holds URLs, in
/// whatever spelling: with or without a scheme, quoted, in flow style) with
/// everything before the last `@` of every word that has one replaced, the
/// word's leading punctuation and any `scheme://` kept: a URL that did not
/// parse is still redacted. An `e-mail@address` loses its local part.
pub fn scrub_quoted_lines(text: &str) -> Cow<'_, str> {
    if !text.contains('@') {
        return Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len());
    let mut word_start = None;
    let flush = |out: &mut String, word: &str| match word.rfind('@') {
        None => out.push_str(word),
        Some(at) => {
            let lead = word
                .find(|c: char| c.is_alphanumeric())
                .unwrap_or(0)
                .min(at);
            let start = word[lead..at].find("://").map_or(lead, |i| lead + i + 3);
            out.push_str(&word[..start]);
            out.push_str(REDACTED);
            out.push_str(&word[at..]);
        }
    };
    for (i, c) in text.char_indices() {
        if c.is_whitespace() {
            if let Some(s) = word_start.take() {
                flush(&mut out, &text[s..i]);
            }
            out.push(c);
        } else if word_start.is_none() {
            word_start = Some(i);
        }
    }
    if let Some(s) = word_start {
        flush(&mut out, &text[s..]);
    }
    Cow::Owned(out)
}

/// Where the user information of `raw`, taken as one URL, begins: after
/// the first `://`, or at the start when there is none
/// (`user:pass@host:2379`).
fn authority_start(raw: &str) -> usize {
    raw.find("://").map_or(0, |i| i + 3)
}

/// The user information of `raw` taken as one URL: everything from the
/// authority's start to its last `@`. The last `@` of the whole text, not
/// of the authority as a parser would delimit it: a password with a raw `/`,
/// `?` or `#` in it does not parse, and must not be shown either. A URL
/// with an `@` in its path or query loses its host in what is shown; it
/// never shows a secret.
fn userinfo(raw: &str) -> Option<&str> {
    let start = authority_start(raw);
    let at = raw[start..].rfind('@')?;
    Some(&raw[start..start + at])
}

fn redact_whole(raw: &str) -> String {
    match userinfo(raw) {
        None => raw.to_string(),
        Some(info) => {
            let start = authority_start(raw);
            format!("{}{REDACTED}{}", &raw[..start], &raw[start + info.len()..])
        }
    }
}

/// `text` with the user information of every `scheme://user@host` in it
/// (up to the first `/`, `?`, `#`, space or quote after `://`) replaced:
/// for texts that quote URLs among other words.
fn redact_in_text(text: &str) -> Cow<'_, str> {
    if !text.contains("://") || !text.contains('@') {
        return Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(i) = rest.find("://") {
        let (head, tail) = rest.split_at(i + 3);
        out.push_str(head);
        let end = tail
            .find(|c: char| {
                matches!(c, '/' | '?' | '#' | '`' | '"' | '\'' | ')' | ']' | ',')
                    || c.is_whitespace()
            })
            .unwrap_or(tail.len());
        let authority = &tail[..end];
        match authority.rfind('@') {
            Some(at) => {
                out.push_str(REDACTED);
                out.push_str(&authority[at..]);
            }
            None => out.push_str(authority),
        }
        rest = &tail[end..];
    }
    out.push_str(rest);
    Cow::Owned(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shown(raw: &str) -> String {
        RedactedUrl::new(raw).to_string()
    }

    #[test]
    fn userinfo_is_redacted_whether_or_not_the_url_parses() {
        let cases = [
            (
                "http://user:S3cret@127.0.0.1:2379",
                "http://<redacted>@127.0.0.1:2379",
            ),
            (
                "http://user:S3cret@127.0.0.1:bad/ok",
                "http://<redacted>@127.0.0.1:bad/ok",
            ),
            (
                "http://u:S3cret@@127.0.0.1:x1",
                "http://<redacted>@127.0.0.1:x1",
            ),
            ("ftp://u:S3cret@127.0.0.1:1", "ftp://<redacted>@127.0.0.1:1"),
            ("user:S3cret@127.0.0.1:2379", "<redacted>@127.0.0.1:2379"),
            ("http://u:S3/cr?et#x@h/m", "http://<redacted>@h/m"),
            ("http://p%40ss@h", "http://<redacted>@h"),
            (
                "http://127.0.0.1:2381/metrics",
                "http://127.0.0.1:2381/metrics",
            ),
            ("", ""),
        ];
        for (raw, want) in cases {
            assert_eq!(shown(raw), want, "{raw}");
            assert_eq!(format!("{:?}", RedactedUrl::new(raw)), format!("{want:?}"));
            assert!(!shown(raw).contains("S3"), "{raw}");
        }
        let u = RedactedUrl::new("http://user:S3cret@h:1/x");
        assert_eq!(u.expose_for_request(), "http://user:S3cret@h:1/x");
        assert_eq!(
            serde_json::to_string(&u).unwrap(),
            "\"http://<redacted>@h:1/x\""
        );
        assert!(u.has_credentials());
        assert!(!RedactedUrl::new("http://h:1/x").has_credentials());
    }

    #[test]
    fn derived_urls_stay_redacted() {
        let u = RedactedUrl::new(" http://u:S3cret@h:1/ ")
            .trimmed()
            .without_trailing_slash()
            .join("/healthz");
        assert_eq!(u.expose_for_request(), "http://u:S3cret@h:1/healthz");
        assert_eq!(u.to_string(), "http://<redacted>@h:1/healthz");
    }

    #[test]
    fn parse_errors_do_not_quote_the_url() {
        for raw in [
            "http://u:S3cret@127.0.0.1:bad",
            "ftp://u:S3cret@127.0.0.1:1",
            "u:S3cret@127.0.0.1:2379",
        ] {
            let e = RedactedUrl::new(raw)
                .parse_http()
                .err()
                .unwrap()
                .to_string();
            assert!(!e.contains("S3cret"), "{raw}: {e}");
        }
        let (host, port) = RedactedUrl::new("https://u:p@[::1]/x")
            .parse_http()
            .unwrap()
            .host_and_port()
            .unwrap();
        assert_eq!((host.as_str(), port), ("::1", 443));
    }

    #[test]
    fn quoted_lines_lose_the_userinfo_of_every_word() {
        assert_eq!(
            scrub_quoted_lines(
                "c.yaml:3:8: bad\n 3 |   url: u:S3cret@127.0.0.1:1 x: [http://a:S3@h/]\n"
            ),
            "c.yaml:3:8: bad\n 3 |   url: <redacted>@127.0.0.1:1 x: [http://<redacted>@h/]\n"
        );
        assert_eq!(scrub_quoted_lines("{url:u:S3@@h}"), "{<redacted>@h}");
        assert_eq!(scrub_quoted_lines("no at sign"), "no at sign");
    }

    /// Regression: `user:pass@` in `--etcd.endpoint` was written to the
    /// start-up log line; library errors quote URLs in their own spelling.
    #[test]
    fn scrub_removes_the_secret_from_library_texts() {
        let u = RedactedUrl::new("http://user:s3cret@10.0.0.1:2379");
        assert_eq!(
            u.scrub("serving endpoint=http://user:s3cret@10.0.0.1:2379 policy=x"),
            "serving endpoint=http://<redacted>@10.0.0.1:2379 policy=x"
        );
        assert_eq!(
            u.scrub("invalid uri user:s3cret@10.0.0.1 (character)"),
            "invalid uri <redacted>@10.0.0.1 (character)"
        );
        let other = RedactedUrl::new("http://h/");
        assert_eq!(
            other.scrub(
                "GET https://a:b@h/metrics: error sending request for url (https://a:b@h/metrics)"
            ),
            "GET https://<redacted>@h/metrics: error sending request for url (https://<redacted>@h/metrics)"
        );
        assert_eq!(other.scrub("http://h:1/x@y"), "http://h:1/x@y");
        assert_eq!(other.scrub("user@example.com"), "user@example.com");
    }
}
