//! The key path of a TOML key, from its byte offset.
//!
//! The `toml` crate refuses a duplicate key while it parses the document,
//! before serde (and so `serde_path_to_error`) sees anything: its error
//! only has the duplicate's span. This walks the document's token events
//! (`toml_parser`, the parser `toml` itself uses) and rebuilds the path of
//! the key at that offset: table headers (`[limits]`, `[[fs]]` with its
//! index), dotted keys, inline tables and arrays.

use toml_parser::Source;
use toml_parser::decoder::Encoding;
use toml_parser::parser::{Event, EventKind};

use super::key_path::key_segment;

/// One step of a key path.
#[derive(Debug, Clone, PartialEq)]
enum Seg {
    Key(String),
    Index(usize),
}

/// Render a path the way the rest of the Spec's errors do: `fs[2].dest`,
/// `env."A\0"`.
fn render(path: &[Seg]) -> String {
    let mut out = String::new();
    for seg in path {
        match seg {
            Seg::Key(k) => {
                if !out.is_empty() {
                    out.push('.');
                }
                out.push_str(&key_segment(k));
            }
            Seg::Index(i) => out.push_str(&format!("[{i}]")),
        }
    }
    out
}

/// What encloses the keys being read.
enum Frame {
    /// An inline table whose keys extend `base`.
    Table(Vec<Seg>),
    /// An array whose elements are `base[index]`.
    Array(Vec<Seg>, usize),
}

/// The key path of the key that starts at byte `offset` of `text`, if a
/// key starts there.
pub fn key_path_at(text: &str, offset: usize) -> Option<String> {
    let source = Source::new(text);
    let tokens = source.lex().into_vec();
    let mut events: Vec<Event> = Vec::with_capacity(tokens.len());
    let mut errors: Vec<toml_parser::ParseError> = Vec::new();
    toml_parser::parser::parse_document(&tokens, &mut events, &mut errors);

    let decode = |ev: &Event| -> String {
        let span = ev.span();
        let raw = &text[span.start()..span.end()];
        match ev.encoding() {
            None => raw.to_string(),
            Some(enc @ (Encoding::BasicString | Encoding::LiteralString)) => {
                let mut out = String::new();
                let mut errs: Vec<toml_parser::ParseError> = Vec::new();
                toml_parser::Raw::new_unchecked(raw, Some(enc), span)
                    .decode_key(&mut out, &mut errs);
                out
            }
            Some(_) => raw.to_string(),
        }
    };

    let mut header: Vec<Seg> = Vec::new();
    let mut header_keys: Option<Vec<Seg>> = None;
    let mut array_tables: Vec<(Vec<Seg>, usize)> = Vec::new();
    let mut stack: Vec<Frame> = Vec::new();
    let mut keys: Vec<Seg> = Vec::new();
    let mut value_path: Option<Vec<Seg>> = None;
    let base = |stack: &[Frame], header: &[Seg]| -> Vec<Seg> {
        match stack.last() {
            Some(Frame::Table(b)) => b.clone(),
            Some(Frame::Array(b, i)) => {
                let mut p = b.clone();
                p.push(Seg::Index(*i));
                p
            }
            None => header.to_vec(),
        }
    };
    for ev in &events {
        match ev.kind() {
            EventKind::StdTableOpen | EventKind::ArrayTableOpen => {
                header_keys = Some(Vec::new());
            }
            EventKind::StdTableClose => {
                header = header_keys.take().unwrap_or_default();
            }
            EventKind::ArrayTableClose => {
                let path = header_keys.take().unwrap_or_default();
                // The n-th `[[a.b]]` header is element n of `a.b`.
                let n = match array_tables.iter_mut().find(|(p, _)| *p == path) {
                    Some((_, n)) => {
                        *n += 1;
                        *n
                    }
                    None => {
                        array_tables.push((path.clone(), 0));
                        0
                    }
                };
                header = path;
                header.push(Seg::Index(n));
            }
            EventKind::SimpleKey => {
                let seg = Seg::Key(decode(ev));
                if let Some(h) = header_keys.as_mut() {
                    h.push(seg);
                    if ev.span().start() == offset {
                        return Some(render(h));
                    }
                    continue;
                }
                keys.push(seg);
                if ev.span().start() == offset {
                    let mut p = base(&stack, &header);
                    p.extend(keys.iter().cloned());
                    return Some(render(&p));
                }
            }
            EventKind::KeyValSep => {
                let mut p = base(&stack, &header);
                p.append(&mut keys);
                value_path = Some(p);
            }
            EventKind::InlineTableOpen | EventKind::ArrayOpen => {
                let b = match (stack.last(), value_path.take()) {
                    (Some(Frame::Array(..)), _) | (_, None) => base(&stack, &header),
                    (_, Some(p)) => p,
                };
                stack.push(if ev.kind() == EventKind::ArrayOpen {
                    Frame::Array(b, 0)
                } else {
                    Frame::Table(b)
                });
                keys.clear();
            }
            EventKind::InlineTableClose | EventKind::ArrayClose => {
                stack.pop();
                keys.clear();
            }
            EventKind::ValueSep => {
                if let Some(Frame::Array(_, i)) = stack.last_mut() {
                    *i += 1;
                }
                keys.clear();
            }
            EventKind::Scalar => value_path = None,
            EventKind::Newline if stack.is_empty() => keys.clear(),
            _ => {}
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::key_path_at;

    fn at(text: &str, needle: &str) -> Option<String> {
        key_path_at(text, text.rfind(needle).expect("needle"))
    }

    #[test]
    fn paths_of_keys() {
        assert_eq!(
            at("version = 1\nversion = 2\n", "version"),
            Some("version".into())
        );
        assert_eq!(
            at("[limits]\nmemory = 1\nmemory = 2\n", "memory"),
            Some("limits.memory".into())
        );
        assert_eq!(
            at("[limits.rlimits]\nnofile = 1\n", "nofile"),
            Some("limits.rlimits.nofile".into())
        );
        assert_eq!(
            at("limits.memory = { value = 1, value = 2 }\n", "value"),
            Some("limits.memory.value".into())
        );
        assert_eq!(
            at(
                "[[fs]]\nop = \"proc\"\ndest = \"/p\"\n[[fs]]\nop = \"dev\"\ndest = \"/d\"\n",
                "dest"
            ),
            Some("fs[1].dest".into())
        );
        assert_eq!(
            at(
                "[limits]\nio = [{ device = \"/a\" }, { device = \"/b\", wbps = 1 }]\n",
                "wbps"
            ),
            Some("limits.io[1].wbps".into())
        );
        assert_eq!(
            at("[env]\n\"A\\u0000\" = \"1\"\n", "\"A"),
            Some("env.\"A\\0\"".into())
        );
        assert_eq!(at("[limits]\n[limits]\n", "limits"), Some("limits".into()));
        assert_eq!(at("version = 1\n", "1"), None);
    }
}
