"""The package's version: the crate's (Cargo.toml), checked against the
binary's `hutch version --json` on first use (tests/test_package.py keeps
them equal)."""

__version__ = "0.1.0"

#: The machine interface version (docs/machine.md) this package speaks.
MACHINE_VERSION = 1
