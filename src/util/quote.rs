//! Names are data: quote them the way git does (`core.quotePath=true`), so
//! newlines, escape sequences, invalid UTF-8 and quotes stay one inert token.

/// Whether git would quote this name.
fn needs_quote(name: &[u8]) -> bool {
    name.iter()
        .any(|&b| b < 0x20 || b == b'"' || b == b'\\' || b >= 0x7f)
}

/// `name` quoted like git's `quote_c_style`: unchanged when nothing needs
/// quoting, else in double quotes with C escapes and octal for other bytes.
pub(crate) fn git_quote(name: &[u8]) -> String {
    if !needs_quote(name) {
        // Only printable ASCII remains, so this is valid UTF-8.
        return String::from_utf8_lossy(name).into_owned();
    }
    let mut out = String::with_capacity(name.len() + 2);
    out.push('"');
    for &b in name {
        match b {
            0x07 => out.push_str("\\a"),
            0x08 => out.push_str("\\b"),
            b'\t' => out.push_str("\\t"),
            b'\n' => out.push_str("\\n"),
            0x0b => out.push_str("\\v"),
            0x0c => out.push_str("\\f"),
            b'\r' => out.push_str("\\r"),
            b'"' => out.push_str("\\\""),
            b'\\' => out.push_str("\\\\"),
            b if !(0x20..0x7f).contains(&b) => out.push_str(&format!("\\{b:03o}")),
            b => out.push(b as char),
        }
    }
    out.push('"');
    out
}

/// `prefix` + `name` quoted as one token (`"a/x\ny"`), as in diff headers.
pub(crate) fn git_quote_prefixed(prefix: &str, name: &[u8]) -> String {
    let mut full = prefix.as_bytes().to_vec();
    full.extend_from_slice(name);
    git_quote(&full)
}

/// Quote a name for a log or error line: git quoting, plus a leading `-`
/// is made visible by quoting so it cannot pass for an option.
pub(crate) fn display_name(name: &[u8]) -> String {
    if name.first() == Some(&b'-') && !needs_quote(name) {
        format!("\"{}\"", String::from_utf8_lossy(name))
    } else {
        git_quote(name)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plain_names_stay_plain() {
        assert_eq!(git_quote(b"src/lib.rs"), "src/lib.rs");
        assert_eq!(git_quote(b"a b"), "a b");
    }

    #[test]
    fn hostile_names_are_quoted_like_git() {
        assert_eq!(git_quote(b"a\nb"), "\"a\\nb\"");
        assert_eq!(git_quote(b"\x1b[31mred"), "\"\\033[31mred\"");
        assert_eq!(git_quote(b"q\"\\"), "\"q\\\"\\\\\"");
        assert_eq!(git_quote("é".as_bytes()), "\"\\303\\251\"");
        assert_eq!(git_quote_prefixed("a/", b"x\ty"), "\"a/x\\ty\"");
        assert_eq!(display_name(b"-rf"), "\"-rf\"");
    }
}
