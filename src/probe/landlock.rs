//! Landlock: the ABI version the kernel reports, and a real restriction
//! enforced in a child (a ruleset with no rules must deny reading "/").

use crate::sys::Errno;
use crate::sys::probe::{self as raw};

use super::userns;
use super::{Feature, Host, Status, in_child};

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
pub(super) fn probe(host: &Host) -> (Feature, Option<i32>) {
    let abi = match raw::landlock_abi() {
        Ok(v) => v,
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
        raw::no_new_privs(0)?;
        raw::landlock_restrict(ABI1_FS, 1)?;
        match raw::open_path(b"/\0", libc::O_RDONLY | libc::O_DIRECTORY, 3) {
            Ok(fd) => {
                raw::close(fd);
                Err((3, Errno::EEXIST))
            }
            Err((_, Errno::EACCES)) => Ok(0),
            Err(e) => Err(e),
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
