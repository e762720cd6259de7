//! Deserializing the fixed words of reports (`&'static str` fields such as
//! `"oom-killed"`, `"x86_64"`) without leaking: each is looked up in the
//! vocabulary the reports are written with. A word this hutch does not
//! know (a report from another version) reads as `"unknown"` rather than
//! failing the whole report.

use serde::{Deserialize, Deserializer};

/// A fixed word of a report. (An alias, so that serde's derive does not
/// take the field for a string borrowed from the input.)
pub type Word = &'static str;

/// Every word a report's `&'static str` field can hold.
const VOCABULARY: &[&str] = &[
    // seccomp
    "x86_64",
    "i386",
    "x32",
    // Landlock
    "own-namespace",
    "denied",
    "proxy-only",
    "no-bind",
    "unrestricted",
    "abstract-unix-socket",
    "signal",
    // cgroup limit events
    "oom-killed",
    "pids-limit-hit",
];

fn lookup(s: &str) -> Word {
    VOCABULARY
        .iter()
        .copied()
        .find(|w| *w == s)
        .unwrap_or("unknown")
}

pub fn word<'de, D: Deserializer<'de>>(d: D) -> Result<Word, D::Error> {
    Ok(lookup(&String::deserialize(d)?))
}

pub fn words<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<Word>, D::Error> {
    Ok(Vec::<String>::deserialize(d)?
        .iter()
        .map(|s| lookup(s))
        .collect())
}

pub fn opt_word<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Word>, D::Error> {
    Ok(Option::<String>::deserialize(d)?.map(|s| lookup(&s)))
}

#[cfg(test)]
mod tests {
    #[test]
    fn known_words_come_back_and_unknown_ones_are_named_so() {
        assert_eq!(super::lookup("oom-killed"), "oom-killed");
        assert_eq!(super::lookup("from-the-future"), "unknown");
    }
}
