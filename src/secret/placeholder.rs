//! The placeholder a sandbox holds in a secret's place.
//!
//! `hutch-placeholder-<name>-<48 hex digits>`: 192 random bits, new for
//! every sandbox, so one sandbox's placeholder means nothing to another's
//! proxy. The fixed prefix is deliberate: the proxy finds any placeholder in
//! a request by one search for it (containment: a placeholder sent to a
//! host it is not bound to is refused), and whoever reads a log or a
//! client's error ("invalid x-api-key hutch-placeholder-anthropic-...")
//! sees at once that the key was never the real one. Printable ASCII of a
//! real key's length class (about 70 to 130 bytes; Anthropic keys are 108):
//! clients that check a key's syntax check its length or charset, which
//! this passes; one that insists on a vendor prefix (`sk-ant-`) would need
//! the gateway's header injection instead (`inject = { header = ... }`
//! sets the header whatever the client sent).

use super::Placeholder;

/// What every placeholder starts with.
pub(crate) const PLACEHOLDER_PREFIX: &str = "hutch-placeholder-";
/// Random bytes in a placeholder (hex-encoded: twice as many characters).
const RANDOM_BYTES: usize = 24;

/// A new placeholder for the secret `name` (validated: `[A-Za-z0-9_.-]`).
pub(crate) fn new_placeholder(name: &str) -> Result<Placeholder, crate::sys::SysError> {
    let mut rnd = [0u8; RANDOM_BYTES];
    crate::sys::getrandom(&mut rnd)?;
    Ok(Placeholder(format!(
        "{PLACEHOLDER_PREFIX}{name}-{}",
        hex::encode(rnd)
    )))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn placeholders_are_random_printable_and_recognizable() {
        let a = new_placeholder("anthropic").unwrap();
        let b = new_placeholder("anthropic").unwrap();
        assert_ne!(a, b);
        assert!(a.0.starts_with("hutch-placeholder-anthropic-"));
        assert_eq!(
            a.0.len(),
            PLACEHOLDER_PREFIX.len() + "anthropic-".len() + 48
        );
        assert!(a.0.bytes().all(|c| c.is_ascii_graphic()));
    }
}
