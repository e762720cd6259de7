"""Agent CLIs (Claude Code, Codex, ...) on one prompt: ``hutch run --agent
NAME --prompt TEXT`` (docs/agents.md). The profile brings the CLI's needs
(a non-root uid, a fresh HOME, the model API's gateway and key, its
settings, a wall clock and a preferred memory cap) and says how the CLI
takes a prompt (``claude -p``, ``codex exec``): the prompt goes to the CLI
as one argument, never through a shell. Every keyword overrides the
profile's default for this call."""

from __future__ import annotations

import os
import posixpath
from collections.abc import Mapping, Sequence
from typing import Any

from ._options import PathLike

#: The variable naming directories of the caller's own profiles
#: (``NAME.toml``), searched before the built-in ones (by hutch itself).
AGENTS_PATH_VAR = "HUTCH_AGENTS_PATH"


def profile_ref(agent: str, agents_dir: PathLike | None) -> str:
    """What ``--agent`` gets: ``agents_dir/NAME.toml`` when that file
    exists, else the name (hutch looks in ``HUTCH_AGENTS_PATH``, then its
    built-in profiles) or a profile file's path as given."""
    if not isinstance(agent, str) or not agent:
        raise TypeError("agent: a profile's name (\"claude-code\") or a profile file's path")
    if agents_dir is not None and "/" not in agent and not agent.endswith(".toml"):
        own = os.path.join(os.fspath(agents_dir), f"{agent}.toml")
        if os.path.isfile(own):
            return os.path.abspath(own)
    if "/" in agent or agent.endswith(".toml"):
        return os.path.abspath(agent)
    return agent


def agent_options(
    agent: str,
    *,
    prompt: str,
    repo: PathLike | None,
    workspace_at: str | None,
    allowed_egress: Sequence[str],
    agents_dir: PathLike | None,
    options: Mapping[str, Any],
) -> dict[str, Any]:
    """The ``hutch run`` options of one agent invocation: the caller's
    ``options`` plus the profile, the prompt, the repository's overlay and
    the extra hosts."""
    if not isinstance(prompt, str):
        raise TypeError(f"prompt: a str, not {type(prompt).__name__}")
    if not prompt:
        raise ValueError("prompt is empty: give the agent's task")
    if isinstance(allowed_egress, str):
        raise TypeError("allowed_egress: a sequence of host patterns, not one string")
    o = dict(options)
    for key in ("workspace", "cwd") if repo is not None else ():
        if key in o:
            raise TypeError(f"{key}: given by repo= and workspace_at= for an agent")
    if repo is not None:
        host = os.path.abspath(os.fspath(repo))
        if not os.path.isdir(host):
            raise ValueError(f"repo: {host} is not a directory")
        dest = workspace_at or posixpath.join("/workspace", os.path.basename(host.rstrip("/")))
        o["workspace"] = (host, dest)
        o["cwd"] = dest
    elif workspace_at is not None:
        raise TypeError("workspace_at: where repo= appears inside; give repo= too")
    if allowed_egress:
        # Added to the profile's (its model API).
        o["allow_hosts"] = [*o.get("allow_hosts", ()), *allowed_egress]
    o["extra_args"] = [
        *o.get("extra_args", ()),
        "--agent",
        profile_ref(agent, agents_dir),
        "--prompt",
        prompt,
    ]
    return o
