//! The ground floor: small helpers every layer uses, importing nothing of
//! the crate. Each is one concern: the wall clock, quoting names for
//! messages, and the fixed words of reports.

pub mod clock;
pub(crate) mod quote;
pub(crate) mod static_words;
