//! Provision, seal, then let the agent work (issue 13 §1, §6): a seal
//! freezes what provisioning did as a read-only layer, the default diff
//! shows only what came after it (and applies to a fresh checkout),
//! `--since baseline` shows everything, `--network none` refuses egress
//! for good, a crash at any point of a seal leaves a usable session, and
//! the diff leaves out what the repository's `.gitignore` ignores.

mod common;
mod session_prod_support;
mod session_support;

use anyhow::Result;
use session_prod_support::*;

use crate::common::can_launch_as;

fn provision_seal_agent(who: As) -> Result<()> {
    let w = World::new("seal-flow", who);
    let repo_dir = w.path("repo");
    let rev = repo(
        &w,
        &repo_dir,
        &[
            (".gitignore", ".deps/\n__pycache__/\n"),
            ("requirements.txt", "requests\n"),
            ("app.py", "print('app')\n"),
            ("lib.py", "X = 1\n"),
        ],
    )?;
    let id = w.create(&[
        "--from-git",
        repo_dir.to_str().unwrap(),
        "--rev",
        &rev,
        "--workspace-path",
        "/workspace/app",
    ])?;
    // Provisioning: dependencies into .deps (ignored) and a pin in a
    // tracked file.
    ok(&w.session(&[
        "run",
        &id,
        "--",
        "sh",
        "-c",
        "mkdir -p .deps/pkg && echo 'VERSION = 1' > .deps/pkg/__init__.py && echo 'urllib3==2' >> requirements.txt",
    ]))?;
    let sealed = ok(&w.session(&["seal", &id, "--network", "none", "--json"]))?;
    let sealed: serde_json::Value = serde_json::from_str(&sealed)?;
    assert_eq!(sealed["verb"], "session.seal");
    assert_eq!(sealed["result"]["index"], 1);
    assert_eq!(sealed["result"]["network_none"], true);
    assert_eq!(sealed["result"]["fingerprint"].as_str().unwrap().len(), 64);
    // The agent.
    ok(&w.session(&[
        "run",
        &id,
        "--",
        "sh",
        "-c",
        "echo 'Y = 2' >> lib.py && test -f .deps/pkg/__init__.py",
    ]))?;
    let agent = ok(&w.session(&["diff", &id]))?;
    assert!(
        agent.contains("diff --git a/lib.py b/lib.py") && agent.contains("+Y = 2"),
        "{agent}"
    );
    assert!(
        !agent.contains("requirements.txt") && !agent.contains(".deps"),
        "{agent}"
    );
    w.applies_to_fresh_checkout(&repo_dir, &rev, &agent)?;
    let all = ok(&w.session(&["diff", &id, "--since", "baseline"]))?;
    assert!(
        all.contains("a/lib.py") && all.contains("+urllib3==2"),
        "{all}"
    );
    assert!(
        !all.contains(".deps"),
        "ignored provisioning output is left out: {all}"
    );
    w.applies_to_fresh_checkout(&repo_dir, &rev, &all)?;
    let stat = ok(&w.session(&["diff", &id, "--since", "1", "--format", "stat"]))?;
    assert!(
        stat.contains("lib.py") && stat.contains("1 file changed"),
        "{stat}"
    );
    // No egress any more, whatever the command asks.
    let o = w.session(&["run", &id, "--allow-host", "pypi.org", "--", "true"]);
    assert_eq!(o.status.code(), Some(125), "{o:?}");
    let err = stderr(&o);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.contains("--network none"), "{err}");
    // What show reports.
    let show: serde_json::Value = serde_json::from_str(&ok(&w.session(&["show", &id, "--json"]))?)?;
    let r = &show["result"];
    assert_eq!(r["network_sealed"], true);
    assert_eq!(r["seals"].as_array().unwrap().len(), 1);
    assert_eq!(r["source"]["commit"], rev.as_str());
    assert_eq!(r["workspace_path"], "/workspace/app");
    assert_eq!(r["commands_run"], 2);
    let audit = w.audit(&id)?;
    assert!(
        audit
            .iter()
            .any(|l| l["event"] == "seal" && l["network_none"] == true)
    );
    assert!(
        audit
            .iter()
            .any(|l| l["event"] == "refused" && l["what"] == "run")
    );
    ok(&w.session(&["close", &id]))?;
    Ok(())
}

as_root_and_unprivileged!(provision_seal_agent: provision_seal_agent_as_root, provision_seal_agent_unprivileged);

/// A seal killed (SIGKILL) at each point of its work: before the commit
/// the session is as before the seal (the change still shows since the
/// baseline and since the last seal), after it the seal holds; either
/// way commands run, and a later seal works.
fn crash_during_seal(who: As) -> Result<()> {
    let w = World::new("seal-crash", who);
    let src = w.tree("src", &[("a.txt", "a\n")])?;
    w.own(&src);
    for point in [
        "seal-manifest",
        "seal-renamed",
        "seal-fresh-upper",
        "seal-committed",
    ] {
        let id = w.create(&["--from", src.to_str().unwrap()])?;
        ok(&w.session(&["run", &id, "--", "sh", "-c", "echo 1 > f.txt"]))?;
        let o = w
            .session_command(&["seal", &id])
            .env("HUTCH_FAULT", point)
            .output()?;
        assert_eq!(
            std::os::unix::process::ExitStatusExt::signal(&o.status),
            Some(9),
            "{point}: {o:?}"
        );
        let committed = point == "seal-committed";
        let since_last = ok(&w.session(&["diff", &id, "--format", "stat"]))?;
        assert_eq!(
            since_last.contains("f.txt"),
            !committed,
            "{point}: {since_last}"
        );
        let all = ok(&w.session(&["diff", &id, "--since", "baseline", "--format", "stat"]))?;
        assert!(all.contains("f.txt"), "{point}: {all}");
        assert_eq!(
            ok(&w.session(&["run", &id, "--", "cat", "f.txt"]))?.trim(),
            "1"
        );
        let show: serde_json::Value =
            serde_json::from_str(&ok(&w.session(&["show", &id, "--json"]))?)?;
        let seals = show["result"]["seals"].as_array().unwrap().len();
        assert_eq!(seals, usize::from(committed), "{point}");
        let rolled_back = w
            .audit(&id)?
            .iter()
            .any(|l| l["event"] == "seal-rolled-back");
        assert_eq!(rolled_back, !committed, "{point}");
        // A clean seal afterwards, and commands on top of it.
        ok(&w.session(&["seal", &id]))?;
        assert_eq!(ok(&w.session(&["diff", &id]))?, "");
        ok(&w.session(&["run", &id, "--", "sh", "-c", "echo 2 >> f.txt"]))?;
        assert!(ok(&w.session(&["diff", &id]))?.contains("+2"));
        ok(&w.session(&["close", &id]))?;
    }
    Ok(())
}

as_root_and_unprivileged!(crash_during_seal: crash_during_seal_leaves_a_usable_session_as_root, crash_during_seal_leaves_a_usable_session_unprivileged);

/// A Python test suite run in the session leaves `__pycache__/` behind;
/// the repository's `.gitignore` names it, so the default diff holds only
/// the real edit, `--format json` lists what was left out, and
/// `--include-ignored` shows it all. `--exclude` leaves out more.
fn gitignored_output(who: As) -> Result<()> {
    let w = World::new("seal-ignore", who);
    let repo_dir = w.path("repo");
    let rev = repo(
        &w,
        &repo_dir,
        &[
            (".gitignore", "__pycache__/\n*.pyc\n.pytest_cache/\n"),
            ("pkg/__init__.py", ""),
            ("tests/__init__.py", ""),
            ("pkg/calc.py", "def add(a, b):\n    return a - b\n"),
            ("notes.txt", "notes\n"),
            (
                "tests/test_calc.py",
                "import unittest\nfrom pkg.calc import add\n\nclass T(unittest.TestCase):\n    def test_add(self):\n        self.assertEqual(add(2, 2), 4)\n",
            ),
        ],
    )?;
    let id = w.create(&["--from-git", repo_dir.to_str().unwrap(), "--rev", &rev])?;
    let out = w.session(&[
        "run",
        &id,
        "--",
        "sh",
        "-c",
        "sed -i 's/a - b/a + b/' pkg/calc.py && echo more >> notes.txt && python3 -B -c pass && python3 -m unittest discover -s tests -t . 2>&1 && mkdir -p .pytest_cache && echo x > .pytest_cache/v",
    ]);
    ok(&out)?;
    let patch = ok(&w.session(&["diff", &id, "--exclude", "notes.txt"]))?;
    assert!(
        patch.contains("a/pkg/calc.py") && patch.contains("+    return a + b"),
        "{patch}"
    );
    assert!(
        !patch.contains("__pycache__") && !patch.contains(".pytest_cache"),
        "{patch}"
    );
    assert!(
        !patch.contains("notes.txt"),
        "--exclude leaves a tracked path out too: {patch}"
    );
    w.applies_to_fresh_checkout(&repo_dir, &rev, &patch)?;
    let json: serde_json::Value =
        serde_json::from_str(&ok(&w.session(&["diff", &id, "--format", "json"]))?)?;
    let files: Vec<&str> = json["files"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["path"].as_str().unwrap())
        .collect();
    assert_eq!(files, ["notes.txt", "pkg/calc.py"]);
    let ignored: Vec<&str> = json["ignored"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["path"].as_str().unwrap())
        .collect();
    assert!(
        ignored.contains(&"pkg/__pycache__") && ignored.contains(&"tests/__pycache__"),
        "{ignored:?}"
    );
    assert!(ignored.contains(&".pytest_cache"), "{ignored:?}");
    let everything = ok(&w.session(&["diff", &id, "--include-ignored", "--format", "stat"]))?;
    assert!(
        everything.contains("__pycache__/calc.cpython") && everything.contains(".pytest_cache/v"),
        "{everything}"
    );
    // The export's patch follows the same rules.
    let archive = w.path("out.tar");
    let o = w.session(&["export", &id, "--out", archive.to_str().unwrap(), "--patch"]);
    let manifest: serde_json::Value = serde_json::from_str(&ok(&o)?)?;
    assert_eq!(manifest["session"], id.as_str());
    assert_eq!(manifest["commit"], rev.as_str());
    assert!(manifest["fingerprint"].as_str().unwrap().len() == 64);
    let text = serde_json::to_string(&manifest)?;
    assert!(
        !text.contains(w.state.to_str().unwrap()),
        "no host path: {text}"
    );
    let listing = std::process::Command::new("tar")
        .arg("-xOf")
        .arg(&archive)
        .arg(".hutch/changes.patch")
        .output()?;
    let exported = String::from_utf8_lossy(&listing.stdout);
    assert!(
        exported.contains("pkg/calc.py") && !exported.contains("__pycache__"),
        "{exported}"
    );
    ok(&w.session(&["close", &id]))?;
    Ok(())
}

#[test]
fn gitignored_output_is_left_out_as_root() -> Result<()> {
    require!(
        can_launch_as(As::Root).is_ok() && can_sandbox(),
        "needs root and a launcher"
    );
    require!(crate::common::have("python3"), "needs python3");
    gitignored_output(As::Root)
}

#[test]
fn gitignored_output_is_left_out_unprivileged() -> Result<()> {
    require!(
        can_launch_as(As::Nobody).is_ok() && can_sandbox(),
        "needs a launcher"
    );
    require!(crate::common::have("python3"), "needs python3");
    gitignored_output(As::Nobody)
}
