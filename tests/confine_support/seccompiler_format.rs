//! A hutch seccomp profile in the seccompiler compiler's terms (the test
//! oracle, `seccomp_reference`): the filters in file order, and a stage
//! with `unlisted_action` rewritten as the deny stage seccompiler can
//! express. Used by `tests/confine_codegen.rs` and the benchmark driver
//! `examples/seccomp_codegen_bench.rs`.

use serde_json::{Value, json};

/// A profile's filters in file order (their order is their meaning;
/// `serde_json::Value` would sort them by name).
pub struct Ordered(Vec<(String, Value)>);

impl<'de> serde::Deserialize<'de> for Ordered {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> serde::de::Visitor<'de> for V {
            type Value = Ordered;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a profile")
            }
            fn visit_map<M: serde::de::MapAccess<'de>>(
                self,
                mut m: M,
            ) -> Result<Ordered, M::Error> {
                let mut out = Vec::new();
                while let Some(kv) = m.next_entry()? {
                    out.push(kv);
                }
                Ok(Ordered(out))
            }
        }
        d.deserialize_map(V)
    }
}

impl Ordered {
    pub fn parse(text: &str) -> Ordered {
        serde_json::from_str(text).unwrap()
    }
    pub fn text(&self) -> String {
        let filters: Vec<String> = self
            .0
            .iter()
            .map(|(k, v)| format!("{}: {v}", json!(k)))
            .collect();
        format!("{{{}}}", filters.join(", "))
    }
    pub fn value(&self) -> Value {
        Value::Object(self.0.iter().cloned().collect())
    }
}

/// The seccompiler equivalent of a stage that uses `unlisted_action`:
/// "allow if any rule (an AND of `==`) matches, else E" (unlisted syscalls
/// allowed) becomes its complement as a deny stage: AND over the rules of
/// (OR of `!=`), expanded into rules of `!=` conditions.
pub fn to_seccompiler(profile: &str) -> String {
    let mut out = Ordered::parse(profile);
    for (_, f) in out.0.iter_mut() {
        let Some(unlisted) = f.as_object_mut().unwrap().remove("unlisted_action") else {
            continue;
        };
        assert_eq!(unlisted, json!("allow"));
        assert_eq!(f["match_action"], json!("allow"));
        let deny = f["mismatch_action"].clone();
        // syscall -> the complement's rules (each a list of `ne` conditions)
        let mut by_syscall: Vec<(String, Vec<Vec<Value>>)> = Vec::new();
        for r in f["filter"].as_array().unwrap() {
            let negated: Vec<Value> = r["args"]
                .as_array()
                .unwrap()
                .iter()
                .map(|c| {
                    assert_eq!(c["op"], json!("eq"), "only == rules are converted");
                    let mut c = c.clone();
                    c["op"] = json!("ne");
                    c.as_object_mut().unwrap().remove("comment");
                    c
                })
                .collect();
            let name = r["syscall"].as_str().unwrap().to_string();
            let at = match by_syscall.iter().position(|(n, _)| *n == name) {
                Some(i) => i,
                None => {
                    by_syscall.push((name, vec![Vec::new()]));
                    by_syscall.len() - 1
                }
            };
            let rules = &mut by_syscall[at].1;
            *rules = rules
                .iter()
                .flat_map(|rule| {
                    negated.iter().map(move |c| {
                        let mut r = rule.clone();
                        r.push(c.clone());
                        r
                    })
                })
                .collect();
        }
        let mut filter = Vec::new();
        for (s, rules) in by_syscall {
            for conds in rules {
                filter.push(json!({"syscall": s, "args": conds}));
            }
        }
        *f = json!({"mismatch_action": "allow", "match_action": deny, "filter": filter});
    }
    out.text()
}
