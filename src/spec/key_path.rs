//! Writing a key of a Spec's key path (`env."A\0"`, `sysctl.net.x`)
//! for an error: a leaf under the loader and the validators.

/// One key of a path: as it is when it is printable, else quoted with
/// escapes (`"A\0"`), so a path never carries a control character.
pub(crate) fn key_segment(key: &str) -> String {
    let plain = !key.is_empty()
        && key
            .chars()
            .all(|c| !c.is_control() && !c.is_whitespace() && !matches!(c, '"' | '`' | '\\'));
    if plain {
        key.to_string()
    } else {
        format!("\"{}\"", key.escape_debug())
    }
}
