//! The refusal of a privileged install, shared by the three binaries
//! (`hutch`, `hutch-bwrap`, `hutch-oci`). None of them drops rights it was
//! started with: setuid root, each caller-named path (`--status-file`,
//! `--hutch-status-file`, `--log`, a bundle) would be opened with the
//! owner's rights. So each refuses to start instead (docs/security-model.md,
//! docs/bwrap.md).

use crate::sys::{ElevatedStart, elevated_start};

/// Exit with one line on stderr when this process was started with rights
/// its caller may not have ([`elevated_start`]); return otherwise. The
/// first call of each binary's `main`, before argv, the environment or any
/// file. `prefix` starts the line (`bwrap` for hutch-bwrap, like its other
/// errors), `binary` names the program, `exit_code` is its setup-failure
/// code.
pub fn refuse_elevated_start(prefix: &str, binary: &str, exit_code: i32) {
    let Some(why) = elevated_start() else {
        return;
    };
    eprintln!("{}", refusal(prefix, binary, why, &own_path(binary)));
    std::process::exit(exit_code);
}

/// This executable's path for the advice (read only after the decision to
/// refuse), its control characters escaped so the line stays one line.
fn own_path(binary: &str) -> String {
    std::env::current_exe()
        .map(|p| p.to_string_lossy().into_owned())
        .unwrap_or_else(|_| binary.to_string())
        .escape_debug()
        .to_string()
}

/// The one line: what, why, what to do.
fn refusal(prefix: &str, binary: &str, why: ElevatedStart, path: &str) -> String {
    let fix = match why {
        ElevatedStart::Uid(_) | ElevatedStart::Gid(_) => format!(
            "remove the bits (chmod u-s,g-s {path}), or make the setuid program that starts it drop its rights first"
        ),
        ElevatedStart::SecureExec => format!("remove them (setcap -r {path})"),
    };
    format!(
        "{prefix}: refusing to run: {binary} is installed setuid/setgid or with file capabilities \
         ({why}); it does not support privileged installs: it would act on files with the owner's \
         rights; {fix}; unprivileged users get sandboxes through user namespaces \
         (sysctl kernel.unprivileged_userns_clone=1 where applicable)"
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sys::IdMismatch;

    #[test]
    fn the_refusal_says_what_why_and_what_to_do_in_one_line() {
        let ids = IdMismatch {
            real: 65534,
            effective: 0,
            saved: 0,
        };
        let line = refusal(
            "bwrap",
            "hutch-bwrap",
            ElevatedStart::Uid(ids),
            "/usr/bin/bwrap",
        );
        assert_eq!(
            line,
            "bwrap: refusing to run: hutch-bwrap is installed setuid/setgid or with file \
             capabilities (real uid 65534, effective uid 0, saved uid 0); it does not support \
             privileged installs: it would act on files with the owner's rights; remove the bits \
             (chmod u-s,g-s /usr/bin/bwrap), or make the setuid program that starts it drop its \
             rights first; \
             unprivileged users get sandboxes through user namespaces \
             (sysctl kernel.unprivileged_userns_clone=1 where applicable)"
        );
        let caps = refusal("hutch", "hutch", ElevatedStart::SecureExec, "/bin/hutch");
        assert!(
            caps.contains("(AT_SECURE is set: file capabilities"),
            "{caps}"
        );
        assert!(
            caps.contains("remove them (setcap -r /bin/hutch)"),
            "{caps}"
        );
        assert!(!caps.contains('\n'));
    }

    #[test]
    fn an_ordinary_start_returns() {
        // Would exit the test binary if it refused.
        refuse_elevated_start("hutch", "hutch", 125);
    }
}
