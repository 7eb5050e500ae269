//! The layering rule, checked from the source: within each crate of the workspace, the
//! top-level modules import each other without a circle (docs/architecture.md, "The layering rule").
//!
//! Reads every `.rs` file under each workspace member's `src/` (the members are read from
//! the workspace's Cargo.toml, so a new crate is checked without being listed here), finds the paths that leave the file's
//! own top-level module (`crate::x…`, `super::…` climbing out of it, `use crate::{x, y}`
//! groups, names the crate root re-exports), and fails on any circle in the graph they
//! draw, naming the lines that close it. Comments and string literals are skipped; test
//! modules count like any other code.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::{Path, PathBuf};

/// Crates that must be among the members checked (a scanner that found no members would
/// pass vacuously).
const EXPECTED: &[&str] = &["gateway", "policies", "runtime-adapter", "session-log"];

/// The node that stands for the items the crate root (`lib.rs`, `main.rs`) defines itself.
const ROOT: &str = "(crate root)";

#[test]
fn no_import_circle_between_top_level_modules() {
    let workspace = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let members = workspace_members(&workspace);
    for name in EXPECTED {
        assert!(
            members.iter().any(|m| m == name),
            "{name} is not among the workspace members read: {members:?}"
        );
    }
    let mut failures = Vec::new();
    for name in &members {
        let src = workspace.join(name).join("src");
        let graph = Graph::of_crate(&src);
        // A crate that is one file (its root, with inline test modules) has no circle.
        if graph.modules.is_empty() {
            continue;
        }
        assert!(
            graph.modules.len() > 2,
            "{name}: found only {:?}; is the scanner reading the right folder?",
            graph.modules
        );
        if let Some(circle) = graph.circle() {
            failures.push(format!("{name}: {circle}"));
        }
    }
    assert!(
        failures.is_empty(),
        "import circles between top-level modules (a module may import only modules \
         below it; move the shared item down):\n{}",
        failures.join("\n")
    );
}

/// The `members` of the workspace's `[workspace]` table.
fn workspace_members(workspace: &Path) -> Vec<String> {
    let manifest = fs::read_to_string(workspace.join("Cargo.toml")).unwrap();
    let line = manifest
        .lines()
        .find(|l| l.trim_start().starts_with("members"))
        .expect("the workspace's Cargo.toml lists its members on one line");
    let list = line.split_once('[').and_then(|(_, r)| r.split_once(']'));
    list.expect("members = [...]")
        .0
        .split(',')
        .map(|m| m.trim().trim_matches('"').to_owned())
        .filter(|m| !m.is_empty())
        .collect()
}

#[test]
fn the_scanner_sees_every_kind_of_path() {
    let source = r#"
        //! crate::doc_comment is not an import
        use crate::a::X;
        use crate::{b, c::{Y, Z}};
        use super::d;
        fn f() { crate::e::g(); let s = "crate::in_a_string"; /* crate::h */ }
        mod tests { use super::*; use super::super::i; }
        use crate::Reexported;
        use crate::defined_in_the_root;
    "#;
    let root = RootNames::read(
        "mod a; pub mod b; mod c; mod d; mod e; mod i; mod j; pub use j::Reexported;",
    );
    let found: BTreeSet<String> = imports(source, &["top".to_owned()], &root)
        .into_iter()
        .map(|(module, _)| module)
        .collect();
    // `top` is the file's own module (`super::*` from its test module).
    let expected = ["a", "b", "c", "d", "e", "i", "j", "top", ROOT];
    assert_eq!(found, expected.iter().map(|s| s.to_string()).collect());

    let lib = "mod a;\nmod b;\npub use a::A;\nfn f() { b::g() }";
    let imported: Vec<String> = RootNames::read(lib)
        .root_imports(lib)
        .into_iter()
        .map(|(m, _)| m)
        .collect();
    assert_eq!(imported, ["b"]);

    // One circle is enough to fail, and the report names where it closes.
    let mut graph = Graph::default();
    graph.edge("x", "y", "x.rs:1");
    graph.edge("y", "z", "y.rs:2");
    graph.edge("z", "x", "z.rs:3");
    let circle = graph.circle().expect("x → y → z → x is a circle");
    assert!(circle.contains("z.rs:3"), "{circle}");
    graph.edges.get_mut("z").unwrap().clear();
    assert_eq!(graph.circle(), None);
}

#[derive(Default)]
struct Graph {
    modules: BTreeSet<String>,
    /// module → imported module → where (the first `file:line` that imports it).
    edges: BTreeMap<String, BTreeMap<String, String>>,
}

impl Graph {
    fn of_crate(src: &Path) -> Graph {
        let root = ["lib.rs", "main.rs"]
            .iter()
            .map(|f| src.join(f))
            .find(|p| p.exists())
            .unwrap_or_else(|| panic!("{}: no lib.rs or main.rs", src.display()));
        let root_text = fs::read_to_string(&root).unwrap();
        let names = RootNames::read(&root_text);
        let mut graph = Graph::default();
        for (module, line) in names.root_imports(&root_text) {
            graph.edge(
                ROOT,
                &module,
                &format!("{}:{line}", root.file_name().unwrap().to_string_lossy()),
            );
        }
        for file in rust_files(src) {
            // `src/bin/*.rs` are crates of their own (binaries), not modules of this one.
            if file == root || file.starts_with(src.join("bin")) {
                continue;
            }
            let rel = file.strip_prefix(src).unwrap();
            let path = module_path(rel);
            let top = path[0].clone();
            graph.modules.insert(top.clone());
            let text = fs::read_to_string(&file).unwrap();
            for (module, line) in imports(&text, &path, &names) {
                if module != top {
                    graph.edge(&top, &module, &format!("{}:{line}", rel.display()));
                }
            }
        }
        graph
    }

    fn edge(&mut self, from: &str, to: &str, at: &str) {
        self.modules.insert(from.to_owned());
        self.modules.insert(to.to_owned());
        self.edges
            .entry(from.to_owned())
            .or_default()
            .entry(to.to_owned())
            .or_insert_with(|| at.to_owned());
    }

    /// A circle, as `a → b (where) → … → a (where)`, if there is one.
    fn circle(&self) -> Option<String> {
        #[derive(Clone, Copy, PartialEq)]
        enum Mark {
            New,
            Open,
            Done,
        }
        fn visit(
            g: &Graph,
            m: &str,
            marks: &mut BTreeMap<String, Mark>,
            stack: &mut Vec<String>,
        ) -> Option<Vec<String>> {
            marks.insert(m.to_owned(), Mark::Open);
            stack.push(m.to_owned());
            for next in g.edges.get(m).into_iter().flat_map(|e| e.keys()) {
                match marks.get(next).copied().unwrap_or(Mark::New) {
                    Mark::Open => {
                        let start = stack.iter().position(|s| s == next).unwrap();
                        let mut circle = stack[start..].to_vec();
                        circle.push(next.clone());
                        return Some(circle);
                    }
                    Mark::New => {
                        if let Some(c) = visit(g, next, marks, stack) {
                            return Some(c);
                        }
                    }
                    Mark::Done => {}
                }
            }
            stack.pop();
            marks.insert(m.to_owned(), Mark::Done);
            None
        }
        let mut marks = BTreeMap::new();
        for m in &self.modules {
            if marks.get(m).copied().unwrap_or(Mark::New) == Mark::New {
                if let Some(c) = visit(self, m, &mut marks, &mut Vec::new()) {
                    let mut text = c[0].clone();
                    for pair in c.windows(2) {
                        let at = &self.edges[&pair[0]][&pair[1]];
                        text.push_str(&format!(" → {} ({at})", pair[1]));
                    }
                    return Some(text);
                }
            }
        }
        None
    }
}

fn rust_files(dir: &Path) -> Vec<PathBuf> {
    let mut files = Vec::new();
    let mut entries: Vec<_> = fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    entries.sort();
    for path in entries {
        if path.is_dir() {
            files.extend(rust_files(&path));
        } else if path.extension().is_some_and(|e| e == "rs") {
            files.push(path);
        }
    }
    files
}

/// `a/b.rs` and `a/b/mod.rs` are module `a::b`.
fn module_path(rel: &Path) -> Vec<String> {
    let mut parts: Vec<String> = rel
        .iter()
        .map(|p| p.to_string_lossy().into_owned())
        .collect();
    let last = parts.pop().unwrap();
    if last != "mod.rs" {
        parts.push(last.trim_end_matches(".rs").to_owned());
    }
    parts
}

/// What the crate root declares: its modules, and the names it re-exports from them
/// (`pub use module::{A, B};`).
struct RootNames {
    modules: BTreeSet<String>,
    reexports: BTreeMap<String, String>,
}

impl RootNames {
    fn read(root: &str) -> RootNames {
        let code = strip(root);
        let mut names = RootNames {
            modules: BTreeSet::new(),
            reexports: BTreeMap::new(),
        };
        for statement in code.split(';') {
            let words: Vec<&str> = statement.split_whitespace().collect();
            if let Some(k) = words.iter().position(|w| *w == "mod") {
                if k + 2 == words.len() {
                    names.modules.insert(words[k + 1].to_owned());
                }
            }
            let Some(rest) = statement.trim().strip_prefix("pub use ") else {
                continue;
            };
            let Some((module, items)) = rest.split_once("::") else {
                continue;
            };
            for item in items.trim_matches(|c| c == '{' || c == '}').split(',') {
                let name = item.split(" as ").last().unwrap_or("").trim();
                let name = name.rsplit("::").next().unwrap_or("").trim();
                if !name.is_empty() {
                    names
                        .reexports
                        .insert(name.to_owned(), module.trim().to_owned());
                }
            }
        }
        names
    }

    /// The node a name right below the crate root belongs to.
    fn node(&self, name: String) -> String {
        if self.modules.contains(&name) {
            name
        } else if let Some(module) = self.reexports.get(&name) {
            module.clone()
        } else {
            ROOT.to_owned()
        }
    }

    /// The modules the root's own code uses (`module::item`), leaving out its `mod`
    /// declarations and re-exports, which import nothing for the root itself.
    fn root_imports(&self, root: &str) -> Vec<(String, usize)> {
        let code = strip(root);
        let mut found: Vec<(String, usize)> = Vec::new();
        for (n, line) in code.lines().enumerate() {
            let line_code = line.trim_start();
            if line_code.starts_with("pub use ")
                || line_code.starts_with("mod ")
                || line_code.starts_with("pub mod ")
            {
                continue;
            }
            for module in &self.modules {
                let used = line_code
                    .match_indices(&format!("{module}::"))
                    .any(|(k, _)| k == 0 || !is_ident(line_code.as_bytes()[k - 1]));
                if used && !found.iter().any(|(m, _)| m == module) {
                    found.push((module.clone(), n + 1));
                }
            }
        }
        found
    }
}

/// The top-level modules a file's paths reach, each with the first line that reaches it.
/// `path` is the file's module path (`["runs", "drive"]`).
fn imports(source: &str, path: &[String], root: &RootNames) -> Vec<(String, usize)> {
    let code = strip(source);
    let bytes = code.as_bytes();
    let mut found: Vec<(String, usize)> = Vec::new();
    let mut add = |module: String, line: usize| {
        if !found.iter().any(|(m, _)| *m == module) {
            found.push((module, line));
        }
    };
    // Inline `mod name {` blocks deepen the module path until their brace closes.
    let mut inline: Vec<(String, usize)> = Vec::new();
    let mut depth = 0usize;
    let mut line = 1usize;
    let mut i = 0;
    while i < bytes.len() {
        let at_word = i == 0 || !is_ident(bytes[i - 1]);
        match bytes[i] {
            b'\n' => line += 1,
            b'{' => depth += 1,
            b'}' => {
                depth = depth.saturating_sub(1);
                if inline.last().is_some_and(|(_, d)| *d == depth) {
                    inline.pop();
                }
            }
            b'm' if at_word && code[i..].starts_with("mod ") => {
                let rest = &code[i + 4..];
                let name: String = rest.chars().take_while(|c| is_ident(*c as u8)).collect();
                let after = rest[name.len()..].trim_start();
                if after.starts_with('{') {
                    inline.push((name, depth));
                }
            }
            b'c' | b's'
                if at_word
                    && (code[i..].starts_with("crate::") || code[i..].starts_with("super::")) =>
            {
                let mut module: Vec<String> = path
                    .iter()
                    .cloned()
                    .chain(inline.iter().map(|(n, _)| n.clone()))
                    .collect();
                let mut j = i;
                if code[j..].starts_with("crate::") {
                    module.clear();
                    j += "crate::".len();
                } else {
                    while code[j..].starts_with("super::") {
                        module.pop();
                        j += "super::".len();
                    }
                }
                if let Some(top) = module.first() {
                    // Still inside a top-level module: that module is what is reached.
                    add(top.clone(), line);
                } else {
                    for name in first_segments(&code[j..]) {
                        add(root.node(name), line);
                    }
                }
                i = j;
                continue;
            }
            _ => {}
        }
        i += 1;
    }
    found
}

/// The first segment of a path (`x` of `x::y`), or of every path in a `{…}` group; `*`
/// and `self` name nothing.
fn first_segments(rest: &str) -> Vec<String> {
    let rest = rest.trim_start();
    if let Some(group) = rest.strip_prefix('{') {
        let mut names = Vec::new();
        let mut level = 0;
        let mut start = true;
        for (k, c) in group.char_indices() {
            match c {
                '{' => level += 1,
                '}' if level == 0 => break,
                '}' => level -= 1,
                ',' if level == 0 => start = true,
                c if start && is_ident(c as u8) => {
                    start = false;
                    let name: String = group[k..]
                        .chars()
                        .take_while(|c| is_ident(*c as u8))
                        .collect();
                    if name != "self" {
                        names.push(name);
                    }
                }
                _ => {}
            }
        }
        return names;
    }
    let name: String = rest.chars().take_while(|c| is_ident(*c as u8)).collect();
    if name.is_empty() || name == "self" {
        Vec::new()
    } else {
        vec![name]
    }
}

fn is_ident(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b == b'_'
}

/// The source with comments and the contents of string and char literals blanked out,
/// newlines kept so that line numbers still hold.
fn strip(source: &str) -> String {
    let b = source.as_bytes();
    let mut out = String::with_capacity(source.len());
    let mut i = 0;
    let blank = |out: &mut String, s: &[u8]| {
        for &c in s {
            out.push(if c == b'\n' { '\n' } else { ' ' });
        }
    };
    while i < b.len() {
        let rest = &b[i..];
        if rest.starts_with(b"//") {
            let end = rest.iter().position(|&c| c == b'\n').unwrap_or(rest.len());
            blank(&mut out, &rest[..end]);
            i += end;
        } else if rest.starts_with(b"/*") {
            let end = source[i + 2..].find("*/").map_or(rest.len(), |e| e + 4);
            blank(&mut out, &rest[..end]);
            i += end;
        } else if rest.starts_with(b"r#\"") || rest.starts_with(b"r\"") {
            let hashes = rest[1..].iter().take_while(|&&c| c == b'#').count();
            let close = format!("\"{}", "#".repeat(hashes));
            let open = 2 + hashes;
            let end = source[i + open..]
                .find(&close)
                .map_or(rest.len(), |e| open + e + close.len());
            blank(&mut out, &rest[..end]);
            i += end;
        } else if rest[0] == b'"' {
            let mut end = 1;
            while end < rest.len() && rest[end] != b'"' {
                end += if rest[end] == b'\\' { 2 } else { 1 };
            }
            let end = (end + 1).min(rest.len());
            blank(&mut out, &rest[..end]);
            i += end;
        } else if rest[0] == b'\''
            && (rest.get(2) == Some(&b'\'')
                || (rest.get(1) == Some(&b'\\') && rest.get(3) == Some(&b'\'')))
        {
            // A char literal ('x' or '\n'), not a lifetime.
            let end = if rest[1] == b'\\' { 4 } else { 3 };
            blank(&mut out, &rest[..end]);
            i += end;
        } else {
            let len = source[i..].chars().next().map_or(1, char::len_utf8);
            out.push_str(&source[i..i + len]);
            i += len;
        }
    }
    out
}
