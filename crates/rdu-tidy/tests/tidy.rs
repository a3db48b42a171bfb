//! The house as it is kept: every rule of `rdu_tidy` over the whole repository. A failure
//! names each file and line that breaks a rule, and what to do.

use rdu_tidy::{crates, docs, functions, lex, modules, places, relative, repository, rust_files, unsafety};

/// The longest a function may be, in lines (its `fn` line to its closing brace).
const MAX_FUNCTION_LINES: usize = 100;

/// Loops known when this test was written and being taken apart on another branch; each entry
/// is `(crate, parent module, members)`. Remove an entry when its loop is gone.
const LOOPS_BEING_REMOVED: &[(&str, &str, &[&str])] = &[
    // `sim::ops` holds both the kernels' call types and the dispatch that calls the kernels
    // (issue 50, item 2: the op table's branch splits them).
    ("rdu-spatial", "sim", &["attention", "elementwise", "moe", "norm", "ops", "products", "recurrent", "shape"]),
];

fn fail_on(what: &str, found: Vec<String>) {
    assert!(found.is_empty(), "{what}:\n  {}", found.join("\n  "));
}

/// Every Rust file of every crate (sources, tests, benchmarks), relative path and text.
fn sources() -> Vec<(String, String)> {
    let root = repository();
    (crates(&root).iter())
        .flat_map(|c| rust_files(c))
        .map(|p| (relative(&root, &p), std::fs::read_to_string(&p).expect("readable source")))
        .collect()
}

/// Each crate's root files: `src/lib.rs`, `src/main.rs`, with the crate's directory name.
fn crate_roots() -> Vec<(String, std::path::PathBuf)> {
    (crates(&repository()).into_iter())
        .flat_map(|c| {
            let name = c.file_name().expect("a crate directory").to_string_lossy().to_string();
            ["src/lib.rs", "src/main.rs"].map(|f| (name.clone(), c.join(f)))
        })
        .filter(|(_, p)| p.is_file())
        .collect()
}

/// Library and binary sources only (each crate's modules, not its tests, and not this crate's,
/// which names what it looks for), path and text.
fn library_sources() -> Vec<(String, String)> {
    let root = repository();
    let mut files = std::collections::BTreeSet::new();
    for (_, file) in crate_roots() {
        let graph = modules::crate_graph(&file, &root).expect("readable crate");
        files.extend(graph.modules.values().map(|p| relative(&root, p)));
    }
    sources().into_iter().filter(|(p, _)| files.contains(p) && !p.starts_with("crates/rdu-tidy/")).collect()
}

#[test]
fn no_function_is_over_100_lines() {
    let mut found = Vec::new();
    for (file, src) in sources() {
        for f in functions::functions(&lex::lex(&src).lines) {
            if f.lines > MAX_FUNCTION_LINES {
                found.push(format!("{file}:{}: fn {} has {} lines", f.line, f.name, f.lines));
            }
        }
    }
    fail_on(&format!("functions over {MAX_FUNCTION_LINES} lines (split them)"), found);
}

#[test]
fn no_modules_import_each_other_in_a_loop() {
    let mut found = Vec::new();
    for (name, root_file) in crate_roots() {
        let graph = modules::crate_graph(&root_file, &repository()).expect("readable crate");
        for l in modules::loops(&graph) {
            let parent = l.parent.join("::");
            let members = l.members.iter().map(String::as_str);
            let known = (LOOPS_BEING_REMOVED.iter())
                .any(|(c, p, m)| *c == name && *p == parent && m.iter().copied().eq(members.clone()));
            if !known {
                let at = if parent.is_empty() { name.clone() } else { format!("{name}::{parent}") };
                found.push(format!("{at}: {{{}}}: {}", l.members.join(", "), l.evidence.join("; ")));
            }
        }
    }
    fail_on("modules that import each other in a loop (move what both need below both)", found);
}

#[test]
fn every_unsafe_says_why_it_is_sound() {
    let mut found = Vec::new();
    for (file, src) in sources() {
        for (line, what) in unsafety::unexplained(&lex::lex(&src).lines) {
            found.push(format!("{file}:{line}: unsafe {what} without a `// SAFETY:` comment"));
        }
    }
    fail_on("unsafe without its reason", found);
}

#[test]
fn the_readme_is_a_guide_within_its_budget() {
    let text = std::fs::read_to_string(repository().join("README.md")).expect("README.md");
    fail_on("README.md over its budget", docs::readme_over(&text));
}

#[test]
fn every_codemap_row_fits_two_lines() {
    let text = std::fs::read_to_string(repository().join("ARCHITECTURE.md")).expect("ARCHITECTURE.md");
    fail_on("codemap rows over two lines (details belong in the module's own docs)", docs::codemap_over(&text));
}

#[test]
fn the_roofline_floor_is_computed_in_one_place() {
    assert!(repository().join(places::ROOFLINE).is_file(), "{} is where the floor is computed", places::ROOFLINE);
    let found = library_sources().iter().flat_map(|(file, src)| places::roofline_elsewhere(file, src)).collect();
    fail_on("the roofline floor computed outside its one place", found);
}

/// One op table: op names are spelled only in `rdu-spatial/src/op/mod.rs`.
#[test]
fn op_names_are_spelled_only_in_the_op_table() {
    let table = std::fs::read_to_string(repository().join(places::OP_TABLE)).expect("the op table");
    let names = places::op_names(&table);
    assert!(names.len() >= 30, "the op table's rows were not found: {names:?}");
    let found =
        library_sources().iter().flat_map(|(file, src)| places::op_names_elsewhere(file, src, &names)).collect();
    fail_on("op names spelled outside the op table", found);
}

/// An op's cost is its row's cost class: the cost code names no op, and no match over a cost
/// class falls back on a default arm.
#[test]
fn every_op_is_costed_by_its_rows_class() {
    for file in places::COST_CODE {
        assert!(repository().join(file).is_file(), "{file} is cost code");
    }
    let found = library_sources().iter().flat_map(|(file, src)| places::costs_by_default(file, src)).collect();
    fail_on("ops costed by name or by a default arm (name the class in the op's row, `.cost(…)`)", found);
}
