//! The bodies of a brokered request, both ways: metered against the
//! sandbox's byte budget and the rule's, and (the response) scrubbed.
//! Each holds the request's [`Decision`], so the audit line is written
//! when the response has been sent whole, or abandoned; each cuts the
//! request when no byte moved for the idle timeout, or at the total one.

use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::time::{Instant, Sleep};

use http_body_util::combinators::UnsyncBoxBody;
use hyper::body::{Body as HttpBody, Bytes, Frame, SizeHint};

use super::rules::RulesRef;
use super::scrub::Scrubber;
use crate::net::record::{Decision, DirMeter};
use crate::net::tunnel::Meter;

pub(crate) type BoxError = Box<dyn std::error::Error + Send + Sync>;
/// The body of a request sent upstream.
pub(crate) type UpBody = UnsyncBoxBody<Bytes, BoxError>;

/// A body passed on, counted (and scrubbed, when given a scrubber).
pub(crate) struct Metered<B> {
    inner: B,
    dec: Arc<Decision>,
    rules: RulesRef,
    up: bool,
    scrub: Option<Scrubber>,
    /// A trailers frame waiting behind the scrubber's last bytes.
    pending: Option<Frame<Bytes>>,
    done: bool,
    idle: Duration,
    total_at: Instant,
    /// Fires at the idle deadline (moved on by every frame) or the total.
    timer: Pin<Box<Sleep>>,
}

impl<B> Metered<B> {
    pub(crate) fn up(inner: B, dec: Arc<Decision>, rules: RulesRef) -> Self {
        Self::new(inner, dec, rules, true, None)
    }

    pub(crate) fn down(
        inner: B,
        dec: Arc<Decision>,
        rules: RulesRef,
        scrub: Option<Scrubber>,
    ) -> Self {
        Self::new(inner, dec, rules, false, scrub.filter(|s| !s.is_empty()))
    }

    fn new(
        inner: B,
        dec: Arc<Decision>,
        rules: RulesRef,
        up: bool,
        scrub: Option<Scrubber>,
    ) -> Self {
        let limits = dec.state.policy.limits();
        let (idle, total) = (limits.idle_timeout, limits.total_timeout);
        let total_at = dec.started() + total;
        let timer = Box::pin(tokio::time::sleep_until(
            (Instant::now() + idle).min(total_at),
        ));
        Metered {
            inner,
            dec,
            rules,
            up,
            scrub,
            pending: None,
            done: false,
            idle,
            total_at,
            timer,
        }
    }

    /// Cut the request if its idle or total deadline has passed.
    fn timed_out(&mut self, cx: &mut Context<'_>) -> Option<BoxError> {
        if self.timer.as_mut().poll(cx).is_pending() {
            return None;
        }
        let why = if Instant::now() >= self.total_at {
            "total timeout"
        } else {
            "idle timeout"
        };
        self.dec.with(|f| f.error = Some(why.into()));
        Some(why.into())
    }

    fn account(&self, n: usize) -> Result<(), BoxError> {
        DirMeter {
            dec: &self.dec,
            up: self.up,
        }
        .account(n)?;
        let policy = &self.dec.state.policy;
        if let Some(r) = self.rules.get(&policy.gateways, &policy.intercepts)
            && !r.account(n as u64)
        {
            return Err("the rule's byte budget is used up".into());
        }
        Ok(())
    }
}

impl<B> HttpBody for Metered<B>
where
    B: HttpBody<Data = Bytes> + Unpin,
    B::Error: Into<BoxError>,
{
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        let this = &mut *self;
        loop {
            if let Some(f) = this.pending.take() {
                return Poll::Ready(Some(Ok(f)));
            }
            if this.done {
                return Poll::Ready(None);
            }
            match Pin::new(&mut this.inner).poll_frame(cx) {
                Poll::Pending => {
                    return match this.timed_out(cx) {
                        Some(e) => Poll::Ready(Some(Err(e))),
                        None => Poll::Pending,
                    };
                }
                Poll::Ready(Some(Err(e))) => {
                    let e: BoxError = e.into();
                    this.dec.with(|f| f.error = Some(e.to_string()));
                    return Poll::Ready(Some(Err(e)));
                }
                Poll::Ready(Some(Ok(frame))) => {
                    let next = (Instant::now() + this.idle).min(this.total_at);
                    this.timer.as_mut().reset(next);
                    let frame = match frame.into_data() {
                        Ok(data) => {
                            if let Err(e) = this.account(data.len()) {
                                this.dec.with(|f| f.error = Some(e.to_string()));
                                return Poll::Ready(Some(Err(e)));
                            }
                            let out = match &mut this.scrub {
                                Some(s) => s.push(data),
                                None => data,
                            };
                            if out.is_empty() {
                                continue;
                            }
                            return Poll::Ready(Some(Ok(Frame::data(out))));
                        }
                        Err(frame) => frame,
                    };
                    // Trailers: whatever the scrubber held goes first.
                    if let Some(rest) = this.scrub.as_mut().map(Scrubber::finish)
                        && !rest.is_empty()
                    {
                        this.pending = Some(frame);
                        return Poll::Ready(Some(Ok(Frame::data(rest))));
                    }
                    return Poll::Ready(Some(Ok(frame)));
                }
                Poll::Ready(None) => {
                    this.done = true;
                    if let Some(rest) = this.scrub.as_mut().map(Scrubber::finish)
                        && !rest.is_empty()
                    {
                        return Poll::Ready(Some(Ok(Frame::data(rest))));
                    }
                    return Poll::Ready(None);
                }
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        self.pending.is_none()
            && (self.done || (self.scrub.is_none() && self.inner.is_end_stream()))
    }

    fn size_hint(&self) -> SizeHint {
        if self.scrub.is_some() {
            SizeHint::default()
        } else {
            self.inner.size_hint()
        }
    }
}
