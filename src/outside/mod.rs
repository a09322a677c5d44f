//! Every read from outside the process, bounded and checked, at the bottom
//! of the layers: files read with a size bound ([`bounded_read`]) and watched
//! through their directories ([`filewatch`]), the one HTTP client
//! ([`http_client`]: TLS from PEM files, a timeout on every request, bodies
//! bounded while streaming), URLs whose secrets never reach a log
//! ([`redacted_url`]), and numbers from peers and flags turned into
//! durations and times or a clear error ([`checked`]); why a read failed
//! ([`failure`]).

pub mod blocking;
pub mod bounded_read;
pub mod certificate;
pub mod checked;
pub mod failure;
pub mod filewatch;
pub mod http_client;
pub mod redacted_url;
