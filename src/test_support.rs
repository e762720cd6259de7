//! Support for the crate's unit tests: the one skip, with the semantics of
//! the integration tests' `require!` (`tests/common/mod.rs`).

/// Skip a unit test (printing the reason) when a kernel feature, device or
/// privilege is missing; with `HUTCH_REQUIRE=all` (CI) a skip is a failure.
/// The reason is only evaluated when the test skips.
macro_rules! require {
    ($cond:expr, $why:expr) => {
        if !$cond {
            $crate::test_support::skip(&$why);
            return;
        }
    };
}
pub(crate) use require;

/// Report a skip, or fail under `HUTCH_REQUIRE=all`. Use [`require!`].
pub(crate) fn skip(why: &dyn std::fmt::Display) {
    let thread = std::thread::current();
    let test = thread.name().unwrap_or("?");
    if std::env::var("HUTCH_REQUIRE").as_deref() == Ok("all") {
        panic!("{test}: required for this test but missing (HUTCH_REQUIRE=all): {why}");
    }
    eprintln!("SKIP {test}: {why}");
}
