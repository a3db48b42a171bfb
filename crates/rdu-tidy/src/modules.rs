//! The module graph of a crate and its import loops.
//!
//! A crate's modules are found from its root (`src/lib.rs`, `src/main.rs`) through its `mod`
//! declarations, files and inline blocks alike; whatever `#[cfg(test)]` gates (a test module,
//! a test-only import or helper) is left out. An arrow is a path in code that starts with
//! `crate::`, `super::` or `self::` (in a `use` tree or written out in place), pointing at the
//! deepest module the path names; a path ending in an item of a module's own file points at
//! that module.
//!
//! Loops are looked for among siblings, at every level of the tree: `lower` and `deploy` are
//! in a loop when anything under `lower` names anything under `deploy` and the other way
//! round; `sim::matmul` and `sim::tiled` when those two files name each other. A module naming
//! its own ancestor or descendant draws no arrow between siblings.

use crate::lex::{closing, lex, tokens, Token};
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// A module path inside one crate (`[]` is the root).
pub type ModPath = Vec<String>;

/// One crate's modules and the paths each names.
#[derive(Debug, Default)]
pub struct Graph {
    /// Every module, with the file it is in.
    pub modules: BTreeMap<ModPath, PathBuf>,
    /// `(from, to, file:line)` for every resolved path.
    pub arrows: Vec<(ModPath, ModPath, String)>,
}

/// A loop between sibling modules: the siblings (under `parent`) and one arrow for each step.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Loop {
    pub parent: ModPath,
    pub members: Vec<String>,
    /// Arrows that make it up, as `a -> b (file:line)`.
    pub evidence: Vec<String>,
}

/// The graph of the crate whose root file is `root`; arrows name their files relative to
/// `base`.
pub fn crate_graph(root: &Path, base: &Path) -> std::io::Result<Graph> {
    let mut g = Graph::default();
    let mut todo = vec![(Vec::<String>::new(), root.to_path_buf(), root.parent().unwrap_or(root).to_path_buf())];
    let mut files = Vec::new();
    while let Some((path, file, dir)) = todo.pop() {
        let src = std::fs::read_to_string(&file)?;
        let toks = non_test(&tokens(&lex(&src).lines));
        g.modules.insert(path.clone(), file.clone());
        for (child, inline) in declared_modules(&toks) {
            let mut child_path = path.clone();
            child_path.push(child.clone());
            if inline {
                g.modules.insert(child_path, file.clone());
                continue;
            }
            let flat = dir.join(format!("{child}.rs"));
            let nested = dir.join(&child).join("mod.rs");
            let child_file = if flat.exists() { flat } else { nested };
            todo.push((child_path, child_file.clone(), dir.join(&child)));
        }
        files.push((path, file, toks));
    }
    for (path, file, toks) in files {
        for (at, target, line) in named_paths(&path, &toks) {
            if let Some(to) = resolve(&g.modules, &target) {
                g.arrows.push((at, to, format!("{}:{line}", crate::relative(base, &file))));
            }
        }
    }
    Ok(g)
}

/// The deepest module `path` names (its longest prefix that is a module).
fn resolve(modules: &BTreeMap<ModPath, PathBuf>, path: &[String]) -> Option<ModPath> {
    (0..=path.len()).rev().map(|n| path[..n].to_vec()).find(|p| modules.contains_key(p))
}

/// `tokens` without what `#[cfg(test)]` gates.
pub fn non_test(toks: &[Token]) -> Vec<Token> {
    let mut out = Vec::new();
    let mut k = 0;
    while k < toks.len() {
        if toks[k].text == "#" && toks.get(k + 1).is_some_and(|t| t.text == "[") {
            let end = closing(toks, k + 1);
            let attr: Vec<&str> = toks[k + 2..end].iter().map(|t| t.text.as_str()).collect();
            if attr.first() == Some(&"cfg") && attr.contains(&"test") && !attr.contains(&"not") {
                k = item_end(toks, end + 1) + 1;
                continue;
            }
        }
        out.push(toks[k].clone());
        k += 1;
    }
    out
}

/// The index of the last token of the item starting at `start` (attributes included): its
/// `;`, or the brace closing its first block.
fn item_end(toks: &[Token], start: usize) -> usize {
    let mut depth = 0i64;
    let mut k = start;
    while k < toks.len() {
        match toks[k].text.as_str() {
            "#" if depth == 0 && toks.get(k + 1).is_some_and(|t| t.text == "[") => {
                k = closing(toks, k + 1);
            }
            "(" | "[" => depth += 1,
            ")" | "]" => depth -= 1,
            ";" if depth == 0 => return k,
            "{" if depth == 0 => return closing(toks, k),
            _ => {}
        }
        k += 1;
    }
    toks.len().saturating_sub(1)
}

/// The modules `toks` declares at its top level: `(name, inline)`.
fn declared_modules(toks: &[Token]) -> Vec<(String, bool)> {
    let mut out = Vec::new();
    let mut depth = 0i64;
    for (k, t) in toks.iter().enumerate() {
        match t.text.as_str() {
            "{" => depth += 1,
            "}" => depth -= 1,
            "mod" if depth == 0 => {
                if let (Some(name), Some(next)) = (toks.get(k + 1), toks.get(k + 2)) {
                    out.push((name.text.clone(), next.text == "{"));
                }
            }
            _ => {}
        }
    }
    out
}

/// Every `crate::`/`super::`/`self::` path in `toks` (the code of module `module`), made
/// absolute: `(the module it is written in, the path, line)`. Paths in `use` trees are
/// expanded; `pub(crate)` and `pub(in …)` are visibilities, not paths.
fn named_paths(module: &[String], toks: &[Token]) -> Vec<(ModPath, ModPath, usize)> {
    let mut out = Vec::new();
    // Inline modules open here: (name, index of their closing brace).
    let mut inline: Vec<(String, usize)> = Vec::new();
    let mut k = 0;
    while k < toks.len() {
        while inline.last().is_some_and(|&(_, end)| k > end) {
            inline.pop();
        }
        let here: ModPath = module.iter().cloned().chain(inline.iter().map(|(n, _)| n.clone())).collect();
        let t = &toks[k];
        if t.text == "mod" && toks.get(k + 2).is_some_and(|n| n.text == "{") {
            inline.push((toks[k + 1].text.clone(), closing(toks, k + 2)));
            k += 3;
            continue;
        }
        if t.text == "use" {
            let end = (k..toks.len()).find(|&j| toks[j].text == ";").unwrap_or(toks.len());
            for path in use_paths(&toks[k + 1..end]) {
                if let Some(abs) = absolute(&here, &path) {
                    out.push((here.clone(), abs, t.line));
                }
            }
            k = end + 1;
            continue;
        }
        let starts = matches!(t.text.as_str(), "crate" | "super" | "self");
        let is_path = toks.get(k + 1).is_some_and(|c| c.text == ":") && toks.get(k + 2).is_some_and(|c| c.text == ":");
        let visibility = k > 0 && toks[k - 1].text == "in";
        if starts && is_path && !visibility {
            let mut path = vec![t.text.clone()];
            let mut j = k + 1;
            while toks.get(j).is_some_and(|c| c.text == ":") && toks.get(j + 1).is_some_and(|c| c.text == ":") {
                match toks.get(j + 2) {
                    Some(seg) if is_ident(&seg.text) => path.push(seg.text.clone()),
                    _ => break,
                }
                j += 3;
            }
            if let Some(abs) = absolute(&here, &path) {
                out.push((here.clone(), abs, t.line));
            }
            k = j;
            continue;
        }
        k += 1;
    }
    out
}

fn is_ident(s: &str) -> bool {
    s.chars().all(|c| c.is_alphanumeric() || c == '_')
}

/// The paths of a `use` tree (the tokens between `use` and `;`), each as its segments.
fn use_paths(toks: &[Token]) -> Vec<Vec<String>> {
    let mut out = Vec::new();
    expand(toks, &mut Vec::new(), &mut out);
    out
}

fn expand(toks: &[Token], prefix: &mut Vec<String>, out: &mut Vec<Vec<String>>) {
    let depth0 = prefix.len();
    let mut k = 0;
    while k < toks.len() {
        let t = &toks[k].text;
        match t.as_str() {
            "{" => {
                let end = closing(toks, k);
                // Each comma-separated part of the group, under the prefix so far.
                let inner = &toks[k + 1..end];
                let mut depth = 0;
                let mut start = 0;
                for (j, s) in inner.iter().enumerate() {
                    match s.text.as_str() {
                        "{" => depth += 1,
                        "}" => depth -= 1,
                        "," if depth == 0 => {
                            expand(&inner[start..j], prefix, out);
                            start = j + 1;
                        }
                        _ => {}
                    }
                }
                expand(&inner[start..], prefix, out);
                prefix.truncate(depth0);
                return;
            }
            ":" | "*" => {}
            "as" => break,
            s if is_ident(s) => prefix.push(s.to_string()),
            _ => {}
        }
        k += 1;
    }
    if prefix.len() > depth0 {
        out.push(prefix.clone());
    }
    prefix.truncate(depth0);
}

/// `path` (starting with `crate`, `super` or `self`) made absolute from module `here`; `None`
/// for a path into another crate or above the root.
fn absolute(here: &[String], path: &[String]) -> Option<ModPath> {
    let mut at: ModPath = match path.first().map(String::as_str) {
        Some("crate") => Vec::new(),
        Some("super") | Some("self") => here.to_vec(),
        _ => return None,
    };
    let mut rest = path;
    if rest.first().map(String::as_str) == Some("crate") {
        rest = &rest[1..];
    } else {
        if rest.first().map(String::as_str) == Some("self") {
            rest = &rest[1..];
        }
        while rest.first().map(String::as_str) == Some("super") {
            at.pop()?;
            rest = &rest[1..];
        }
    }
    at.extend(rest.iter().cloned());
    Some(at)
}

/// Loops between sibling modules of `g`, at every level.
pub fn loops(g: &Graph) -> Vec<Loop> {
    // parent -> (child -> child -> evidence)
    let mut levels: BTreeMap<ModPath, BTreeMap<String, BTreeMap<String, String>>> = BTreeMap::new();
    for (from, to, at) in &g.arrows {
        let common = from.iter().zip(to).take_while(|(a, b)| a == b).count();
        if common == from.len() || common == to.len() {
            continue; // an ancestor or a descendant
        }
        let edges = levels.entry(from[..common].to_vec()).or_default();
        let evidence = format!("{} -> {} ({at})", from.join("::"), to.join("::"));
        edges.entry(from[common].clone()).or_default().entry(to[common].clone()).or_insert(evidence);
    }
    let mut out = Vec::new();
    for (parent, edges) in levels {
        for members in cycles(&edges) {
            let set: BTreeSet<&String> = members.iter().collect();
            let evidence = (members.iter())
                .flat_map(|m| edges.get(m).into_iter().flatten())
                .filter(|(to, _)| set.contains(to))
                .map(|(_, e)| e.clone())
                .collect();
            out.push(Loop { parent: parent.clone(), members, evidence });
        }
    }
    out
}

/// The strongly connected components of more than one node (Tarjan's algorithm).
fn cycles(edges: &BTreeMap<String, BTreeMap<String, String>>) -> Vec<Vec<String>> {
    struct State<'a> {
        edges: &'a BTreeMap<String, BTreeMap<String, String>>,
        index: BTreeMap<&'a str, usize>,
        low: BTreeMap<&'a str, usize>,
        stack: Vec<&'a str>,
        on: BTreeSet<&'a str>,
        out: Vec<Vec<String>>,
    }
    fn visit<'a>(s: &mut State<'a>, v: &'a str) {
        let i = s.index.len();
        s.index.insert(v, i);
        s.low.insert(v, i);
        s.stack.push(v);
        s.on.insert(v);
        for w in s.edges.get(v).into_iter().flat_map(|e| e.keys()) {
            let w = w.as_str();
            if !s.index.contains_key(w) {
                visit(s, w);
                let lw = s.low[w];
                let lv = s.low.get_mut(v).expect("visited");
                *lv = (*lv).min(lw);
            } else if s.on.contains(w) {
                let iw = s.index[w];
                let lv = s.low.get_mut(v).expect("visited");
                *lv = (*lv).min(iw);
            }
        }
        if s.low[v] == s.index[v] {
            let mut scc = Vec::new();
            while let Some(w) = s.stack.pop() {
                s.on.remove(w);
                scc.push(w.to_string());
                if w == v {
                    break;
                }
            }
            if scc.len() > 1 {
                scc.sort();
                s.out.push(scc);
            }
        }
    }
    let mut s = State {
        edges,
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: Vec::new(),
        on: BTreeSet::new(),
        out: Vec::new(),
    };
    for v in edges.keys() {
        if !s.index.contains_key(v.as_str()) {
            visit(&mut s, v);
        }
    }
    s.out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(dir: &Path, files: &[(&str, &str)]) {
        for (name, text) in files {
            let path = dir.join(name);
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(path, text).unwrap();
        }
    }

    /// A scratch directory under the target directory, emptied first.
    fn scratch(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("rdu-tidy-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        dir
    }

    #[test]
    fn a_loop_through_a_reexport_is_found_between_the_top_modules() {
        let dir = scratch("tidy-reexport");
        write(
            &dir,
            &[
                ("lib.rs", "pub mod lower;\npub mod deploy;\n#[cfg(test)]\nmod tests;\n"),
                ("lower/mod.rs", "pub mod passes;\npub mod streamed;\n"),
                ("lower/passes.rs", "pub fn pass() {}\n"),
                ("lower/streamed.rs", "pub use crate::deploy::{deploy, Model as M};\n"),
                ("deploy.rs", "use crate::lower::passes::pass;\npub fn deploy() { pass() }\npub struct Model;\n"),
                ("tests.rs", "use crate::deploy::deploy;\n"),
            ],
        );
        let g = crate_graph(&dir.join("lib.rs"), &dir).unwrap();
        let found = loops(&g);
        assert_eq!(found.len(), 1, "{found:?}");
        assert_eq!(found[0].parent, Vec::<String>::new());
        assert_eq!(found[0].members, vec!["deploy".to_string(), "lower".to_string()]);
        assert!(found[0].evidence.iter().any(|e| e.starts_with("lower::streamed -> deploy")), "{found:?}");
    }

    #[test]
    fn siblings_that_name_each_other_loop_and_test_code_does_not_count() {
        let dir = scratch("tidy-siblings");
        write(
            &dir,
            &[
                ("lib.rs", "mod sim;\n"),
                ("sim/mod.rs", "mod matmul;\nmod tiled;\nmod rows;\n"),
                ("sim/matmul.rs", "use super::tiled;\nfn f() { tiled::g() }\n"),
                ("sim/tiled.rs", "fn g(r: super::matmul::Rows) {}\n"),
                (
                    "sim/rows.rs",
                    "#[cfg(test)]\nmod tests { use super::super::matmul::x; }\nfn r() { crate::sim::tiled::g() }\n",
                ),
            ],
        );
        let found = loops(&crate_graph(&dir.join("lib.rs"), &dir).unwrap());
        assert_eq!(found.len(), 1, "{found:?}");
        assert_eq!(found[0].parent, vec!["sim".to_string()]);
        assert_eq!(found[0].members, vec!["matmul".to_string(), "tiled".to_string()]);
    }

    #[test]
    fn use_trees_expand_and_visibilities_are_not_paths() {
        let toks = tokens(
            &lex("pub(crate) use super::{a::{b, c as d}, e::*};\npub(in crate::x) fn f() { self::g::h(); }").lines,
        );
        let got: Vec<ModPath> = named_paths(&["m".into(), "n".into()], &toks).into_iter().map(|(_, p, _)| p).collect();
        let p = |s: &str| s.split("::").map(String::from).collect::<ModPath>();
        assert_eq!(got, vec![p("m::a::b"), p("m::a::c"), p("m::e"), p("m::n::g::h")]);
    }
}
