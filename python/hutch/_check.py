"""``hutch.check()``: which kernel features hutch needs work here."""

from __future__ import annotations

import json
import subprocess

from . import _binary
from ._core import no_report
from ._types import CheckReport


def check() -> CheckReport:
    """Run ``hutch check --json``: every kernel feature hutch uses, tried in
    short-lived child processes, with why it fails and how to fix it.
    ``report.ok`` says whether everything ``hutch.run`` needs by default
    works; ``report.limits["memory"].works`` whether a memory limit can be
    enforced."""
    p = subprocess.run(
        [_binary.binary(), "check", "--json"],
        stdin=subprocess.DEVNULL,
        capture_output=True,
        check=False,
    )
    try:
        doc = json.loads(p.stdout)
    except ValueError:
        raise no_report("check", p.returncode, p.stderr) from None
    return CheckReport.from_dict(doc)
