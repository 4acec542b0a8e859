//! The house rules of docs/ARCHITECTURE.md, checked on the source text (nothing is built or
//! run, so the whole check takes milliseconds):
//!
//! 1. **No import circle between the files of `src/`.** Every `crate::…`, `super::…` and
//!    `rrpdem::…` path (in `use` items and inline, groups `{a, b::c}` expanded) is an arrow from
//!    the file it is written in to the file that defines the module it names: `src/a.rs` or
//!    `src/a/mod.rs`, for a nested module the deepest file that exists (an item or an inline
//!    module lies in its file). Not arrows: a file's paths to itself, and paths inside items
//!    marked `#[cfg(test)]` (tests may reach into a higher layer). A module's relative paths to
//!    its own child modules (`mod x; use x::Y;`) are not read: a folder's `mod.rs` holds its
//!    rooms, it does not import them. A circle fails the test with its files and, for each
//!    arrow, the lines and paths that make it.
//! 2. **No file over 900 lines** unless its first 20 lines say "over 900 lines" and why.
//! 3. **No function over 120 lines** (from the line of `fn` to its closing brace) unless one of
//!    the 3 lines above it says "over 120 lines" and why.
//!
//! The checker's parts are tested on small made-up trees below, so that each rule is seen to
//! fail where it should.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::path::Path;
use std::time::Instant;

const MAX_FILE_LINES: usize = 900;
const FILE_REASON: &str = "over 900 lines";
const FILE_REASON_WITHIN: usize = 20;
const MAX_FN_LINES: usize = 120;
const FN_REASON: &str = "over 120 lines";
const FN_REASON_ABOVE: usize = 3;

// ---------------------------------------------------------------------------------------------
// Tokens

#[derive(Clone, Debug, PartialEq)]
enum Tok {
    Ident(String),
    /// `::`
    Sep,
    Punct(char),
}

/// A token and the 1-based line it starts on.
#[derive(Clone, Debug)]
struct Token {
    tok: Tok,
    line: usize,
}

/// The tokens of Rust source with comments, string, char and byte literals left out (so that a
/// path in a doc comment or a message is no import). Numbers come out as identifiers, which no
/// rule reads.
fn tokens(text: &str) -> Vec<Token> {
    let c: Vec<char> = text.chars().collect();
    let mut out = Vec::new();
    let mut line = 1;
    let mut i = 0;
    // Skips a quoted literal opened at `c[i]` (`"` or `'`), escapes included; counts lines.
    let skip_quoted = |i: &mut usize, line: &mut usize, quote: char| {
        *i += 1;
        while *i < c.len() && c[*i] != quote {
            if c[*i] == '\\' {
                *i += 1;
            }
            if *i < c.len() && c[*i] == '\n' {
                *line += 1;
            }
            *i += 1;
        }
        *i += 1;
    };
    while i < c.len() {
        let ch = c[i];
        if ch == '\n' {
            line += 1;
            i += 1;
        } else if ch.is_whitespace() {
            i += 1;
        } else if ch == '/' && c.get(i + 1) == Some(&'/') {
            while i < c.len() && c[i] != '\n' {
                i += 1;
            }
        } else if ch == '/' && c.get(i + 1) == Some(&'*') {
            let mut depth = 0;
            while i < c.len() {
                if c[i] == '/' && c.get(i + 1) == Some(&'*') {
                    depth += 1;
                    i += 2;
                } else if c[i] == '*' && c.get(i + 1) == Some(&'/') {
                    depth -= 1;
                    i += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    if c[i] == '\n' {
                        line += 1;
                    }
                    i += 1;
                }
            }
        } else if ch == '"' {
            skip_quoted(&mut i, &mut line, '"');
        } else if ch == '\'' {
            // A char literal ('x', '\n', '\u{..}') or a lifetime / label ('a), which is kept as
            // the identifier that follows.
            if c.get(i + 1) == Some(&'\\') || c.get(i + 2) == Some(&'\'') {
                skip_quoted(&mut i, &mut line, '\'');
            } else {
                i += 1;
            }
        } else if ch.is_alphanumeric() || ch == '_' {
            let start = i;
            while i < c.len() && (c[i].is_alphanumeric() || c[i] == '_') {
                i += 1;
            }
            let word: String = c[start..i].iter().collect();
            // Raw strings r"…", r#"…"#, and byte / C strings b"…", br#"…"#, c"…".
            let raw = matches!(word.as_str(), "r" | "br" | "cr");
            if raw && matches!(c.get(i), Some('"') | Some('#')) {
                let mut hashes = 0;
                while c.get(i) == Some(&'#') {
                    hashes += 1;
                    i += 1;
                }
                if c.get(i) == Some(&'"') {
                    i += 1;
                    loop {
                        if i >= c.len() {
                            break;
                        }
                        if c[i] == '\n' {
                            line += 1;
                        }
                        if c[i] == '"' && (0..hashes).all(|h| c.get(i + 1 + h) == Some(&'#')) {
                            i += 1 + hashes;
                            break;
                        }
                        i += 1;
                    }
                    continue;
                }
                // `r#ident`: a raw identifier.
                let start = i;
                while i < c.len() && (c[i].is_alphanumeric() || c[i] == '_') {
                    i += 1;
                }
                out.push(Token { tok: Tok::Ident(c[start..i].iter().collect()), line });
                continue;
            }
            if matches!(word.as_str(), "b" | "c") && matches!(c.get(i), Some('"') | Some('\'')) {
                let q = c[i];
                skip_quoted(&mut i, &mut line, q);
                continue;
            }
            out.push(Token { tok: Tok::Ident(word), line });
        } else if ch == ':' && c.get(i + 1) == Some(&':') {
            out.push(Token { tok: Tok::Sep, line });
            i += 2;
        } else {
            out.push(Token { tok: Tok::Punct(ch), line });
            i += 1;
        }
    }
    out
}

fn is_ident(t: Option<&Token>, name: &str) -> bool {
    matches!(t, Some(Token { tok: Tok::Ident(s), .. }) if s == name)
}

fn is_punct(t: Option<&Token>, p: char) -> bool {
    matches!(t, Some(Token { tok: Tok::Punct(q), .. }) if *q == p)
}

/// The index just past the bracket that closes the one at `open` (`(`, `[` or `{`).
fn matching(toks: &[Token], open: usize) -> usize {
    let mut depth = 0i64;
    for (k, t) in toks.iter().enumerate().skip(open) {
        match t.tok {
            Tok::Punct('(' | '[' | '{') => depth += 1,
            Tok::Punct(')' | ']' | '}') => {
                depth -= 1;
                if depth == 0 {
                    return k + 1;
                }
            }
            _ => {}
        }
    }
    toks.len()
}

/// Which tokens lie in an item marked `#[cfg(test)]` (the attribute included): from the
/// attribute to the item's `;`, or to the brace that closes its body.
fn test_items(toks: &[Token]) -> Vec<bool> {
    let mut mask = vec![false; toks.len()];
    let mut i = 0;
    while i < toks.len() {
        let cfg_test = is_punct(toks.get(i), '#')
            && is_punct(toks.get(i + 1), '[')
            && is_ident(toks.get(i + 2), "cfg")
            && is_punct(toks.get(i + 3), '(')
            && is_ident(toks.get(i + 4), "test")
            && is_punct(toks.get(i + 5), ')')
            && is_punct(toks.get(i + 6), ']');
        if !cfg_test {
            i += 1;
            continue;
        }
        let mut k = i + 7;
        let mut end = toks.len();
        while k < toks.len() {
            match toks[k].tok {
                Tok::Punct('#') if is_punct(toks.get(k + 1), '[') => k = matching(toks, k + 1),
                Tok::Punct(';') => {
                    end = k + 1;
                    break;
                }
                Tok::Punct('{') => {
                    end = matching(toks, k);
                    break;
                }
                Tok::Punct('(' | '[') => k = matching(toks, k),
                _ => k += 1,
            }
        }
        mask[i..end].iter_mut().for_each(|m| *m = true);
        i = end;
    }
    mask
}

// ---------------------------------------------------------------------------------------------
// Modules and files

/// The crate a file belongs to: the library (`src/lib.rs`) or the binary (`src/main.rs`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Krate {
    Lib,
    Bin,
}

struct SourceFile {
    /// Path from the repository root, `src/…`.
    path: String,
    text: String,
    toks: Vec<Token>,
    in_test: Vec<bool>,
}

/// Where each module's file is: (crate, module path) → index into the files, found by following
/// `mod name;` from `src/lib.rs` and `src/main.rs` (`dir/name.rs` or `dir/name/mod.rs`).
struct ModuleTree {
    file_of: BTreeMap<(Krate, Vec<String>), usize>,
    module_of: BTreeMap<usize, (Krate, Vec<String>)>,
}

impl ModuleTree {
    fn new(files: &[SourceFile]) -> ModuleTree {
        let index: BTreeMap<&str, usize> = files.iter().enumerate().map(|(k, f)| (f.path.as_str(), k)).collect();
        let mut tree = ModuleTree { file_of: BTreeMap::new(), module_of: BTreeMap::new() };
        let mut queue = VecDeque::new();
        for (root, krate) in [("src/lib.rs", Krate::Lib), ("src/main.rs", Krate::Bin)] {
            if let Some(&k) = index.get(root) {
                queue.push_back((k, krate, Vec::<String>::new()));
            }
        }
        while let Some((k, krate, module)) = queue.pop_front() {
            tree.file_of.insert((krate, module.clone()), k);
            tree.module_of.insert(k, (krate, module.clone()));
            let path = &files[k].path;
            let dir = match path.rsplit_once('/') {
                Some((d, "lib.rs" | "main.rs" | "mod.rs")) => d.to_string(),
                _ => path.trim_end_matches(".rs").to_string(),
            };
            let toks = &files[k].toks;
            let mut depth = 0;
            for j in 0..toks.len() {
                match toks[j].tok {
                    Tok::Punct('{') => depth += 1,
                    Tok::Punct('}') => depth -= 1,
                    _ => {}
                }
                // `mod name;` at the file's top level (a test module's file is no room).
                if depth != 0 || files[k].in_test[j] || !is_ident(toks.get(j), "mod") {
                    continue;
                }
                let (Some(Token { tok: Tok::Ident(name), .. }), true) =
                    (toks.get(j + 1), is_punct(toks.get(j + 2), ';'))
                else {
                    continue;
                };
                let found = [format!("{dir}/{name}.rs"), format!("{dir}/{name}/mod.rs")]
                    .into_iter()
                    .find_map(|p| index.get(p.as_str()).copied());
                if let Some(child) = found {
                    let mut m = module.clone();
                    m.push(name.clone());
                    queue.push_back((child, krate, m));
                }
            }
        }
        tree
    }

    /// The file of the deepest module along `path` (absolute in `krate`) that has one.
    fn file(&self, krate: Krate, path: &[String]) -> Option<usize> {
        (0..=path.len()).rev().find_map(|m| self.file_of.get(&(krate, path[..m].to_vec())).copied())
    }
}

/// One arrow's reason: where it is written and the path as written.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
struct Use {
    line: usize,
    path: String,
}

/// The paths that start at `toks[start]` (`crate`, `super`, `rrpdem`), as written, with
/// groups expanded: `crate::a::{b, c::d}` gives `crate::a::b` and `crate::a::c::d`.
fn path_tree(toks: &[Token], start: usize) -> (Vec<Vec<String>>, usize) {
    let mut leaves = Vec::new();
    let end = path_from(toks, start, Vec::new(), &mut leaves);
    (leaves, end)
}

fn path_from(toks: &[Token], mut i: usize, mut prefix: Vec<String>, leaves: &mut Vec<Vec<String>>) -> usize {
    loop {
        match toks.get(i).map(|t| &t.tok) {
            Some(Tok::Ident(s)) => {
                if s != "self" || prefix.is_empty() {
                    prefix.push(s.clone());
                }
                i += 1;
            }
            Some(Tok::Punct('*')) => {
                i += 1;
                break;
            }
            Some(Tok::Punct('{')) => {
                i += 1;
                while i < toks.len() && !is_punct(toks.get(i), '}') {
                    if is_punct(toks.get(i), ',') {
                        i += 1;
                        continue;
                    }
                    let before = i;
                    i = path_from(toks, i, prefix.clone(), leaves);
                    // `as name` after a group member.
                    if is_ident(toks.get(i), "as") {
                        i += 2;
                    }
                    if i == before {
                        i += 1;
                    }
                }
                return i + 1;
            }
            _ => break,
        }
        if toks.get(i).map(|t| &t.tok) != Some(&Tok::Sep) {
            break;
        }
        i += 1;
    }
    if !prefix.is_empty() {
        leaves.push(prefix);
    }
    i
}

/// The import graph between files: `arrows[a][b]` lists what ties file `a` to file `b`.
type Arrows = BTreeMap<usize, BTreeMap<usize, BTreeSet<Use>>>;

fn arrows(files: &[SourceFile], tree: &ModuleTree) -> Arrows {
    let mut arrows = Arrows::new();
    for (k, f) in files.iter().enumerate() {
        let Some((krate, module)) = tree.module_of.get(&k) else { continue };
        let toks = &f.toks;
        // Inline modules open at brace depth: `super` inside one is relative to it.
        let mut inline: Vec<(String, i64)> = Vec::new();
        let mut depth = 0i64;
        let mut i = 0;
        while i < toks.len() {
            match &toks[i].tok {
                Tok::Punct('{') => {
                    depth += 1;
                    if let (Some(Token { tok: Tok::Ident(name), .. }), true) = (
                        i.checked_sub(1).and_then(|p| toks.get(p)),
                        is_ident(i.checked_sub(2).and_then(|p| toks.get(p)), "mod"),
                    ) {
                        inline.push((name.clone(), depth));
                    }
                }
                Tok::Punct('}') => {
                    if inline.last().is_some_and(|(_, d)| *d == depth) {
                        inline.pop();
                    }
                    depth -= 1;
                }
                _ => {}
            }
            let starts = matches!(&toks[i].tok, Tok::Ident(s) if s == "crate" || s == "super" || s == "rrpdem")
                && toks.get(i + 1).map(|t| &t.tok) == Some(&Tok::Sep)
                && i.checked_sub(1).and_then(|p| toks.get(p)).map(|t| &t.tok) != Some(&Tok::Sep);
            if !starts || f.in_test[i] {
                i += 1;
                continue;
            }
            let (leaves, end) = path_tree(toks, i);
            let here: Vec<String> = module.iter().cloned().chain(inline.iter().map(|(n, _)| n.clone())).collect();
            for leaf in leaves {
                let (target_krate, absolute) = match leaf[0].as_str() {
                    "crate" => (*krate, leaf[1..].to_vec()),
                    "rrpdem" => (Krate::Lib, leaf[1..].to_vec()),
                    _ => {
                        let ups = leaf.iter().take_while(|s| *s == "super").count();
                        let Some(base) = here.len().checked_sub(ups) else { continue };
                        (*krate, here[..base].iter().chain(&leaf[ups..]).cloned().collect())
                    }
                };
                let Some(target) = tree.file(target_krate, &absolute) else { continue };
                if target != k {
                    let u = Use { line: toks[i].line, path: leaf.join("::") };
                    arrows.entry(k).or_default().entry(target).or_default().insert(u);
                }
            }
            // A group's braces are balanced inside the path, so the depth count holds.
            i = end.max(i + 1);
        }
    }
    arrows
}

/// The circles of the graph: each strongly connected set of two files or more (Tarjan), as
/// one shortest loop through its first file.
fn circles(n: usize, arrows: &Arrows) -> Vec<Vec<usize>> {
    struct Tarjan<'a> {
        arrows: &'a Arrows,
        index: Vec<Option<usize>>,
        low: Vec<usize>,
        on_stack: Vec<bool>,
        stack: Vec<usize>,
        next: usize,
        sets: Vec<Vec<usize>>,
    }
    impl Tarjan<'_> {
        fn visit(&mut self, v: usize) {
            self.index[v] = Some(self.next);
            self.low[v] = self.next;
            self.next += 1;
            self.stack.push(v);
            self.on_stack[v] = true;
            let targets: Vec<usize> = self.arrows.get(&v).map(|m| m.keys().copied().collect()).unwrap_or_default();
            for w in targets {
                match self.index[w] {
                    None => {
                        self.visit(w);
                        self.low[v] = self.low[v].min(self.low[w]);
                    }
                    Some(iw) if self.on_stack[w] => self.low[v] = self.low[v].min(iw),
                    _ => {}
                }
            }
            if Some(self.low[v]) == self.index[v] {
                let mut set = Vec::new();
                while let Some(w) = self.stack.pop() {
                    self.on_stack[w] = false;
                    set.push(w);
                    if w == v {
                        break;
                    }
                }
                if set.len() > 1 {
                    set.sort();
                    self.sets.push(set);
                }
            }
        }
    }
    let mut t = Tarjan {
        arrows,
        index: vec![None; n],
        low: vec![0; n],
        on_stack: vec![false; n],
        stack: Vec::new(),
        next: 0,
        sets: Vec::new(),
    };
    for v in 0..n {
        if t.index[v].is_none() {
            t.visit(v);
        }
    }
    // A shortest loop from each set's first file back to it, inside the set.
    t.sets
        .iter()
        .map(|set| {
            let inside: BTreeSet<usize> = set.iter().copied().collect();
            let start = set[0];
            let mut parent: BTreeMap<usize, usize> = BTreeMap::new();
            let mut queue = VecDeque::from([start]);
            let mut last = start;
            'search: while let Some(v) = queue.pop_front() {
                for &w in arrows.get(&v).map(|m| m.keys().collect::<Vec<_>>()).unwrap_or_default() {
                    if w == start {
                        last = v;
                        break 'search;
                    }
                    if inside.contains(&w) && !parent.contains_key(&w) {
                        parent.insert(w, v);
                        queue.push_back(w);
                    }
                }
            }
            let mut path = vec![last];
            while *path.last().expect("non-empty") != start {
                path.push(parent[path.last().expect("non-empty")]);
            }
            path.reverse();
            path
        })
        .collect()
}

/// A circle in words: each file, then the lines and paths that tie it to the next.
fn describe(files: &[SourceFile], arrows: &Arrows, circle: &[usize]) -> String {
    let mut s = String::new();
    for (k, &a) in circle.iter().enumerate() {
        let b = circle[(k + 1) % circle.len()];
        s += &format!("  {} -> {}\n", files[a].path, files[b].path);
        for u in &arrows[&a][&b] {
            s += &format!("      {}:{}  {}\n", files[a].path, u.line, u.path);
        }
    }
    s
}

// ---------------------------------------------------------------------------------------------
// Sizes

/// Functions longer than `MAX_FN_LINES` with no reason written above them: (line, name, lines).
fn long_functions(f: &SourceFile) -> Vec<(usize, String, usize)> {
    let lines: Vec<&str> = f.text.lines().collect();
    let toks = &f.toks;
    let mut found = Vec::new();
    for i in 0..toks.len() {
        if !is_ident(toks.get(i), "fn") {
            continue;
        }
        // `fn(…)` is a pointer type, not an item.
        let Some(Token { tok: Tok::Ident(name), .. }) = toks.get(i + 1) else { continue };
        // The body: the first `{` outside parentheses and brackets, unless a `;` ends the item.
        let mut k = i + 2;
        let mut body = None;
        while k < toks.len() {
            match toks[k].tok {
                Tok::Punct('(' | '[') => k = matching(toks, k),
                Tok::Punct(';') => break,
                Tok::Punct('{') => {
                    body = Some(k);
                    break;
                }
                _ => k += 1,
            }
        }
        let Some(open) = body else { continue };
        let close = matching(toks, open) - 1;
        let (first, last) = (toks[i].line, toks[close.min(toks.len() - 1)].line);
        let length = last - first + 1;
        if length <= MAX_FN_LINES {
            continue;
        }
        let above = &lines[first.saturating_sub(1 + FN_REASON_ABOVE)..first - 1];
        if !above.iter().any(|l| l.contains(FN_REASON)) {
            found.push((first, name.clone(), length));
        }
    }
    found
}

/// Whether a file is over `MAX_FILE_LINES` lines with no reason in its first lines: its length.
fn long_file(f: &SourceFile) -> Option<usize> {
    let n = f.text.lines().count();
    let reason = f.text.lines().take(FILE_REASON_WITHIN).any(|l| l.contains(FILE_REASON));
    (n > MAX_FILE_LINES && !reason).then_some(n)
}

// ---------------------------------------------------------------------------------------------
// The tree

fn source_file(path: String, text: String) -> SourceFile {
    let toks = tokens(&text);
    let in_test = test_items(&toks);
    SourceFile { path, text, toks, in_test }
}

/// Every `.rs` file under `src/`, sorted by path.
fn read_src() -> Vec<SourceFile> {
    fn walk(dir: &Path, root: &Path, out: &mut Vec<SourceFile>) {
        let mut entries: Vec<_> =
            std::fs::read_dir(dir).expect("src/ is readable").map(|e| e.expect("entry").path()).collect();
        entries.sort();
        for p in entries {
            if p.is_dir() {
                walk(&p, root, out);
            } else if p.extension().is_some_and(|e| e == "rs") {
                let rel = p.strip_prefix(root).expect("under the root").to_string_lossy().replace('\\', "/");
                let text = std::fs::read_to_string(&p).expect("source is UTF-8");
                out.push(source_file(rel, text));
            }
        }
    }
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut out = Vec::new();
    walk(&root.join("src"), root, &mut out);
    out
}

/// The circles of a tree, each in words.
fn circles_in(files: &[SourceFile]) -> Vec<String> {
    let tree = ModuleTree::new(files);
    let arrows = arrows(files, &tree);
    circles(files.len(), &arrows).iter().map(|c| describe(files, &arrows, c)).collect()
}

#[test]
fn no_import_circle_between_source_files() {
    let started = Instant::now();
    let files = read_src();
    let tree = ModuleTree::new(&files);
    // Every file is a module of the library or the binary: a file the tree does not reach would
    // go unchecked.
    let stray: Vec<&str> = files
        .iter()
        .enumerate()
        .filter(|(k, _)| !tree.module_of.contains_key(k))
        .map(|(_, f)| f.path.as_str())
        .collect();
    assert!(stray.is_empty(), "files under src/ that no `mod` declaration reaches: {stray:?}");
    let arrows = arrows(&files, &tree);
    let n_arrows: usize = arrows.values().map(BTreeMap::len).sum();
    // The graph is not empty (a parser that read nothing would pass): the lower layers are
    // imported from above.
    assert!(n_arrows > 100, "only {n_arrows} arrows between {} files: the paths were not read", files.len());
    let found = circles(files.len(), &arrows);
    let words: Vec<String> = found.iter().map(|c| describe(&files, &arrows, c)).collect();
    assert!(
        found.is_empty(),
        "{} import circle(s) between source files (imports must point down the layers of docs/ARCHITECTURE.md):\n{}",
        found.len(),
        words.join("\n")
    );
    eprintln!("{} files, {n_arrows} arrows, no circle ({:.0?})", files.len(), started.elapsed());
}

#[test]
fn no_file_over_900_lines_without_a_reason() {
    let files = read_src();
    let long: Vec<String> =
        files.iter().filter_map(|f| long_file(f).map(|n| format!("  {} ({n} lines)", f.path))).collect();
    assert!(
        long.is_empty(),
        "files over {MAX_FILE_LINES} lines (split them, or say why in the first {FILE_REASON_WITHIN} lines with the \
         words \"{FILE_REASON}\"):\n{}",
        long.join("\n")
    );
}

#[test]
fn no_function_over_120_lines_without_a_reason() {
    let files = read_src();
    let long: Vec<String> = files
        .iter()
        .flat_map(|f| {
            long_functions(f)
                .into_iter()
                .map(move |(line, name, n)| format!("  {}:{line} fn {name} ({n} lines)", f.path))
        })
        .collect();
    assert!(
        long.is_empty(),
        "functions over {MAX_FN_LINES} lines (split them, or say why within the {FN_REASON_ABOVE} lines above with the \
         words \"{FN_REASON}\"):\n{}",
        long.join("\n")
    );
}

// ---------------------------------------------------------------------------------------------
// The checker on made-up trees

fn tree_of(files: &[(&str, &str)]) -> Vec<SourceFile> {
    files.iter().map(|(p, t)| source_file(p.to_string(), t.to_string())).collect()
}

#[test]
fn checker_finds_a_circle_and_names_its_paths() {
    let files = tree_of(&[
        ("src/lib.rs", "pub mod low;\npub mod high;\npub mod mid;\n"),
        ("src/low.rs", "//! low\nuse crate::high::Thing;\npub struct Base;\n"),
        ("src/mid.rs", "use crate::low::Base;\n"),
        ("src/high.rs", "use crate::{mid, low::{self, Base}};\npub struct Thing;\n"),
    ]);
    let found = circles_in(&files);
    assert_eq!(found.len(), 1, "{found:?}");
    assert!(found[0].contains("src/low.rs -> src/high.rs"), "{}", found[0]);
    assert!(found[0].contains("src/low.rs:2  crate::high::Thing"), "{}", found[0]);
    assert!(found[0].contains("crate::low::Base"), "{}", found[0]);
}

#[test]
fn checker_reads_super_nested_modules_and_inline_paths() {
    // a/b.rs reaches a/mod.rs through `super`, a/mod.rs reaches a/b.rs through an inline path
    // to a nested module's item.
    let files = tree_of(&[
        ("src/lib.rs", "mod a;\n"),
        ("src/a/mod.rs", "mod b;\nfn f() { let _ = crate::a::b::c::Item::new(); }\n"),
        ("src/a/b.rs", "mod c { pub struct Item; }\nuse super::super::a::f;\n"),
    ]);
    let found = circles_in(&files);
    assert_eq!(found.len(), 1, "{found:?}");
    assert!(found[0].contains("crate::a::b::c::Item::new"), "{}", found[0]);
    assert!(found[0].contains("super::super::a::f"), "{}", found[0]);
    // `super` inside an inline module is relative to that module: here the file itself.
    let files = tree_of(&[
        ("src/lib.rs", "mod a;\nmod b;\n"),
        ("src/a.rs", "use crate::b::X;\nmod inner { use super::Y; }\npub struct Y;\n"),
        ("src/b.rs", "pub struct X;\n"),
    ]);
    assert!(circles_in(&files).is_empty());
}

#[test]
fn checker_ignores_tests_comments_strings_and_relative_child_paths() {
    let files = tree_of(&[
        ("src/lib.rs", "mod low;\nmod high;\n"),
        (
            "src/low.rs",
            "//! See `crate::high::X`.\n/* crate::high::X */\nconst S: &str = \"crate::high::X\";\nconst R: &str = \
             r#\"crate::high::X\"#;\nconst C: char = '\"';\nfn g<'a>(x: &'a str) -> &'a str { x }\n#[cfg(test)]\nmod \
             tests {\n    use crate::high::X;\n}\n",
        ),
        ("src/high.rs", "mod sub;\nuse sub::Z;\nuse crate::low::g;\npub struct X;\n"),
        ("src/high/sub.rs", "use super::X;\npub struct Z;\n"),
    ]);
    assert!(circles_in(&files).is_empty(), "{:?}", circles_in(&files));
    // The same test module without `#[cfg(test)]` is an import.
    let files = tree_of(&[
        ("src/lib.rs", "mod low;\nmod high;\n"),
        ("src/low.rs", "mod tests {\n    use crate::high::X;\n}\n"),
        ("src/high.rs", "use crate::low::g;\npub struct X;\n"),
    ]);
    assert_eq!(circles_in(&files).len(), 1);
}

#[test]
fn checker_reads_the_binary_crate() {
    // The binary's `crate` is src/main.rs; its files reach the library as `rrpdem::`.
    let files = tree_of(&[
        ("src/lib.rs", "pub mod run;\n"),
        ("src/run.rs", "pub fn go() {}\n"),
        ("src/main.rs", "mod cli;\nfn main() { cli::main() }\n"),
        ("src/cli/mod.rs", "mod run;\npub fn main() { run::go() }\n"),
        ("src/cli/run.rs", "use rrpdem::run::go;\nuse crate::cli::main;\npub fn x() { super::main() }\n"),
    ]);
    let tree = ModuleTree::new(&files);
    let arrows = arrows(&files, &tree);
    let to = |a: usize| arrows.get(&a).map(|m| m.keys().copied().collect::<Vec<_>>()).unwrap_or_default();
    assert_eq!(to(4), vec![1, 3], "cli/run.rs -> run.rs (library) and cli/mod.rs: {arrows:?}");
}

#[test]
fn checker_measures_files_and_functions() {
    let body = |n: usize| (0..n).map(|k| format!("    let _x{k} = {k};\n")).collect::<String>();
    // 121 lines from `fn` to `}` (119 body lines), and exactly 120.
    let long = format!("fn long() {{\n{}}}\n", body(119));
    let fits = format!("fn fits() {{\n{}}}\n", body(118));
    let excused = format!("// over 120 lines: one table, read top to bottom.\n\nfn excused() {{\n{}}}\n", body(200));
    let far = format!("// over 120 lines: too far above.\n\n\n\nfn far() {{\n{}}}\n", body(200));
    let decl = "trait T { fn declared(&self) -> [u8; 2]; }\nfn ptr(f: fn(usize) -> usize) -> usize { f(1) }\n";
    let f = source_file("src/x.rs".into(), format!("{long}{fits}{excused}{far}{decl}"));
    let names: Vec<(String, usize)> = long_functions(&f).into_iter().map(|(_, n, l)| (n, l)).collect();
    assert_eq!(names, vec![("long".to_string(), 121), ("far".to_string(), 202)]);

    let lines = |n: usize| "\n".repeat(n);
    assert_eq!(long_file(&source_file("src/a.rs".into(), lines(900))), None);
    assert_eq!(long_file(&source_file("src/a.rs".into(), lines(901))), Some(901));
    let excused = format!("//! a table\n//! over 900 lines: generated once, read as one table\n{}", lines(1000));
    assert_eq!(long_file(&source_file("src/a.rs".into(), excused)), None);
    let late = format!("{}// over 900 lines: too late\n{}", lines(20), lines(1000));
    assert!(long_file(&source_file("src/a.rs".into(), late)).is_some());
}
