//! Landlock: the ABI version the kernel reports, and a real restriction
//! enforced in a child (a ruleset with no rules must deny reading "/").

use crate::sys::Errno;
use std::os::fd::AsFd;

use super::fork::Step;
use crate::sys::raw;

use super::userns;
use super::{Feature, HostSettings, Status, in_child};

const NAME: &str = "landlock";

/// All filesystem access rights of ABI 1 (execute .. make_sym).
const ABI1_FS: u64 = (1 << 13) - 1;

const STEPS: [&str; 4] = [
    "prctl(PR_SET_NO_NEW_PRIVS)",
    "landlock_create_ruleset(handled_access_fs=ABI 1)",
    "landlock_restrict_self()",
    "open(\"/\") is denied after landlock_restrict_self",
];

/// `landlock`: not required by the default profile (used when a Spec asks
/// for it), so a failure here does not fail `hutch check`.
pub(super) fn probe(host: &HostSettings) -> (Feature, Option<i32>) {
    let abi = match raw::landlock_abi() {
        Ok(v) => v as i32,
        Err(errno) => {
            let (status, why, fix) = match errno {
                Errno::EOPNOTSUPP => (
                    Status::Restricted,
                    "Landlock is built into the kernel but not enabled at boot",
                    "add landlock to the lsm= kernel parameter, e.g. \
                     lsm=landlock,lockdown,yama,integrity,apparmor,bpf",
                ),
                Errno::ENOSYS => (
                    Status::Missing,
                    "the kernel has no Landlock (Linux 5.13+ with CONFIG_SECURITY_LANDLOCK=y)",
                    "use a kernel with CONFIG_SECURITY_LANDLOCK=y and landlock in lsm=",
                ),
                _ => (Status::Missing, "", ""),
            };
            let detail = format!(
                "landlock_create_ruleset(NULL, 0, VERSION) => {errno:?}: {}; {why}",
                errno.desc()
            );
            return (Feature::bad(NAME, false, status, detail, fix), None);
        }
    };
    let res = in_child(|| {
        raw::set_no_new_privs().step(0)?;
        let ruleset = raw::landlock_create_ruleset(ABI1_FS, 0, 0).step(1)?;
        raw::landlock_restrict_self(ruleset.as_fd()).step(2)?;
        match raw::open(c"/", libc::O_RDONLY | libc::O_DIRECTORY) {
            Ok(_) => Err((3, Errno::EEXIST)),
            Err(Errno::EACCES) => Ok(0),
            Err(e) => Err((3, e)),
        }
    });
    let feature = userns::verdict(
        NAME,
        false,
        &STEPS,
        res,
        host,
        &format!("ABI {abi}; a ruleset was enforced (reading / denied)"),
        &|_, _| None,
    );
    (feature, Some(abi))
}
