//! `--pty-size COLSxROWS` (`hutch run --pty`, `hutch session run --pty`).

use anyhow::{Result, bail};

/// `COLSxROWS`, each from 1 to 65535.
pub(crate) fn parse_size(v: &str) -> Result<(u16, u16)> {
    let parsed = v.split_once(['x', 'X']).and_then(|(c, r)| {
        let c: u16 = c.parse().ok()?;
        let r: u16 = r.parse().ok()?;
        (c > 0 && r > 0).then_some((c, r))
    });
    match parsed {
        Some(size) => Ok(size),
        None => bail!(
            "--pty-size {v:?}: expected COLSxROWS, two numbers from 1 to 65535 (e.g. 120x40)"
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::parse_size;

    #[test]
    fn sizes_parse_and_nonsense_is_refused() {
        assert_eq!(parse_size("80x24").unwrap(), (80, 24));
        assert_eq!(parse_size("120X40").unwrap(), (120, 40));
        for bad in ["", "80", "0x24", "80x0", "x", "80x24x1", "70000x1", "-1x5"] {
            assert!(parse_size(bad).is_err(), "{bad:?} was accepted");
        }
    }
}
