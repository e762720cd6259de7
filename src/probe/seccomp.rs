//! seccomp filter mode (a filter is installed in a child) and the return
//! actions the kernel supports (`SECCOMP_GET_ACTION_AVAIL`, no side effects).

use std::collections::BTreeMap;

use super::fork::Step;
use crate::sys::{SECCOMP_FILTER_FLAG_NEW_LISTENER, raw, sock_filter};

use super::userns;
use super::{Feature, HostSettings, Status, in_child};

const RET_ALLOW: u32 = 0x7fff_0000;

/// Every return action, by name; hutch's profiles use kill_process, errno,
/// log (log mode) and allow.
const ACTIONS: [(&str, u32); 8] = [
    ("kill_process", 0x8000_0000),
    ("kill_thread", 0x0000_0000),
    ("trap", 0x0003_0000),
    ("errno", 0x0005_0000),
    ("user_notif", 0x7fc0_0000),
    ("trace", 0x7ff0_0000),
    ("log", 0x7ffc_0000),
    ("allow", RET_ALLOW),
];

const NEEDED: [&str; 3] = ["kill_process", "errno", "allow"];

const STEPS: [&str; 3] = [
    "prctl(PR_SET_NO_NEW_PRIVS)",
    "seccomp(SECCOMP_SET_MODE_FILTER, allow-all)",
    "seccomp(SECCOMP_SET_MODE_FILTER, SECCOMP_FILTER_FLAG_NEW_LISTENER)",
];

/// `seccomp`: a filter can be installed and the needed actions exist.
pub(super) fn probe(host: &HostSettings) -> (Feature, BTreeMap<&'static str, bool>) {
    let actions: Vec<(&'static str, bool)> = ACTIONS
        .iter()
        .map(|&(name, a)| (name, raw::seccomp_action_avail(a).is_ok()))
        .collect();
    let available: Vec<&str> = actions.iter().filter(|a| a.1).map(|a| a.0).collect();
    let res = in_child(|| {
        let allow_all = [sock_filter {
            code: (libc::BPF_RET | libc::BPF_K) as u16,
            jt: 0,
            jf: 0,
            k: RET_ALLOW,
        }];
        raw::set_no_new_privs().step(0)?;
        raw::seccomp_set_mode_filter(&allow_all, 0).step(1)?;
        raw::seccomp_set_mode_filter(&allow_all, SECCOMP_FILTER_FLAG_NEW_LISTENER).step(2)?;
        Ok(0)
    });
    let mut feature = userns::verdict(
        "seccomp",
        true,
        &STEPS,
        res,
        host,
        &format!(
            "filter mode works (user_notif listener too); actions: {}",
            available.join(" ")
        ),
        &|n, errno| {
            (n == 1 && matches!(errno, crate::sys::Errno::EINVAL | crate::sys::Errno::ENOSYS)).then(
                || {
                    (
                        Status::Missing,
                        "the kernel has no seccomp filter mode".into(),
                        "use a kernel with CONFIG_SECCOMP_FILTER=y".into(),
                    )
                },
            )
        },
    );
    let lacking: Vec<&str> = NEEDED
        .iter()
        .copied()
        .filter(|n| !available.contains(n))
        .collect();
    if feature.ok && !lacking.is_empty() {
        feature = Feature::bad(
            "seccomp",
            true,
            Status::Missing,
            format!(
                "SECCOMP_GET_ACTION_AVAIL: [{}] unsupported (available: {})",
                lacking.join(" "),
                available.join(" ")
            ),
            "use Linux 4.14 or newer",
        );
    }
    (feature, actions.into_iter().collect())
}
