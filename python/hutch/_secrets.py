"""Secrets the sandbox never holds (docs/secrets.md): a ``Secret`` is read
on the host when the command starts and the sandbox's ``env`` variable
holds a placeholder that the egress proxy swaps for the value on requests
to the secret's hosts; a ``Gateway`` is a plain-HTTP door inside the
sandbox (``http://127.0.0.1:3128/<name>``) to one HTTPS upstream; an
``Intercept`` opts an allowed host into TLS interception. Each maps onto
one ``hutch run`` flag (``--secret``, ``--gateway``, ``--intercept``)."""

from __future__ import annotations

import contextlib
import dataclasses
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Union

PathLike = Union[str, "os.PathLike[str]"]
#: Bytes as an int, or hutch's notation (``"10M"``).
Size = Union[int, str]

#: The largest value hutch reads (a credential is far smaller).
MAX_SECRET_BYTES = 64 * 1024


def _item(key: str, v: object) -> str:
    text = os.fspath(v) if isinstance(v, os.PathLike) else str(v)
    if "," in text or "\n" in text:
        raise ValueError(f"{key}={text!r}: a comma or newline cannot go in a flag (use a profile)")
    return f"{key}={text}"


def _rules(methods: Sequence[str], paths: Sequence[str]) -> list[str]:
    if isinstance(methods, str) or isinstance(paths, str):
        raise TypeError("methods and paths are sequences of strings, not one string")
    return [_item("method", m) for m in methods] + [_item("path", p) for p in paths]


def _budget(max_requests: int | None, max_bytes: Size | None) -> list[str]:
    a = []
    if max_requests is not None:
        a.append(_item("max-requests", int(max_requests)))
    if max_bytes is not None:
        a.append(_item("max-bytes", max_bytes))
    return a


@dataclass(frozen=True)
class Secret:
    """A credential kept on the host.

    Exactly one source: ``from_env`` (a variable of this process),
    ``from_file`` (read whole; one trailing newline dropped), ``from_fd``
    (an fd of this process, passed to hutch and read to its end), or
    ``value`` (bytes or text held by this process: handed to hutch through
    a memfd, never argv). ``hosts``: where it may be sent (each allowed,
    and a gateway's upstream or intercepted). ``env``: the sandbox's
    variable that holds the placeholder. ``inject``: ``"replace"`` (the
    placeholder is swapped wherever the client put it), ``"bearer"``,
    ``"header:NAME"`` or ``"basic:USER"``. The repr never shows ``value``.
    """

    name: str
    hosts: Sequence[str]
    env: str | None = None
    from_env: str | None = None
    from_file: PathLike | None = None
    from_fd: int | None = None
    value: bytes | str | None = field(default=None, repr=False, compare=False)
    methods: Sequence[str] = ()
    paths: Sequence[str] = ()
    inject: str = "replace"

    def _sources(self) -> int:
        return sum(x is not None for x in (self.from_env, self.from_file, self.from_fd, self.value))

    def flag(self) -> str:
        """The ``--secret`` value (a ``value`` must have been handed over
        as an fd first: ``SecretFds``)."""
        if self._sources() != 1:
            raise ValueError(
                f"secret {self.name!r}: exactly one of from_env, from_file, from_fd or value"
            )
        if self.value is not None:
            raise ValueError(f"secret {self.name!r}: a value goes through SecretFds first")
        if isinstance(self.hosts, str):
            raise TypeError(f"secret {self.name!r}: hosts is a sequence of host patterns")
        a = [_item("name", self.name)]
        if self.env is not None:
            a.append(_item("env", self.env))
        if self.from_env is not None:
            a.append(_item("from-env", self.from_env))
        if self.from_file is not None:
            a.append(_item("from-file", os.path.abspath(os.fspath(self.from_file))))
        if self.from_fd is not None:
            a.append(_item("from-fd", int(self.from_fd)))
        a += [_item("host", h) for h in self.hosts]
        a += _rules(self.methods, self.paths)
        a.append(_item("inject", self.inject))
        return ",".join(a)


@dataclass(frozen=True)
class Gateway:
    """``http://127.0.0.1:3128/<name>`` inside the sandbox, mapped to
    ``upstream`` (``https://host[:port][/base]``, an allowed host); each
    of ``env`` is set to that URL (``ANTHROPIC_BASE_URL``). Rules:
    ``methods``, ``paths`` (prefixes), ``max_requests``, ``max_bytes``."""

    name: str
    upstream: str
    env: Sequence[str] = ()
    methods: Sequence[str] = ()
    paths: Sequence[str] = ()
    max_requests: int | None = None
    max_bytes: Size | None = None

    def flag(self) -> str:
        if isinstance(self.env, str):
            raise TypeError(f"gateway {self.name!r}: env is a sequence of variable names")
        a = [_item("name", self.name), _item("upstream", self.upstream)]
        a += [_item("env", e) for e in self.env]
        a += _rules(self.methods, self.paths)
        a += _budget(self.max_requests, self.max_bytes)
        return ",".join(a)


@dataclass(frozen=True)
class Intercept:
    """An allowed host (``name[:port]``) whose TLS the proxy terminates
    with the sandbox's own CA, with optional request rules."""

    host: str
    methods: Sequence[str] = ()
    paths: Sequence[str] = ()
    max_requests: int | None = None
    max_bytes: Size | None = None

    def flag(self) -> str:
        a = [_item("host", self.host)]
        a += _rules(self.methods, self.paths)
        a += _budget(self.max_requests, self.max_bytes)
        return ",".join(a)


class SecretFds:
    """The fds one launch hands to hutch for its secrets: a memfd per
    ``value`` (the value never enters argv), the caller's own ``from_fd``
    fds. ``options`` is the options with every ``value`` replaced by its
    memfd; ``pass_fds`` what the child keeps; ``close()`` after the spawn."""

    def __init__(self, options: Mapping[str, Any]) -> None:
        self._own: list[int] = []
        self.pass_fds: tuple[int, ...] = ()
        self.options: dict[str, Any] = dict(options)
        secrets = options.get("secrets")
        if not secrets:
            return
        if isinstance(secrets, Secret):
            raise TypeError("secrets is a sequence of hutch.Secret")
        out: list[Secret] = []
        keep: list[int] = []
        try:
            for s in secrets:
                if not isinstance(s, Secret):
                    raise TypeError(f"secrets: {type(s).__name__} is not a hutch.Secret")
                if s._sources() != 1:
                    raise ValueError(
                        f"secret {s.name!r}: exactly one of from_env, from_file, from_fd or value"
                    )
                if s.value is not None:
                    data = s.value.encode() if isinstance(s.value, str) else bytes(s.value)
                    if not data or len(data) > MAX_SECRET_BYTES:
                        raise ValueError(
                            f"secret {s.name!r}: the value must be 1 to {MAX_SECRET_BYTES} bytes"
                        )
                    fd = os.memfd_create("hutch-secret", os.MFD_CLOEXEC)
                    self._own.append(fd)
                    os.write(fd, data)
                    os.lseek(fd, 0, os.SEEK_SET)
                    s = dataclasses.replace(s, value=None, from_fd=fd)
                if s.from_fd is not None:
                    keep.append(int(s.from_fd))
                out.append(s)
        except BaseException:
            self.close()
            raise
        self.options["secrets"] = out
        self.pass_fds = tuple(keep)

    def close(self) -> None:
        for fd in self._own:
            with contextlib.suppress(OSError):
                os.close(fd)
        self._own = []
