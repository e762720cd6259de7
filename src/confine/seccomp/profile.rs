//! Strict loading of a profile in seccompiler's JSON format.
//!
//! Public (hidden) only for the test oracle in `tests/confine_support/`,
//! which compiles the same stages with seccompiler; not a stable API.
//!
//! A profile is a JSON object of named filters (seccompiler's format).
//! hutch runs every filter of the file as one *stage*, in file
//! order; see [`super::codegen`] for how stages combine. One key is
//! hutch's own: `unlisted_action`, what a filter answers for syscalls it
//! does not list (seccompiler always gives them `mismatch_action`).

use std::collections::BTreeMap;
use std::fmt;

use serde::Deserialize;
use serde::de::{self, MapAccess, Visitor};

use super::syscalls_x86_64::SYSCALLS;

/// Largest errno a profile may return (the kernel's MAX_ERRNO).
const MAX_ERRNO: u32 = 4095;

/// One named filter of a profile, checked and resolved to syscall numbers:
/// what `codegen` compiles (and the test oracle hands to seccompiler).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Stage {
    pub name: String,
    /// `SECCOMP_RET_*` value when a rule matches (or the syscall is listed
    /// unconditionally).
    pub match_action: u32,
    /// Value when the syscall is listed with conditions and no rule matches.
    pub mismatch_action: u32,
    /// Value for a syscall the filter does not list: `mismatch_action` in
    /// seccompiler's format, or hutch's `unlisted_action`.
    pub unlisted_action: u32,
    /// Syscall number -> rules, any of which matching means `match_action`
    /// (empty: the syscall is listed unconditionally).
    pub rules: BTreeMap<u32, Vec<Rule>>,
}

/// Conditions that must all hold.
pub type Rule = Vec<Condition>;

/// One argument comparison.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Condition {
    /// Argument index, 0..=5.
    pub index: u8,
    /// Compare all 64 bits (`qword`) or the low 32 bits (`dword`).
    pub qword: bool,
    pub op: Op,
    pub val: u64,
}

/// A comparison, unsigned. `MaskedEq(m)`: `arg & m == val & m`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Op {
    Eq,
    Ne,
    Ge,
    Gt,
    Le,
    Lt,
    MaskedEq(u64),
}

/// A profile error: where in the file, and what is wrong.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProfileError {
    /// `filter "deny_eperm", rule 3 (syscall "mount")`, or a JSON path.
    pub location: String,
    pub message: String,
}

impl fmt::Display for ProfileError {
    /// One line: control characters echoed from the input are escaped.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let line = if self.location.is_empty() {
            self.message.clone()
        } else {
            format!("{}: {}", self.location, self.message)
        };
        for c in line.chars() {
            if c.is_control() {
                write!(f, "{}", c.escape_default())?;
            } else {
                write!(f, "{c}")?;
            }
        }
        Ok(())
    }
}

impl ProfileError {
    fn at(location: impl Into<String>, message: impl Into<String>) -> Self {
        ProfileError {
            location: location.into(),
            message: message.into(),
        }
    }
}

/// seccompiler's action names (its serde support is behind a feature hutch
/// does not need; these mirror it exactly).
#[derive(Deserialize, Clone, PartialEq)]
#[serde(rename_all = "snake_case")]
enum Action {
    Allow,
    Errno(u32),
    KillThread,
    KillProcess,
    Log,
    Trace(u32),
    Trap,
}

impl Action {
    /// The `SECCOMP_RET_*` value (linux/seccomp.h).
    fn value(&self) -> u32 {
        match self {
            Action::Allow => SECCOMP_RET_ALLOW,
            Action::Errno(e) => 0x0005_0000 | (e & 0xffff),
            Action::KillThread => 0,
            Action::KillProcess => 0x8000_0000,
            Action::Log => 0x7ffc_0000,
            Action::Trace(t) => 0x7ff0_0000 | (t & 0xffff),
            Action::Trap => 0x0003_0000,
        }
    }
}

/// `SECCOMP_RET_ALLOW`.
pub const SECCOMP_RET_ALLOW: u32 = 0x7fff_0000;

#[derive(Deserialize, Clone, Copy)]
#[serde(rename_all = "lowercase")]
enum ArgLen {
    Dword,
    Qword,
}

#[derive(Deserialize, Clone, Copy)]
#[serde(rename_all = "snake_case")]
enum CmpOp {
    Eq,
    Ge,
    Gt,
    Le,
    Lt,
    MaskedEq(u64),
    Ne,
}

impl From<CmpOp> for Op {
    fn from(op: CmpOp) -> Self {
        match op {
            CmpOp::Eq => Op::Eq,
            CmpOp::Ge => Op::Ge,
            CmpOp::Gt => Op::Gt,
            CmpOp::Le => Op::Le,
            CmpOp::Lt => Op::Lt,
            CmpOp::MaskedEq(m) => Op::MaskedEq(m),
            CmpOp::Ne => Op::Ne,
        }
    }
}

#[derive(Deserialize)]
#[serde(
    deny_unknown_fields,
    expecting = "a filter object with mismatch_action, match_action, filter and optional unlisted_action"
)]
struct JsonFilter {
    #[serde(alias = "default_action")]
    mismatch_action: Action,
    #[serde(alias = "filter_action")]
    match_action: Action,
    /// hutch's extension: the answer for syscalls the filter does not list
    /// (seccompiler gives them `mismatch_action`).
    #[serde(default)]
    unlisted_action: Option<Action>,
    filter: Vec<JsonRule>,
}

#[derive(Deserialize)]
#[serde(
    deny_unknown_fields,
    expecting = "a rule object with syscall and optional args and comment"
)]
struct JsonRule {
    syscall: String,
    args: Option<Vec<JsonCondition>>,
    #[allow(dead_code)]
    comment: Option<String>,
}

#[derive(Deserialize)]
#[serde(
    deny_unknown_fields,
    expecting = "a condition object with index, type, op, val and optional comment"
)]
struct JsonCondition {
    index: u8,
    #[serde(rename = "type")]
    arg_len: ArgLen,
    op: CmpOp,
    val: u64,
    #[allow(dead_code)]
    comment: Option<String>,
}

/// The top-level object, in file order, duplicate names refused.
struct Filters(Vec<(String, JsonFilter)>);

impl<'de> Deserialize<'de> for Filters {
    fn deserialize<D: de::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Filters;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("an object of named filters")
            }
            fn visit_map<M: MapAccess<'de>>(self, mut map: M) -> Result<Filters, M::Error> {
                let mut out: Vec<(String, JsonFilter)> = Vec::new();
                while let Some(name) = map.next_key::<String>()? {
                    if out.iter().any(|(n, _)| *n == name) {
                        return Err(de::Error::custom(format!("duplicate filter {name:?}")));
                    }
                    let filter = map.next_value()?;
                    out.push((name, filter));
                }
                Ok(Filters(out))
            }
        }
        d.deserialize_map(V)
    }
}

/// The x86_64 number of a syscall name.
pub fn syscall_nr(name: &str) -> Option<u32> {
    SYSCALLS
        .binary_search_by(|(n, _)| (*n).cmp(name))
        .ok()
        .map(|i| SYSCALLS[i].1)
}

/// Turn a serde path such as `deny_eperm.filter[3].args[0].op` into
/// `filter "deny_eperm", rule 3, condition 0, field "op"`.
fn describe_path(path: &str) -> String {
    let mut parts = Vec::new();
    let mut rest = path;
    if let Some((name, tail)) = rest.split_once('.') {
        parts.push(format!("filter {name:?}"));
        rest = tail;
    } else if !rest.is_empty() && rest != "." {
        return format!("filter {rest:?}");
    } else {
        return String::new();
    }
    for seg in rest.split('.') {
        match seg.split_once('[') {
            Some(("filter", idx)) => parts.push(format!("rule {}", idx.trim_end_matches(']'))),
            Some(("args", idx)) => parts.push(format!("condition {}", idx.trim_end_matches(']'))),
            _ => parts.push(format!("field {seg:?}")),
        }
    }
    parts.join(", ")
}

fn check_action(action: &Action, where_: &str) -> Result<(), ProfileError> {
    if let Action::Errno(e) = action
        && (*e == 0 || *e > MAX_ERRNO)
    {
        return Err(ProfileError::at(
            where_,
            format!("errno {e} is out of range (1..={MAX_ERRNO})"),
        ));
    }
    Ok(())
}

/// Parse and compile every filter of a profile. Each error names the
/// filter and rule that is wrong.
pub fn compile_stages(json: &[u8]) -> Result<Vec<Stage>, ProfileError> {
    let de = &mut serde_json::Deserializer::from_slice(json);
    let filters: Filters = serde_path_to_error::deserialize(de).map_err(|e| {
        let path = e.path().to_string();
        let inner = e.into_inner();
        ProfileError::at(describe_path(&path), inner.to_string())
    })?;
    if filters.0.is_empty() {
        return Err(ProfileError::at(
            "",
            "the profile holds no filter (use the profile \"unconfined\" to run without seccomp)",
        ));
    }
    let mut stages = Vec::with_capacity(filters.0.len());
    for (name, filter) in filters.0 {
        stages.push(compile_filter(&name, filter)?);
    }
    Ok(stages)
}

fn compile_filter(name: &str, filter: JsonFilter) -> Result<Stage, ProfileError> {
    let here = format!("filter {name:?}");
    check_action(&filter.mismatch_action, &format!("{here}, mismatch_action"))?;
    check_action(&filter.match_action, &format!("{here}, match_action"))?;
    if let Some(u) = &filter.unlisted_action {
        check_action(u, &format!("{here}, unlisted_action"))?;
    }
    if filter.mismatch_action == filter.match_action {
        return Err(ProfileError::at(
            here,
            "match_action and mismatch_action are the same, so the rules have no effect",
        ));
    }
    // syscall number -> (rules, index of an unconditional rule, first rule index)
    let mut rules: BTreeMap<u32, (Vec<Rule>, Option<usize>, usize)> = BTreeMap::new();
    for (i, rule) in filter.filter.into_iter().enumerate() {
        let rule_here = format!("{here}, rule {i} (syscall {:?})", rule.syscall);
        let nr = syscall_nr(&rule.syscall)
            .ok_or_else(|| ProfileError::at(&rule_here, "unknown syscall name on x86_64"))?;
        let entry = rules.entry(nr).or_insert((Vec::new(), None, i));
        match rule.args {
            None => {
                if !entry.0.is_empty() || entry.1.is_some() {
                    return Err(ProfileError::at(
                        rule_here,
                        format!(
                            "rule {} already names this syscall; an unconditional rule cannot be combined with others for the same syscall",
                            entry.2
                        ),
                    ));
                }
                entry.1 = Some(i);
            }
            Some(conds) => {
                if let Some(first) = entry.1 {
                    return Err(ProfileError::at(
                        rule_here,
                        format!(
                            "rule {first} already matches this syscall unconditionally, so this rule would be ignored"
                        ),
                    ));
                }
                if conds.is_empty() {
                    return Err(ProfileError::at(
                        rule_here,
                        "\"args\" is empty; omit it to match the syscall unconditionally",
                    ));
                }
                let mut built = Vec::with_capacity(conds.len());
                for (j, c) in conds.into_iter().enumerate() {
                    let cond_here = format!("{rule_here}, condition {j}");
                    if c.index > 5 {
                        return Err(ProfileError::at(
                            cond_here,
                            format!(
                                "argument index {} is out of range (a syscall has arguments 0..=5)",
                                c.index
                            ),
                        ));
                    }
                    let qword = matches!(c.arg_len, ArgLen::Qword);
                    if !qword {
                        let mask_too_big =
                            matches!(c.op, CmpOp::MaskedEq(m) if m > u64::from(u32::MAX));
                        if c.val > u64::from(u32::MAX) || mask_too_big {
                            return Err(ProfileError::at(
                                cond_here,
                                format!(
                                    "value {:#x} does not fit a 32-bit (\"dword\") argument",
                                    c.val
                                ),
                            ));
                        }
                    }
                    built.push(Condition {
                        index: c.index,
                        qword,
                        op: c.op.into(),
                        val: c.val,
                    });
                }
                entry.0.push(built);
            }
        }
    }
    let mismatch_action = filter.mismatch_action.value();
    Ok(Stage {
        name: name.to_string(),
        match_action: filter.match_action.value(),
        mismatch_action,
        unlisted_action: filter
            .unlisted_action
            .map_or(mismatch_action, |a| a.value()),
        rules: rules.into_iter().map(|(nr, (r, _, _))| (nr, r)).collect(),
    })
}
