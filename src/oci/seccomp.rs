//! `linux.seccomp` (runtime-spec `config-linux.md`, "Seccomp") as a hutch
//! seccomp profile: the JSON of `src/confine/seccomp/profile.rs`, compiled
//! by hutch's own BPF generator like every other profile.
//!
//! hutch runs a profile's filters as stages in order, and the first stage
//! that answers anything but `allow` decides. So the rules whose action is
//! not `SCMP_ACT_ALLOW` become one stage per action (most severe first, as
//! libseccomp ranks them: kill, trap, errno, log), each answering its
//! action on a match and `allow` otherwise; the `SCMP_ACT_ALLOW` rules
//! come last, as one stage that answers `defaultAction` for everything
//! they do not allow. Syscall names this architecture does not have are
//! skipped, as libseccomp does. Actions hutch cannot carry out
//! (`SCMP_ACT_NOTIFY`, `SCMP_ACT_TRACE`), filter flags and a listener are
//! refused by name.
//!
//! Differences from runc: hutch's prelude kills any syscall of another
//! architecture (i386, x32) whatever `architectures` lists.

use serde_json::{Value, json};

use super::OciError;
use super::config::{Seccomp, Syscall};
use crate::confine::seccomp::syscall_nr;

fn err(key: impl Into<String>, message: impl Into<String>) -> OciError {
    OciError::Config {
        key: key.into(),
        message: message.into(),
    }
}

/// EPERM: the runtime spec's errno when `errnoRet` is not given.
const EPERM: u32 = 1;

/// The action of a rule (or the default) as a profile action and its
/// severity rank (lower decides first); None for `SCMP_ACT_ALLOW`.
fn action(key: &str, name: &str, errno: Option<u32>) -> Result<Option<(u8, Value)>, OciError> {
    let errno = errno.unwrap_or(EPERM);
    if errno > 4095 {
        return Err(err(key, "errnoRet must be at most 4095"));
    }
    Ok(match name {
        "SCMP_ACT_ALLOW" => None,
        "SCMP_ACT_KILL_PROCESS" => Some((0, json!("kill_process"))),
        "SCMP_ACT_KILL" | "SCMP_ACT_KILL_THREAD" => Some((1, json!("kill_thread"))),
        "SCMP_ACT_TRAP" => Some((2, json!("trap"))),
        "SCMP_ACT_ERRNO" => Some((3, json!({ "errno": errno }))),
        "SCMP_ACT_LOG" => Some((4, json!("log"))),
        "SCMP_ACT_NOTIFY" | "SCMP_ACT_TRACE" => {
            return Err(err(
                key,
                format!("{name} is not supported by hutch-oci (no seccomp agent or tracer)"),
            ));
        }
        _ => return Err(err(key, "unknown seccomp action")),
    })
}

/// The profile rules of one OCI rule (one per syscall name this
/// architecture has).
fn rules(at: &str, s: &Syscall) -> Result<Vec<Value>, OciError> {
    let mut args = Vec::new();
    for (j, a) in s.args.iter().enumerate() {
        let key = format!("{at}.args[{j}]");
        if a.index > 5 {
            return Err(err(
                format!("{key}.index"),
                "a syscall has arguments 0 to 5",
            ));
        }
        let (op, val) = match a.op.as_str() {
            "SCMP_CMP_EQ" => (json!("eq"), a.value),
            "SCMP_CMP_NE" => (json!("ne"), a.value),
            "SCMP_CMP_LT" => (json!("lt"), a.value),
            "SCMP_CMP_LE" => (json!("le"), a.value),
            "SCMP_CMP_GT" => (json!("gt"), a.value),
            "SCMP_CMP_GE" => (json!("ge"), a.value),
            // value is the mask, valueTwo what the masked argument equals.
            "SCMP_CMP_MASKED_EQ" => (json!({ "masked_eq": a.value }), a.value_two),
            _ => return Err(err(format!("{key}.op"), "unknown comparison")),
        };
        args.push(json!({"index": a.index, "type": "qword", "op": op, "val": val}));
    }
    Ok(s.names
        .iter()
        .filter(|n| syscall_nr(n).is_some())
        .map(|n| {
            if args.is_empty() {
                json!({ "syscall": n })
            } else {
                json!({ "syscall": n, "args": args })
            }
        })
        .collect())
}

/// The profile for `s`, or None when it filters nothing (default allow, no
/// rule that decides otherwise).
pub fn profile(s: &Seccomp) -> Result<Option<String>, OciError> {
    if !s.flags.is_empty() {
        return Err(err(
            "linux.seccomp.flags",
            "seccomp filter flags are not supported by hutch-oci",
        ));
    }
    if s.listener_path.as_ref().is_some_and(|p| !p.is_empty()) {
        return Err(err(
            "linux.seccomp.listenerPath",
            "a seccomp agent is not supported by hutch-oci",
        ));
    }
    let default = action(
        "linux.seccomp.defaultAction",
        &s.default_action,
        s.default_errno_ret,
    )?;
    // (rank, action text) → rules, for the deciding stages.
    let mut deciding: Vec<(u8, Value, Vec<Value>)> = Vec::new();
    let mut allowed: Vec<Value> = Vec::new();
    for (i, sc) in s.syscalls.iter().enumerate() {
        let at = format!("linux.seccomp.syscalls[{i}]");
        let rs = rules(&at, sc)?;
        match action(&format!("{at}.action"), &sc.action, sc.errno_ret)? {
            None => allowed.extend(rs),
            Some((rank, act)) => match deciding.iter_mut().find(|(_, a, _)| *a == act) {
                Some((_, _, list)) => list.extend(rs),
                None => deciding.push((rank, act, rs)),
            },
        }
    }
    deciding.retain(|(_, _, rs)| !rs.is_empty());
    deciding.sort_by_key(|(rank, _, _)| *rank);
    let mut stages = serde_json::Map::new();
    // Names sort in stage order (the map is written sorted).
    for (n, (_, act, rs)) in deciding.into_iter().enumerate() {
        stages.insert(
            format!("s{n:02}_decide"),
            json!({"match_action": act, "mismatch_action": "allow", "unlisted_action": "allow", "filter": rs}),
        );
    }
    if let Some((_, default)) = default {
        stages.insert(
            "s99_allow".into(),
            json!({"match_action": "allow", "mismatch_action": default, "unlisted_action": default, "filter": allowed}),
        );
    }
    if stages.is_empty() {
        return Ok(None);
    }
    Ok(Some(Value::Object(stages).to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn seccomp(v: Value) -> Seccomp {
        serde_json::from_value(v).unwrap()
    }

    #[test]
    fn an_allow_list_compiles_and_errno_rules_decide_first() {
        let s = seccomp(json!({
            "defaultAction": "SCMP_ACT_ERRNO",
            "defaultErrnoRet": 38,
            "architectures": ["SCMP_ARCH_X86_64", "SCMP_ARCH_X86"],
            "syscalls": [
                {"names": ["read", "write", "exit_group", "chown32"], "action": "SCMP_ACT_ALLOW"},
                {"names": ["personality"], "action": "SCMP_ACT_ALLOW",
                 "args": [{"index": 0, "value": 0, "op": "SCMP_CMP_EQ"}]},
                {"names": ["clone"], "action": "SCMP_ACT_ALLOW",
                 "args": [{"index": 0, "value": 2114060288, "valueTwo": 0, "op": "SCMP_CMP_MASKED_EQ"}]},
                {"names": ["mount"], "action": "SCMP_ACT_ERRNO", "errnoRet": 1}
            ]
        }));
        let text = profile(&s).unwrap().unwrap();
        let v: Value = serde_json::from_str(&text).unwrap();
        assert_eq!(v["s00_decide"]["match_action"], json!({"errno": 1}));
        assert_eq!(v["s99_allow"]["unlisted_action"], json!({"errno": 38}));
        assert!(!text.contains("chown32"), "an i386-only name is skipped");
        crate::confine::seccomp::compile("oci", text.as_bytes()).unwrap();
    }

    #[test]
    fn allow_all_is_no_filter_and_agents_are_refused() {
        let s = seccomp(json!({"defaultAction": "SCMP_ACT_ALLOW"}));
        assert_eq!(profile(&s).unwrap(), None);
        for (v, key) in [
            (
                json!({"defaultAction": "SCMP_ACT_NOTIFY"}),
                "linux.seccomp.defaultAction",
            ),
            (
                json!({"defaultAction": "SCMP_ACT_ALLOW", "flags": ["SECCOMP_FILTER_FLAG_LOG"]}),
                "linux.seccomp.flags",
            ),
            (
                json!({"defaultAction": "SCMP_ACT_ALLOW", "syscalls": [{"names": ["read"], "action": "SCMP_ACT_BOGUS"}]}),
                "linux.seccomp.syscalls[0].action",
            ),
            (
                json!({"defaultAction": "SCMP_ACT_ERRNO", "syscalls": [{"names": ["read"], "action": "SCMP_ACT_ALLOW", "args": [{"index": 9, "value": 0, "op": "SCMP_CMP_EQ"}]}]}),
                "linux.seccomp.syscalls[0].args[0].index",
            ),
        ] {
            let e = profile(&seccomp(v)).unwrap_err().to_string();
            assert!(e.contains(key), "{e}");
        }
    }
}
