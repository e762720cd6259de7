//! The proxy's own answers: a denial or failure says why, in the body and
//! in `X-Hutch-Error`.

use http_body_util::{BodyExt, Full, combinators::UnsyncBoxBody};
use hyper::body::Bytes;
use hyper::header::{self, HeaderName, HeaderValue};
use hyper::{Response, StatusCode};

/// The body of every response the proxy sends or forwards.
pub(super) type Body = UnsyncBoxBody<Bytes, Box<dyn std::error::Error + Send + Sync>>;

/// A denial or failure answer that tells the client (often an agent) why.
pub(super) fn answer(status: StatusCode, code: &str, text: &str) -> Response<Body> {
    let clean: String = text
        .chars()
        .map(|c| if (' '..='~').contains(&c) { c } else { '?' })
        .collect();
    let body = format!("hutch egress proxy: {clean}\n");
    let mut r = Response::new(
        Full::new(Bytes::from(body))
            .map_err(|n| match n {})
            .boxed_unsync(),
    );
    *r.status_mut() = status;
    let h = r.headers_mut();
    h.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    h.insert(header::CONNECTION, HeaderValue::from_static("close"));
    if let Ok(v) = HeaderValue::from_str(&format!("{code}: {clean}")) {
        h.insert(HeaderName::from_static("x-hutch-error"), v);
    }
    r
}
