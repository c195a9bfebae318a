//! The crate's layers: every top-level module of `src/` imports only modules on lower
//! layers, so there is no import cycle between them. The layers are the list in the
//! crate docs (`src/lib.rs`, "Layers"), bottom to top, one line each; `docs/
//! architecture.md` lists the same. A new top-level module must be added there.
//!
//! Imports are read from the source: every `crate::<module>` path outside comments and
//! outside test code (a top-level `#[cfg(test)] mod ... { ... }` up to its closing `}`
//! at column 0, a `#[cfg(test)] mod ...;` file, a `tests.rs` file).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// The layers listed in a ```` ```text ```` block after the heading `heading`: the
/// module names of each line (before the first run of two spaces), bottom first.
fn layers_in(text: &str, heading: &str, prefix: &str) -> Vec<Vec<String>> {
    let mut lines = text
        .lines()
        .map(|l| l.strip_prefix(prefix).unwrap_or(l).trim_start_matches(' '))
        .skip_while(|l| !l.starts_with(heading))
        .skip_while(|l| !l.starts_with("```"))
        .skip(1);
    let mut layers = Vec::new();
    for line in lines.by_ref() {
        if line.starts_with("```") {
            break;
        }
        let names = line.split("  ").next().unwrap_or_default();
        let names: Vec<String> = names
            .split(',')
            .map(|n| n.trim().trim_end_matches('/').trim_end_matches(".rs"))
            .filter(|n| !n.is_empty())
            .map(str::to_string)
            .collect();
        if !names.is_empty() {
            layers.push(names);
        }
    }
    layers
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// The file's code without comments and without its test modules.
fn code_of(text: &str) -> String {
    let mut out = String::new();
    let mut lines = text.lines().peekable();
    while let Some(line) = lines.next() {
        let trimmed = line.trim_start();
        if trimmed.starts_with("#[cfg(test)]") {
            let next = lines.peek().map(|l| l.trim_start()).unwrap_or_default();
            let is_mod = next.starts_with("mod ")
                || next.starts_with("pub mod ")
                || next.starts_with("pub(crate) mod ");
            if is_mod && next.ends_with(';') {
                lines.next();
                continue;
            }
            if is_mod && next.ends_with('{') && !line.starts_with(' ') {
                // A test module at the top level of the file (rustfmt'ed): up to its `}`.
                for skipped in lines.by_ref() {
                    if skipped == "}" {
                        break;
                    }
                }
                continue;
            }
        }
        let code = match line.find("//") {
            Some(i) if line[..i].matches('"').count() % 2 == 0 => &line[..i],
            _ => line,
        };
        out.push_str(code);
        out.push('\n');
    }
    out
}

/// `crate::<name>` paths of a file's code, including `use crate::{a::.., b::..}`.
fn imports(code: &str) -> Vec<String> {
    let mut found = Vec::new();
    let is_ident = |c: char| c.is_ascii_alphanumeric() || c == '_';
    let mut rest = code;
    while let Some(i) = rest.find("crate::") {
        let before_ok = rest[..i].chars().next_back().is_none_or(|c| !is_ident(c));
        let after = &rest[i + "crate::".len()..];
        if before_ok {
            if let Some(group) = after.strip_prefix('{') {
                let end = group.find('}').unwrap_or(group.len());
                for item in group[..end].split(',') {
                    let name: String = item.trim().chars().take_while(|c| is_ident(*c)).collect();
                    if name.starts_with(|c: char| c.is_ascii_lowercase()) {
                        found.push(name);
                    }
                }
            } else {
                let name: String = after.chars().take_while(|c| is_ident(*c)).collect();
                if !name.is_empty() {
                    found.push(name);
                }
            }
        }
        rest = after;
    }
    found
}

#[test]
fn top_level_modules_import_only_lower_layers() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let lib = std::fs::read_to_string(root.join("src/lib.rs")).unwrap();
    let layers = layers_in(&lib, "# Layers", "//!");
    assert!(layers.len() > 5, "no layer list in src/lib.rs: {layers:?}");
    let doc = std::fs::read_to_string(root.join("docs/architecture.md")).unwrap();
    assert_eq!(
        layers_in(&doc, "## Layers", ""),
        layers,
        "docs/architecture.md (## Layers) and src/lib.rs (# Layers) list different layers"
    );
    let level: BTreeMap<String, usize> = layers
        .iter()
        .enumerate()
        .flat_map(|(i, names)| names.iter().map(move |n| (n.clone(), i)))
        .collect();

    let mut files = Vec::new();
    rust_files(&root.join("src"), &mut files);
    let mut problems = Vec::new();
    for file in files {
        let rel = file.strip_prefix(root.join("src")).unwrap();
        let first = rel
            .components()
            .next()
            .unwrap()
            .as_os_str()
            .to_string_lossy();
        let module = first.trim_end_matches(".rs").to_string();
        if module == "lib" || module == "main" {
            continue;
        }
        let Some(&own) = level.get(&module) else {
            problems.push(format!(
                "src/{first}: the module `{module}` is on no layer; add it to the layer list in src/lib.rs and docs/architecture.md"
            ));
            continue;
        };
        if rel.file_name().is_some_and(|n| n == "tests.rs")
            || rel.components().any(|c| c.as_os_str() == "tests")
        {
            continue;
        }
        let code = code_of(&std::fs::read_to_string(&file).unwrap());
        for target in imports(&code) {
            if target == module {
                continue;
            }
            match level.get(&target) {
                Some(&other) if other < own => {}
                Some(&other) => problems.push(format!(
                    "src/{}: `{module}` (layer {}) imports `crate::{target}` (layer {}): a module may import only lower layers",
                    rel.display(),
                    own + 1,
                    other + 1
                )),
                None => {}
            }
        }
    }
    problems.sort();
    problems.dedup();
    assert!(
        problems.is_empty(),
        "import cycles between top-level modules:\n{}",
        problems.join("\n")
    );
}

#[test]
fn the_layer_check_reads_imports_and_skips_comments_and_tests() {
    let code = code_of(
        "use crate::spec::FlowSpec;\n\
         use crate::{error::Error, records::{Health, HealthState}};\n\
         // crate::console in a comment\n\
         let x = \"// not a comment\"; crate::clock::now_ms();\n\
         #[cfg(test)]\nmod tests;\n\
         #[cfg(test)]\nmod tests {\n    use crate::cli::run;\n}\n\
         use crate::delta;\n",
    );
    assert_eq!(
        imports(&code),
        ["spec", "error", "records", "clock", "delta"].map(String::from)
    );
    let layers = layers_in(
        "//! # Layers\n//!\n//! ```text\n//! spec            a\n//! clock, durable.rs  b\n//! checkpoint/     c\n//! ```\n",
        "# Layers",
        "//!",
    );
    assert_eq!(
        layers,
        vec![
            vec!["spec".to_string()],
            vec!["clock".into(), "durable".into()],
            vec!["checkpoint".into()]
        ]
    );
}

/// The modules of `src/console/` that a file imports (`super::` paths resolved from the
/// file's own module, and `crate::console::` paths): the first name below `console`.
/// A directory module (`pane/`) is one module: its files import each other freely.
fn console_imports(module: &[&str], code: &str) -> Vec<String> {
    let is_ident = |c: char| c.is_ascii_alphanumeric() || c == '_';
    let names_at = |after: &str| -> Vec<String> {
        match after.strip_prefix('{') {
            Some(group) => {
                let end = group.find('}').unwrap_or(group.len());
                group[..end]
                    .split(',')
                    .map(|item| item.trim().chars().take_while(|c| is_ident(*c)).collect())
                    .collect()
            }
            None => vec![after.chars().take_while(|c| is_ident(*c)).collect()],
        }
    };
    let mut found = Vec::new();
    let mut rest = code;
    while let Some(i) = rest.find("super::") {
        let before = rest[..i].chars().next_back();
        let mut after = &rest[i..];
        let mut depth = 0;
        while let Some(a) = after.strip_prefix("super::") {
            depth += 1;
            after = a;
        }
        // Past the whole `super::super::` run, so its inner `super::` is not read again.
        rest = after;
        if before.is_some_and(|c| is_ident(c) || c == ':') {
            continue;
        }
        let Some(parent) = module.len().checked_sub(depth) else {
            continue;
        };
        for name in names_at(after) {
            let target = module[..parent].first().map_or(name, |m| m.to_string());
            if !target.is_empty() && target != "self" {
                found.push(target);
            }
        }
    }
    let mut rest = code;
    while let Some(i) = rest.find("crate::console::") {
        rest = &rest[i + "crate::console::".len()..];
        found.extend(names_at(rest).into_iter().filter(|n| !n.is_empty()));
    }
    found
}

#[test]
fn console_modules_import_no_circle() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("src/console");
    let mut files = Vec::new();
    rust_files(&root, &mut files);
    let mut edges: BTreeMap<String, std::collections::BTreeSet<String>> = BTreeMap::new();
    for file in files {
        let rel = file.strip_prefix(&root).unwrap();
        let mut module: Vec<String> = rel
            .components()
            .map(|c| {
                c.as_os_str()
                    .to_string_lossy()
                    .trim_end_matches(".rs")
                    .to_string()
            })
            .collect();
        if module.last().is_some_and(|m| m == "mod") {
            module.pop();
        }
        // `console/mod.rs` declares and wires every module; tests may import anything.
        let Some(own) = module.first().cloned() else {
            continue;
        };
        if module.iter().any(|m| m == "tests") {
            continue;
        }
        let module: Vec<&str> = module.iter().map(String::as_str).collect();
        let code = code_of(&std::fs::read_to_string(&file).unwrap());
        let targets = edges.entry(own.clone()).or_default();
        for target in console_imports(&module, &code) {
            if target != own {
                targets.insert(target);
            }
        }
    }
    // Depth-first: a module met again while on the path closes a circle.
    fn visit(
        node: &str,
        edges: &BTreeMap<String, std::collections::BTreeSet<String>>,
        path: &mut Vec<String>,
        done: &mut std::collections::BTreeSet<String>,
        circles: &mut Vec<String>,
    ) {
        if let Some(at) = path.iter().position(|p| p == node) {
            let mut circle = path[at..].to_vec();
            circle.push(node.to_string());
            circles.push(circle.join(" -> "));
            return;
        }
        if !done.insert(node.to_string()) {
            return;
        }
        path.push(node.to_string());
        for next in edges.get(node).into_iter().flatten() {
            visit(next, edges, path, done, circles);
        }
        path.pop();
    }
    let mut circles = Vec::new();
    let mut done = std::collections::BTreeSet::new();
    for node in edges.keys() {
        visit(node, &edges, &mut Vec::new(), &mut done, &mut circles);
    }
    assert!(
        edges.len() > 10 && edges.get("session").is_some_and(|t| t.contains("app")),
        "the console's imports were not read: {edges:?}"
    );
    assert!(
        circles.is_empty(),
        "import circles inside src/console/ (a pane reaches the rest of the console through what `update` hands it, never by importing `app`):\n{}",
        circles.join("\n")
    );
}

#[test]
fn the_console_check_resolves_super_paths_from_the_files_module() {
    let code = "use super::app::App;\nuse super::{model::FlowModel, theme};\nuse super::super::keys;\nuse crate::console::graph::tree;\n";
    assert_eq!(
        console_imports(&["update"], code),
        ["app", "model", "theme", "graph"].map(String::from),
        "`super::super::` from a file of console/ leaves the console"
    );
    // In `pane/sql.rs`, `super::` is `pane` itself and `super::super::` is `console`.
    assert_eq!(
        console_imports(&["pane", "sql"], code),
        ["pane", "pane", "pane", "keys", "graph"].map(String::from)
    );
}
