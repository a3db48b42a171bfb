//! Golden refusals: every program in `tests/data/lift_errors/` states the diagnostics lift
//! must give in `# expect: CODE [index=N] binder=NAME [at=TEXT]` comments (`at` is the text
//! the diagnostic's span covers). The set of (code, index, binder) must match exactly.

use rdu_compiler::front::lift;
use rdu_compiler::lang::parse;
use std::collections::BTreeSet;
use std::path::Path;

/// (code, index, binder, at)
type Expect = (String, Option<usize>, Option<String>, Option<String>);

fn expectations(text: &str) -> Vec<Expect> {
    let mut out = Vec::new();
    for line in text.lines() {
        let Some(rest) = line.trim().strip_prefix("# expect:") else { continue };
        let rest = rest.trim();
        let (code, mut fields) = rest.split_once(' ').unwrap_or((rest, ""));
        let (mut index, mut binder, mut at) = (None, None, None);
        while !fields.is_empty() {
            let fields_now = fields.trim_start();
            let (key, value_and_rest) = fields_now.split_once('=').expect("key=value");
            // `at=` takes the rest of the line (it may hold spaces and commas).
            let (value, rest) = if key == "at" {
                (value_and_rest, "")
            } else {
                value_and_rest.split_once(' ').unwrap_or((value_and_rest, ""))
            };
            match key {
                "index" => index = Some(value.parse().expect("an index")),
                "binder" => binder = Some(value.to_string()),
                "at" => at = Some(value.to_string()),
                other => panic!("unknown expectation field `{other}` in `{line}`"),
            }
            fields = rest;
        }
        out.push((code.to_string(), index, binder, at));
    }
    out
}

#[test]
fn every_golden_program_is_refused_with_exactly_its_expected_diagnostics() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/lift_errors");
    let mut files: Vec<_> = std::fs::read_dir(&dir).expect("the golden directory").map(|e| e.unwrap().path()).collect();
    files.sort();
    assert!(files.len() >= 20, "expected one file per fault and a mixed one, found {}", files.len());
    let mut codes_seen = BTreeSet::new();
    for path in files {
        let name = path.file_name().unwrap().to_string_lossy().to_string();
        let text = std::fs::read_to_string(&path).unwrap();
        let expected = expectations(&text);
        assert!(!expected.is_empty(), "{name}: no `# expect:` lines");
        let program = parse(&text).unwrap_or_else(|d| panic!("{name}: does not parse: {}", d[0]));
        let refusal = match lift(&program) {
            Ok(_) => panic!("{name}: lifted, but should have been refused"),
            Err(r) => r,
        };
        let got: BTreeSet<(String, Option<usize>, Option<String>)> =
            refusal.diagnostics.iter().map(|d| (d.code.to_string(), d.index, d.binder.clone())).collect();
        let want: BTreeSet<(String, Option<usize>, Option<String>)> =
            expected.iter().map(|(c, i, b, _)| (c.clone(), *i, b.clone())).collect();
        assert_eq!(got, want, "{name}: diagnostics differ; got:\n{refusal}");
        for (code, index, binder, at) in &expected {
            codes_seen.insert(code.clone());
            let Some(at) = at else { continue };
            let d = refusal
                .diagnostics
                .iter()
                .find(|d| d.code == code && d.index == *index && d.binder == *binder)
                .expect("matched above");
            let spanned = text.get(d.span.range()).unwrap_or("<out of range>");
            assert_eq!(spanned, at, "{name}: {code} points at `{spanned}`, not `{at}`");
        }
        for d in &refusal.diagnostics {
            assert!(!d.message.is_empty() && !d.message.ends_with('.'), "{name}: message style: {}", d.message);
            assert!(d.message.chars().next().is_some_and(|c| !c.is_uppercase()), "{name}: {}", d.message);
        }
    }
    let all =
        ["E0201", "E0202", "E0203", "E0204", "E0205", "E0206", "E0207", "E0208", "E0210", "E0211", "E0212", "E0213"];
    let missing: Vec<_> = all.iter().filter(|c| !codes_seen.contains(**c)).collect();
    assert!(missing.is_empty(), "codes without a golden program: {missing:?}");
}
