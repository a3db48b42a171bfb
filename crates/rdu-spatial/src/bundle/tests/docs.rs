//! The worked example of docs/BUNDLE.md is a valid manifest in canonical layout.

use crate::bundle::Bundle;
use crate::manifest::Manifest;

const SPEC: &str = include_str!("../../../../../docs/BUNDLE.md");

#[test]
fn the_documented_example_is_valid_and_canonical() {
    let start = SPEC.find("```json\n").expect("docs/BUNDLE.md has a json example") + "```json\n".len();
    let example = &SPEC[start..start + SPEC[start..].find("```").expect("the example block is closed")];
    let manifest: Manifest = serde_json::from_str(example).unwrap();
    assert_eq!(manifest.to_json(), example, "the example is not in the layout `write` produces");
    let programs = &manifest.programs;
    let entries = [&programs.embed, &programs.head].map(|p| (p.file_source.clone(), p.file_spatial.clone()));
    let kinds = programs.kinds.iter().map(|k| (k.file_source.clone(), k.file_spatial.clone()));
    // The example's hashes are those of empty files.
    let files = entries.into_iter().chain(kinds).flat_map(|(a, b)| [a, b]).map(|p| (p, String::new())).collect();
    let bundle = Bundle { manifest, files };
    assert!(bundle.problems().is_empty(), "{:#?}", bundle.problems());
}
