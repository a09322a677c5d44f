//! The HTTP surface (axum): `/readyz` (+ `/readyz/<check>`), `/livez`, the
//! telemetry path, `/signals`, `/policy`, `/history` and the status page at
//! `/`. Handlers only read what the engine published: `/readyz` never waits
//! on etcd, and the page and `/history` never lock the signal store.
//! [`app`] is the main listener's router (`POST /-/reload` answers only with
//! a [`Lifecycle`] extension that enables it); [`probe_app`] the plain probe
//! listener's, with `/readyz`, `/readyz/<check>` and `/livez` only.

pub mod listen;
pub mod livez;
pub mod longpoll;
pub mod metrics;
pub mod page;
mod paths;
pub mod readyz;
mod readyz_json;
mod reload;
pub mod server;
pub mod views;

use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::Router;
use axum::extract::{ConnectInfo, Extension, MatchedPath, Path, RawQuery, Request, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, Uri, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use prometheus_client::registry::Registry;

use crate::engine::EngineHandle;
use crate::metrics::Format;
use crate::runtime::Runtime;
use etcd_readiness_policy::signals::{Catalogue, SignalStore};
pub use metrics::{ConnectionMetrics, HttpMetrics};
pub use paths::{ROUTES, telemetry_path_problem};
use readyz::{PolicyChoice, ReadyzQuery, Rendered};
pub use reload::{Lifecycle, ReloadFlight};

/// Everything the handlers read, each part given by `serve` rather than
/// looked up through the engine.
#[derive(Clone)]
pub struct AppState {
    /// The published verdicts, policy status and history.
    pub engine: EngineHandle,
    /// The signals catalogue and store, for `/signals`.
    pub catalogue: Arc<Catalogue>,
    pub store: Arc<SignalStore>,
    pub registry: Arc<Registry>,
    pub http_metrics: HttpMetrics,
    pub telemetry_path: String,
    /// When serving started, for `/livez` before the first round.
    pub started: Instant,
    /// Every reloadable file, in the order `POST /-/reload` reports them.
    pub reloadables: crate::reload::Reloadables,
    /// The candidate policy's reloader, with `--policy.candidate`: `/policy`
    /// shows the file it reads (the path is kept there, and nowhere else).
    pub candidate: Option<Arc<crate::reload::Reloader>>,
    /// This listener's long polls (`/readyz?wait=`): each listener has its own.
    pub holds: Arc<longpoll::Holds>,
    /// The clock the handlers read and the supervisor whose tasks `/livez`
    /// reports: the engine's and the sources' own.
    pub runtime: Runtime,
}

const TEXT: &str = "text/plain; charset=utf-8";
const JSON: &str = "application/json";

/// The probe listener's router: `/readyz`, `/readyz/<check>` and `/livez`,
/// with the request metrics; everything else is 404.
pub fn probe_app(state: AppState) -> Router {
    Router::new()
        .route("/readyz", get(readyz_all))
        .route("/readyz/{name}", get(readyz_one))
        .route("/livez", get(livez))
        .fallback(probe_not_found)
        .layer(middleware::from_fn_with_state(state.clone(), track))
        .with_state(state)
}

/// The router with every endpoint and the request metrics. A telemetry
/// path [`telemetry_path_problem`] refuses (the configuration checks it at
/// start) serves the metrics nowhere rather than panic.
pub fn app(state: AppState) -> Router {
    let telemetry = state.telemetry_path.clone();
    let router = Router::new()
        .route("/", get(status_page))
        .route("/history", get(history))
        .route("/readyz", get(readyz_all))
        .route("/readyz/{name}", get(readyz_one))
        .route("/livez", get(livez))
        .route("/signals", get(signals))
        .route("/policy", get(policy))
        .route("/-/reload", post(reload::reload));
    let router = if telemetry_path_problem(&telemetry).is_none() {
        router.route(&telemetry, get(metrics))
    } else {
        tracing::error!(path = %telemetry, "unusable telemetry path: the metrics are not served");
        router
    };
    router
        .fallback(not_found)
        .layer(middleware::from_fn_with_state(state.clone(), track))
        .with_state(state)
}

async fn track(State(state): State<AppState>, req: Request, next: Next) -> Response {
    let handler = req
        .extensions()
        .get::<MatchedPath>()
        .map_or("notfound".to_string(), |m| m.as_str().to_string());
    let clock = state.runtime.clock.clone();
    let started = clock.now();
    let mut resp = next.run(req).await;
    resp.headers_mut().insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    state.http_metrics.observe(
        &handler,
        resp.status().as_u16(),
        clock.now().saturating_duration_since(started),
    );
    resp
}

fn respond(status: StatusCode, content_type: &'static str, body: String) -> Response {
    (
        status,
        [
            (header::CONTENT_TYPE, content_type),
            (header::CACHE_CONTROL, "no-store"),
        ],
        body,
    )
        .into_response()
}

fn rendered(r: Rendered) -> Response {
    respond(r.status, if r.json { JSON } else { TEXT }, r.body)
}

fn wants_json(headers: &HeaderMap) -> bool {
    headers
        .get(header::ACCEPT)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|a| a.contains("application/json"))
}

/// Age of the verdict when it is older than the engine should ever let it get.
fn stale(engine: &EngineHandle) -> Option<Duration> {
    let age = engine.verdict_age();
    (age > engine.timing().verdict_stale_after()).then_some(age)
}

/// The client's address, as the server put it in the request (absent in
/// tests that call the router directly).
type Peer = Option<Extension<ConnectInfo<std::net::SocketAddr>>>;

async fn readyz_all(
    State(s): State<AppState>,
    peer: Peer,
    uri: Uri,
    headers: HeaderMap,
) -> Response {
    readyz_answer(&s, Target::All, &uri, peer, &headers).await
}

async fn readyz_one(
    State(s): State<AppState>,
    Path(name): Path<String>,
    peer: Peer,
    uri: Uri,
    headers: HeaderMap,
) -> Response {
    readyz_answer(&s, Target::One(&name), &uri, peer, &headers).await
}

/// Which `/readyz` answer a request asks for.
#[derive(Clone, Copy, Debug)]
enum Target<'a> {
    All,
    One(&'a str),
}

/// `/readyz` and `/readyz/NAME`: at once, or with `?wait=` held until the
/// answer changes (`longpoll`).
async fn readyz_answer(
    s: &AppState,
    target: Target<'_>,
    uri: &Uri,
    peer: Peer,
    headers: &HeaderMap,
) -> Response {
    let q = ReadyzQuery::parse(uri.query(), wants_json(headers));
    let wait = match &q.wait {
        None => Duration::ZERO,
        Some(Ok(wait)) => *wait,
        Some(Err(e)) => return rendered(readyz::render_bad_wait(e, q.json)),
    };
    if wait.is_zero() {
        return rendered(render_readyz(s, target, &q));
    }
    let peer = peer.map(|Extension(ConnectInfo(a))| a.ip());
    let key = s
        .holds
        .key(peer, uri.path(), uri.query().unwrap_or(""), q.json);
    rendered(longpoll::hold(s, target, &q, wait, key).await)
}

/// The answer to `target` now, from what the engine published.
fn render_readyz(s: &AppState, target: Target<'_>, q: &ReadyzQuery) -> Rendered {
    let one = match target {
        Target::All => None,
        Target::One(name) => Some(name),
    };
    match &q.policy {
        PolicyChoice::Live => {}
        PolicyChoice::Candidate => return candidate_readyz(s, one, q),
        PolicyChoice::Unknown(p) => return readyz::render_unknown_policy(p, q.json),
    }
    let published = s.engine.verdict();
    let Some(name) = one else {
        return readyz::render_all(&published.verdict, stale(&s.engine), q);
    };
    let status = s.engine.policy_status();
    let names: Vec<&str> = status
        .policy
        .checks()
        .iter()
        .map(|c| c.name.as_str())
        .collect();
    readyz::render_one(&published.verdict, stale(&s.engine), name, &names, q)
}

/// `?policy=candidate`: the candidate's verdict of the latest evaluation,
/// never with the live answer's status (see [`readyz::CANDIDATE_STATUS`]).
fn candidate_readyz(s: &AppState, one: Option<&str>, q: &ReadyzQuery) -> Rendered {
    let status = s.engine.candidate_status();
    let (Some(published), Some(policy)) = (
        s.engine.candidate_verdict(),
        status.as_ref().and_then(|st| st.policy.clone()),
    ) else {
        let error = status
            .as_ref()
            .and_then(|st| st.last_reload_error.as_deref());
        let error = match &status {
            Some(_) => Some(error.unwrap_or("not loaded yet")),
            None => None,
        };
        return readyz::render_no_candidate(error, q.json);
    };
    let names: Vec<&str> = policy.checks().iter().map(|c| c.name.as_str()).collect();
    let d = published.disagreement;
    let ctx = readyz::CandidateContext {
        live_ready: published.live_ready,
        would_fail_while_ready: d.would_fail_while_ready,
        would_pass_while_unready: d.would_pass_while_unready,
        disagreeing: published.disagreeing_since.map(|(dir, since)| {
            (
                dir.as_str(),
                etcd_readiness_policy::verdict::unix_seconds(since),
            )
        }),
    };
    readyz::render_candidate(
        &published.verdict,
        stale(&s.engine),
        one.map(|n| (n, names.as_slice())),
        &ctx,
        q,
    )
}

/// The exporter's own loops are alive ([`livez::render`]).
async fn livez(State(s): State<AppState>, RawQuery(q): RawQuery) -> Response {
    let q = ReadyzQuery::parse(q.as_deref(), false);
    let input = livez::LivezInput {
        now: s.runtime.clock.now(),
        started: s.started,
        verdict_at: s.engine.verdict().at,
        timing: s.engine.timing(),
        rounds: &s.engine.notifier().rounds(),
        tasks: &s.runtime.supervisor.tasks(),
    };
    rendered(livez::render(&input, q.verbose))
}

async fn metrics(State(s): State<AppState>, headers: HeaderMap) -> Response {
    let format = Format::from_accept(headers.get(header::ACCEPT).and_then(|v| v.to_str().ok()));
    // The engine refreshes the gauges at every evaluation (every 250ms at
    // most), so a scrape only encodes.
    let body = crate::metrics::encode(&s.registry, format);
    respond(StatusCode::OK, format.content_type(), body)
}

async fn signals(State(s): State<AppState>) -> Response {
    let snapshot = s.store.snapshot(s.runtime.clock.now());
    let out: Vec<views::SignalView> = snapshot
        .iter()
        .filter(|i| s.catalogue.is_enabled(i.id))
        .map(|i| views::SignalView::of(&s.catalogue, i))
        .collect();
    respond(
        StatusCode::OK,
        JSON,
        serde_json::to_string_pretty(&out).unwrap_or_default(),
    )
}

async fn policy(State(s): State<AppState>) -> Response {
    let st = s.engine.policy_status();
    let candidate_status = s.engine.candidate_status();
    let candidate = candidate_status.as_deref().map(|c| views::CandidateView {
        last_reload_error: c.last_reload_error.as_deref(),
        loaded_at: c.loaded_at.map(views::UnixTime),
        path: s.candidate.as_ref().map(|r| r.path().display().to_string()),
        sha256: c.policy.as_ref().map(|p| p.sha256()),
        summary: c.policy.as_ref().map(|p| p.summary()),
        text: c.policy.as_ref().map(|p| p.source()),
    });
    let body = views::PolicyView {
        candidate,
        last_reload_error: st.last_reload_error.as_deref(),
        loaded_at: views::UnixTime(st.loaded_at),
        path: st.policy.path(),
        sha256: st.policy.sha256(),
        summary: st.policy.summary(),
        text: st.policy.source(),
    };
    respond(
        StatusCode::OK,
        JSON,
        serde_json::to_string_pretty(&body).unwrap_or_default(),
    )
}

/// The status page, or with `?part=live` only its changing part (what the
/// page's script swaps in). Renders from what the engine published.
async fn status_page(State(s): State<AppState>, RawQuery(q): RawQuery) -> Response {
    let live = q.as_deref().is_some_and(|q| {
        form_urlencoded::parse(q.as_bytes()).any(|(k, v)| k == "part" && v == "live")
    });
    let published = s.engine.verdict();
    let history = s.engine.history().snapshot();
    let readings = s.engine.history().readings();
    let policy = s.engine.policy_status();
    let candidate_status = s.engine.candidate_status();
    let candidate_published = s.engine.candidate_verdict();
    let candidate_history = s.engine.candidate_history().snapshot();
    let candidate = candidate_status
        .as_deref()
        .map(|status| page::CandidateInput {
            status,
            published: candidate_published.as_deref(),
            history: &candidate_history,
        });
    let now = s.runtime.clock.now();
    let input = page::PageInput {
        verdict: &published.verdict,
        verdict_age: now.saturating_duration_since(published.at),
        stale: stale(&s.engine),
        history: &history,
        readings: &readings,
        readings_age: now.saturating_duration_since(readings.at),
        catalogue: &s.catalogue,
        policy: &policy,
        telemetry_path: &s.telemetry_path,
        now: s.runtime.clock.wall(),
        candidate,
    };
    let body = if live {
        page::render_live(&input)
    } else {
        page::render_page(&input)
    };
    respond(StatusCode::OK, "text/html; charset=utf-8", body)
}

/// The transition history (the page's timeline) as JSON.
async fn history(State(s): State<AppState>) -> Response {
    let h = s.engine.history().snapshot();
    respond(
        StatusCode::OK,
        JSON,
        serde_json::to_string(&views::HistoryView::of(&h)).unwrap_or_default() + "\n",
    )
}

async fn probe_not_found() -> Response {
    respond(
        StatusCode::NOT_FOUND,
        TEXT,
        "404 page not found; this probe listener serves /readyz, /readyz/NAME and /livez only\n"
            .to_string(),
    )
}

async fn not_found() -> Response {
    respond(
        StatusCode::NOT_FOUND,
        TEXT,
        "404 page not found; see / for the endpoints\n".to_string(),
    )
}
