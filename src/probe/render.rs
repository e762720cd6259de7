//! The human-readable `hutch check` output.

use std::fmt::Write;

use super::Report;

/// One aligned line per feature: name, status, detail, then the fix on an
/// indented line when there is one; a summary line last.
pub fn human(r: &Report) -> String {
    let mut out = String::new();
    let who = if r.root {
        "root".to_string()
    } else {
        format!("uid {}", r.uid)
    };
    let _ = writeln!(
        out,
        "hutch {} on Linux {} as {who}",
        r.hutch_version, r.kernel_release
    );
    let width = r.features.iter().map(|f| f.name.len()).max().unwrap_or(0);
    for f in &r.features {
        let need = if f.required { "" } else { " (optional)" };
        let _ = writeln!(
            out,
            "{:width$}  {:10}  {}{need}",
            f.name,
            f.status.word(),
            f.detail
        );
        if let Some(fix) = &f.fix {
            let _ = writeln!(out, "{:width$}  {:10}  fix: {fix}", "", "");
        }
    }
    // Which resource-limit flags would work here, and how or why not.
    if let Some(limits) = r.cgroup.get("limits").and_then(|l| l.as_object()) {
        for (name, l) in limits {
            let flag = l["flag"]
                .as_str()
                .map(str::to_string)
                .unwrap_or_else(|| format!("--{name}"));
            let line = if l["works"].as_bool() == Some(true) {
                format!("works ({})", l["by"].as_str().unwrap_or("cgroup v2"))
            } else {
                format!(
                    "refused: {}",
                    l["why_not"].as_str().unwrap_or("not enforceable here")
                )
            };
            let _ = writeln!(out, "{flag:width$}  {:10}  {line}", "limit");
        }
    }
    let failing: Vec<&str> = r
        .features
        .iter()
        .filter(|f| f.required && !f.ok)
        .map(|f| f.name)
        .collect();
    if failing.is_empty() {
        let _ = writeln!(out, "everything `hutch run` needs by default works here");
    } else {
        let _ = writeln!(
            out,
            "`hutch run` cannot work here by default: {} not usable",
            failing.join(", ")
        );
    }
    out
}
