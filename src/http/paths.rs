//! The main router's paths: the fixed routes ([`ROUTES`]) and which paths
//! may be the telemetry path ([`telemetry_path_problem`]: literal, reachable,
//! meaning one thing to every client, shadowing no route).

/// The main router's fixed paths (the telemetry path is added to them);
/// `/readyz/` also owns everything below it.
pub const ROUTES: [&str; 8] = [
    "/",
    "/history",
    "/readyz",
    "/readyz/{name}",
    "/livez",
    "/signals",
    "/policy",
    "/-/reload",
];

/// Why `path` cannot be the telemetry path: it must be a literal path
/// (axum would read `{x}`, `{*x}`, `:x` or `*x` as a pattern, or panic on
/// them), reachable by a request (no space, control character, non-ASCII,
/// `?` or `#`), meaning one thing to every client (no dot or empty
/// segment, no percent-encoding a client would normalise:
/// [`path_normalisation_problem`]), and not one of [`ROUTES`] or under
/// `/readyz/`.
pub fn telemetry_path_problem(path: &str) -> Option<&'static str> {
    if !path.starts_with('/') {
        return Some("it must start with /");
    }
    if let Some(c) = path.chars().find(|c| !c.is_ascii_graphic()) {
        return Some(if c == ' ' {
            "it contains a space, which no request can carry"
        } else {
            "it contains a control or non-ASCII character (percent-encode it)"
        });
    }
    if path.contains(['?', '#']) {
        return Some("a query (?) or fragment (#) is not part of a path");
    }
    if path.contains(['{', '}']) {
        return Some("{ and } would make it a route pattern; it must be a literal path");
    }
    if path.split('/').any(|seg| seg.starts_with([':', '*'])) {
        return Some("a segment starting with : or * would make it a route pattern");
    }
    if let Some(why) = path_normalisation_problem(path) {
        return Some(why);
    }
    if ROUTES.contains(&path) || path.starts_with("/readyz/") {
        return Some("the exporter already serves this path");
    }
    None
}

/// Why a client would not send `path` as written: curl, browsers and
/// Prometheus remove dot segments (`/a/../b` is `/b`), may merge or drop
/// empty ones (`//`), decode percent-encoded unreserved characters
/// (`%2e` is `.`, RFC 3986 6.2.2.2), write hex digits in upper case and
/// turn `\` into `/`; the router matches the path it receives byte for
/// byte, so such a path would serve nothing. A trailing `/` is kept by
/// every client and is allowed.
fn path_normalisation_problem(path: &str) -> Option<&'static str> {
    if path.contains('\\') {
        return Some("a \\ is turned into / by browsers; write / (the path must mean one thing)");
    }
    let segments: Vec<&str> = path[1..].split('/').collect();
    let last = segments.len() - 1;
    for (i, seg) in segments.iter().enumerate() {
        if seg.is_empty() && i != last {
            return Some(
                "an empty segment (//) is merged or dropped by clients (the path must mean one thing)",
            );
        }
        if *seg == "." || *seg == ".." {
            return Some(
                "a dot segment (/./ or /../) is removed by clients (the path must mean one thing)",
            );
        }
    }
    let bytes = path.as_bytes();
    for (i, _) in path.match_indices('%') {
        let hex = bytes
            .get(i + 1..i + 3)
            .filter(|h| h.iter().all(u8::is_ascii_hexdigit));
        let Some(hex) = hex else {
            return Some(
                "a % not followed by two hex digits is not percent-encoding (write %25 for %)",
            );
        };
        if hex.iter().any(u8::is_ascii_lowercase) {
            return Some(
                "percent-encoding in lower case (%2f) is written in upper case by clients (the path must mean one thing)",
            );
        }
        let decoded = u8::from_str_radix(std::str::from_utf8(hex).unwrap_or("00"), 16).unwrap_or(0);
        if decoded.is_ascii_alphanumeric() || matches!(decoded, b'-' | b'.' | b'_' | b'~') {
            return Some(
                "a percent-encoded letter, digit, -, ., _ or ~ (e.g. %2E) is decoded by clients (the path must mean one thing)",
            );
        }
    }
    None
}
