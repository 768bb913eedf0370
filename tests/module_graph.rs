//! The library's modules form no import cycle: each top-level module of `src/` (a file, or a
//! directory with its `mod.rs`) may use others only in one direction, so each can be read,
//! tested and changed knowing only what it depends on.
//!
//! A reference is any `crate::name` in the code (a `use` or a path), comments left out. An
//! edge `a -> b` means a file of `a` names `crate::b`. The test fails with the cycle it found;
//! `cargo test --test module_graph -- --nocapture` prints the whole graph.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::{Path, PathBuf};

/// The crate root and the simulator are not modules of the library.
const SKIP: [&str; 2] = ["lib", "bin"];

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in fs::read_dir(dir).expect("src/ is readable") {
        let path = entry.expect("a directory entry").path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// The code of a file without its comments (line comments only: the crate uses no others).
fn code(text: &str) -> String {
    text.lines().map(|line| line.split("//").next().unwrap_or("")).collect::<Vec<_>>().join("\n")
}

fn is_ident(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_'
}

/// Every module named after `crate::`, including each one in a `crate::{a, b::c}` group.
fn references(code: &str) -> BTreeSet<String> {
    let mut found = BTreeSet::new();
    for (at, _) in code.match_indices("crate::") {
        let rest = &code[at + "crate::".len()..];
        if let Some(group) = rest.strip_prefix('{') {
            let inner = &group[..group.find('}').unwrap_or(group.len())];
            for item in inner.split(',') {
                let name: String = item.trim().chars().take_while(|&c| is_ident(c)).collect();
                if !name.is_empty() {
                    found.insert(name);
                }
            }
        } else {
            let name: String = rest.chars().take_while(|&c| is_ident(c)).collect();
            found.insert(name);
        }
    }
    found
}

fn graph() -> BTreeMap<String, BTreeSet<String>> {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    let module_of = |path: &Path| -> String {
        let rel = path.strip_prefix(&src).expect("under src/");
        let first = rel.components().next().expect("a file").as_os_str().to_string_lossy();
        first.trim_end_matches(".rs").to_owned()
    };
    let modules: BTreeSet<String> =
        files.iter().map(|f| module_of(f)).filter(|m| !SKIP.contains(&m.as_str())).collect();
    let mut graph: BTreeMap<String, BTreeSet<String>> = modules.iter().map(|m| (m.clone(), BTreeSet::new())).collect();
    for file in &files {
        let from = module_of(file);
        if SKIP.contains(&from.as_str()) {
            continue;
        }
        let text = fs::read_to_string(file).expect("a readable source file");
        for to in references(&code(&text)) {
            if to != from && modules.contains(&to) {
                graph.get_mut(&from).expect("every module is a node").insert(to);
            }
        }
    }
    graph
}

/// A cycle, if there is one: depth-first search with the path kept on a stack.
fn find_cycle(graph: &BTreeMap<String, BTreeSet<String>>) -> Option<Vec<String>> {
    #[derive(Clone, Copy, PartialEq)]
    enum Mark {
        New,
        OnPath,
        Done,
    }
    fn visit(
        node: &str,
        graph: &BTreeMap<String, BTreeSet<String>>,
        marks: &mut BTreeMap<String, Mark>,
        path: &mut Vec<String>,
    ) -> Option<Vec<String>> {
        marks.insert(node.to_owned(), Mark::OnPath);
        path.push(node.to_owned());
        for next in &graph[node] {
            match marks[next.as_str()] {
                Mark::OnPath => {
                    let start = path.iter().position(|n| n == next).expect("on the path");
                    let mut cycle = path[start..].to_vec();
                    cycle.push(next.clone());
                    return Some(cycle);
                }
                Mark::New => {
                    if let Some(cycle) = visit(next, graph, marks, path) {
                        return Some(cycle);
                    }
                }
                Mark::Done => {}
            }
        }
        path.pop();
        marks.insert(node.to_owned(), Mark::Done);
        None
    }
    let mut marks: BTreeMap<String, Mark> = graph.keys().map(|k| (k.clone(), Mark::New)).collect();
    for node in graph.keys() {
        if marks[node.as_str()] != Mark::New {
            continue;
        }
        if let Some(cycle) = visit(node, graph, &mut marks, &mut Vec::new()) {
            return Some(cycle);
        }
    }
    None
}

#[test]
fn the_library_has_no_import_cycle() {
    let graph = graph();
    for (from, to) in &graph {
        println!("{from} -> {}", to.iter().cloned().collect::<Vec<_>>().join(", "));
    }
    assert!(graph.len() >= 10, "the scan found too few modules: {graph:?}");
    if let Some(cycle) = find_cycle(&graph) {
        panic!("import cycle: {}", cycle.join(" -> "));
    }
}

/// The checker itself: it sees a `use` group, a path, and a cycle through them; comments
/// are not references.
#[test]
fn the_checker_finds_a_planted_cycle() {
    let refs = references(&code("use crate::{alpha, beta::Thing};\nlet x = crate::gamma::f(); // crate::delta"));
    assert_eq!(refs, ["alpha", "beta", "gamma"].iter().map(|s| s.to_string()).collect());
    let mut graph: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    graph.insert("a".into(), ["b".to_string()].into());
    graph.insert("b".into(), ["c".to_string()].into());
    graph.insert("c".into(), ["a".to_string()].into());
    assert_eq!(find_cycle(&graph), Some(vec!["a".into(), "b".into(), "c".into(), "a".into()]));
    graph.get_mut("c").unwrap().clear();
    assert_eq!(find_cycle(&graph), None);
}
