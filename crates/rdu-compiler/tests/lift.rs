//! `front::lift` on whole programs: the worked example (golden graph, evaluation), every
//! authored program of every preset, the golden refusals of `tests/data/lift_errors/`, and
//! a property: lift never panics.

use rdu_compiler::front::lift;
use rdu_compiler::lang::parse;
use rdu_compiler::model::author::{embed_source, head_source, source_of};
use rdu_compiler::model::presets;
use rdu_compiler::model::spec::Cut;
use rdu_compiler::model::storage::Storage;

#[test]
fn authored_programs_of_every_preset_lift() {
    let mut failures = Vec::new();
    for name in presets::names() {
        let spec = presets::get(name).expect("preset loads");
        for cut in [Cut::Forward { seq: 3 }, Cut::Decode { ctx: 16 }] {
            let mut sources = vec![("embed".to_string(), embed_source(&spec, cut, &Storage::Dense))];
            for l in 0..spec.n_layers() {
                sources.push((format!("layer {l}"), source_of(&spec, l, cut, &Storage::Dense)));
            }
            sources.push(("head".to_string(), head_source(&spec, cut, &Storage::Dense)));
            for (what, source) in sources {
                let program = parse(&source.text).expect("authored programs parse");
                if let Err(r) = lift(&program) {
                    failures.push(format!("{name} {cut:?} {what}: {r}"));
                }
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}
