//! The crate's layer rules, enforced by reading the source text.
//!
//! stackgate is built in layers (see [`LAYERS`]): foundation code such as budgets, the YAML
//! reader and the cloud-config parser at the bottom, rules, policies and the engine in the
//! middle, adapters to the outside world above them, and the webhook server and the CLI on
//! top. A module may use modules in lower layers, never ones in higher layers, and no group
//! of modules may use each other in a loop. Rust does not enforce any of this inside one
//! crate, so without a check an upward `use` slips in during a refactor and the layers
//! quietly stop meaning anything.
//!
//! This test walks `src/`, lexes each file just well enough to drop comments and string
//! literals (doc comments link to `crate::` paths that are not dependencies), collects every
//! path into the crate (`use crate::…` including grouped, multi-line uses; inline paths such
//! as `crate::sites::helm::object_name(…)`; `super::` and `self::` paths; paths through a
//! declared child module or through a name imported from the crate), maps every file and
//! every path to a *unit*, and checks the resulting graph against [`LAYERS`]. It also maps
//! every path to the *file* that defines what it names and fails on a loop between files
//! (`evaluate.rs` using `report.rs` while `report.rs` uses `evaluate.rs`), inside a unit or
//! across units, naming each file and line of the loop; a module's own file (`mod.rs`) using
//! the modules it declares is left out, since it is their front.
//!
//! Run it with `cargo test --test layers`. It uses std only: no parser crate, nothing new
//! to build. The lexer is not a Rust parser, so the tests at the bottom pin down what it
//! must get right (comments, strings, raw strings, char literals, grouped `use`), and one
//! test checks that the scan of `src/` finds plenty of edges, so the check cannot pass by
//! extracting nothing.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

/// The layers, lowest first; a layer's number is its index. A unit may use units in lower
/// layers, and units in its own layer as long as that does not close a cycle. Every unit
/// in `src/` must be listed: a new module fails this test until it is placed in a layer.
/// Units listed here that do not exist yet are fine. ARCHITECTURE.md copies this table;
/// change both together.
const LAYERS: &[(&str, &[&str])] = &[
    // 0: building blocks that know nothing of sites, rules or policies.
    (
        "foundation",
        &[
            "budget",
            "yaml",
            "cloudconf",
            "telemetry",
            "log_writer",
            "short_text",
            "json_text",
            "test_rng",
            "secret_text",
            "certs",
        ],
    ),
    // 1: where configuration is carried in an object (sites), and the release facts as
    // data: the catalog and the snapshot, not the watcher that fills it.
    ("carriers and facts data", &["sites", "releases", "facts"]),
    // 2: the checks themselves, pure functions over carriers and facts.
    ("rules", &["rules"]),
    // 3: which rules run where, in which mode, with which parameters.
    ("policy", &["policy"]),
    // 4: runs the policies' rules over one object; compiles what it can of them into
    // Kubernetes admission policies (CEL).
    ("engine", &["engine", "admission_policies"]),
    // 5: connect the engine to the outside world: admission reviews, Git files, the
    // OpenStack APIs, the OpenStackVersion watcher, Prometheus; and the report (findings
    // as data, rendered as text, JSON, SARIF or JUnit) that `check` and `audit` share.
    (
        "adapters",
        &[
            "admission",
            "report",
            "check",
            "cluster_config",
            "platform",
            "ccm_config_watch",
            "fact_watcher",
            "exceptions_watch",
            "guard",
            "audit",
            "uninstall",
            "releases::watcher",
            "releases::metrics",
            "certs::controller",
            "metrics",
        ],
    ),
    // 6: what a user runs.
    ("faces", &["server", "cli", "compose"]),
];

/// Submodules that are units of their own instead of part of their top-level module. A
/// file belongs to the longest entry that is a prefix of its module path; every other
/// file belongs to its top-level module (`src/engine/mod.rs` and `src/engine/x.rs` are
/// `engine`, `src/cli.rs` is `cli`). Each entry must also be placed in [`LAYERS`].
const FINER_UNITS: &[&str] = &[
    "releases::watcher",
    "releases::metrics",
    "certs::controller",
];

/// The binary: it uses the library as `stackgate::`, from outside, so it has no layer.
const BINARY_ROOT: &str = "main.rs";

// ---------------------------------------------------------------------------------------
// Units and layers
// ---------------------------------------------------------------------------------------

/// The unit that an absolute module path (without the leading `crate`) belongs to, or
/// `None` for the crate root itself (`src/lib.rs`, which only declares modules).
fn unit_of(module_path: &[String]) -> Option<String> {
    let finer = FINER_UNITS
        .iter()
        .map(|unit| unit.split("::").collect::<Vec<_>>())
        .filter(|segments| {
            segments.len() <= module_path.len()
                && segments.iter().zip(module_path).all(|(a, b)| a == b)
        })
        .max_by_key(|segments| segments.len());
    match finer {
        Some(segments) => Some(segments.join("::")),
        None => module_path.first().cloned(),
    }
}

fn layer_of(unit: &str) -> Option<usize> {
    LAYERS.iter().position(|(_, units)| units.contains(&unit))
}

fn layer_name(layer: usize) -> &'static str {
    LAYERS[layer].0
}

/// The module path of a file, from its path relative to `src/`:
/// `engine/mod.rs` → `engine`, `engine/x.rs` → `engine::x`, `lib.rs` → the root.
fn module_path_of(relative_to_src: &Path) -> Vec<String> {
    let mut segments: Vec<String> = relative_to_src
        .iter()
        .map(|part| part.to_string_lossy().into_owned())
        .collect();
    if let Some(last) = segments.pop() {
        let stem = last.strip_suffix(".rs").unwrap_or(&last).to_owned();
        if stem != "mod" && !(segments.is_empty() && stem == "lib") {
            segments.push(stem);
        }
    }
    segments
}

// ---------------------------------------------------------------------------------------
// Lexer: identifiers, `::` and punctuation, with comments and literals dropped
// ---------------------------------------------------------------------------------------

#[derive(Debug, Clone, PartialEq)]
enum Token {
    Ident(String),
    PathSep,
    Punct(char),
}

#[derive(Debug, Clone)]
struct Lexeme {
    token: Token,
    line: usize,
}

fn is_ident_start(c: char) -> bool {
    c == '_' || c.is_alphabetic()
}

fn is_ident_continue(c: char) -> bool {
    c == '_' || c.is_alphanumeric()
}

/// Splits source text into identifiers, `::` and single punctuation characters, each with
/// its line. Comments (line, doc and nested block), string literals (plain, byte, C, raw
/// with any number of `#`), char and byte literals, lifetimes and numbers produce nothing,
/// so a `crate::` inside them is never mistaken for code.
fn lex(source: &str) -> Vec<Lexeme> {
    let chars: Vec<char> = source.chars().collect();
    let mut lexemes = Vec::new();
    let mut line = 1;
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        let next = chars.get(i + 1).copied();
        match c {
            '\n' => {
                line += 1;
                i += 1;
            }
            c if c.is_whitespace() => i += 1,
            '/' if next == Some('/') => {
                while i < chars.len() && chars[i] != '\n' {
                    i += 1;
                }
            }
            '/' if next == Some('*') => i = skip_block_comment(&chars, i, &mut line),
            '"' => i = skip_quoted_string(&chars, i + 1, &mut line),
            '\'' => i = skip_char_or_lifetime(&chars, i),
            c if c.is_ascii_digit() => {
                while i < chars.len() && is_ident_continue(chars[i]) {
                    i += 1;
                }
            }
            c if is_ident_start(c) => {
                let start = i;
                while i < chars.len() && is_ident_continue(chars[i]) {
                    i += 1;
                }
                let word: String = chars[start..i].iter().collect();
                let after = chars.get(i).copied();
                match (word.as_str(), after) {
                    ("r" | "br" | "cr", Some('"' | '#')) if raw_string_starts(&chars, i) => {
                        i = skip_raw_string(&chars, i, &mut line);
                    }
                    ("r", Some('#')) => {
                        // A raw identifier such as `r#type`: the name is what follows `#`.
                        let name_start = i + 1;
                        i = name_start;
                        while i < chars.len() && is_ident_continue(chars[i]) {
                            i += 1;
                        }
                        lexemes.push(Lexeme {
                            token: Token::Ident(chars[name_start..i].iter().collect()),
                            line,
                        });
                    }
                    ("b" | "c", Some('"')) => i = skip_quoted_string(&chars, i + 1, &mut line),
                    ("b", Some('\'')) => i = skip_char_or_lifetime(&chars, i),
                    _ => lexemes.push(Lexeme {
                        token: Token::Ident(word),
                        line,
                    }),
                }
            }
            ':' if next == Some(':') => {
                lexemes.push(Lexeme {
                    token: Token::PathSep,
                    line,
                });
                i += 2;
            }
            _ => {
                lexemes.push(Lexeme {
                    token: Token::Punct(c),
                    line,
                });
                i += 1;
            }
        }
    }
    lexemes
}

/// `start` is at the `/` of `/*`; block comments nest in Rust.
fn skip_block_comment(chars: &[char], start: usize, line: &mut usize) -> usize {
    let mut depth = 0;
    let mut i = start;
    while i < chars.len() {
        match (chars[i], chars.get(i + 1).copied()) {
            ('/', Some('*')) => {
                depth += 1;
                i += 2;
            }
            ('*', Some('/')) => {
                depth -= 1;
                i += 2;
                if depth == 0 {
                    return i;
                }
            }
            ('\n', _) => {
                *line += 1;
                i += 1;
            }
            _ => i += 1,
        }
    }
    i
}

/// `start` is just after the opening `"`; returns the index after the closing one.
fn skip_quoted_string(chars: &[char], start: usize, line: &mut usize) -> usize {
    let mut i = start;
    while i < chars.len() {
        match chars[i] {
            '\\' => {
                if chars.get(i + 1) == Some(&'\n') {
                    *line += 1;
                }
                i += 2;
            }
            '"' => return i + 1,
            '\n' => {
                *line += 1;
                i += 1;
            }
            _ => i += 1,
        }
    }
    i
}

/// Whether `#…#"` (or a bare `"`) starts at `i`, right after an `r`, `br` or `cr` prefix.
fn raw_string_starts(chars: &[char], i: usize) -> bool {
    let mut j = i;
    while chars.get(j) == Some(&'#') {
        j += 1;
    }
    chars.get(j) == Some(&'"')
}

/// `start` is at the first `#` or the `"` after the prefix; a raw string ends at a `"`
/// followed by as many `#` as it opened with, and has no escapes.
fn skip_raw_string(chars: &[char], start: usize, line: &mut usize) -> usize {
    let mut i = start;
    let mut hashes = 0;
    while chars.get(i) == Some(&'#') {
        hashes += 1;
        i += 1;
    }
    i += 1; // the opening quote
    while i < chars.len() {
        if chars[i] == '"' && (1..=hashes).all(|k| chars.get(i + k) == Some(&'#')) {
            return i + 1 + hashes;
        }
        if chars[i] == '\n' {
            *line += 1;
        }
        i += 1;
    }
    i
}

/// `start` is at a `'`: a char literal (`'x'`, `'"'`, `'\''`, `'\u{1F600}'`) or a lifetime
/// or label (`'a`, `'static`), which has no closing quote.
fn skip_char_or_lifetime(chars: &[char], start: usize) -> usize {
    if chars.get(start + 1) == Some(&'\\') {
        let mut i = start + 3; // past the backslash and the escaped character
        while i < chars.len() && chars[i] != '\'' {
            i += 1;
        }
        return i + 1;
    }
    if chars.get(start + 2) == Some(&'\'') {
        return start + 3;
    }
    let mut i = start + 1;
    while i < chars.len() && is_ident_continue(chars[i]) {
        i += 1;
    }
    i
}

// ---------------------------------------------------------------------------------------
// References into the crate
// ---------------------------------------------------------------------------------------

/// One path into the crate, found in code.
#[derive(Debug, Clone, PartialEq)]
struct Reference {
    line: usize,
    /// The absolute module path, without the leading `crate`: `crate::sites::helm::f` is
    /// `["sites", "helm", "f"]`.
    path: Vec<String>,
}

/// One leaf of a `use` tree: `use a::{b, c::d as e}` has the leaves `a::b` and `a::c::d`.
struct UseLeaf {
    segments: Vec<String>,
    line: usize,
    /// The name the leaf brings into scope; `None` for a glob.
    binding: Option<String>,
}

/// Every path into the crate in `source`, the text of the module at `file_module` (its
/// absolute path, without `crate`). Paths are resolved to absolute ones: `crate::…`,
/// `$crate::…`, `super::…` and `self::…` (inline `mod … {}` blocks included), a child module
/// the file declares with `mod name;`, and a name the file imported from the crate with
/// `use` (those only count when they lead to a different unit than the `use` did, such as
/// `releases::watcher::run` after `use crate::releases`, so one dependency is reported once).
fn crate_references(file_module: &[String], source: &str) -> Vec<Reference> {
    scan_references(file_module, source).direct
}

/// The paths into the crate in one file: those [`crate_references`] returns, and every path
/// that starts with a name imported from the crate, whatever unit it reaches (for the file
/// graph: `helm::chart_names(…)` after `use super::helm` reaches `sites/helm.rs`).
struct FileReferences {
    direct: Vec<Reference>,
    through_imports: Vec<Reference>,
}

fn scan_references(file_module: &[String], source: &str) -> FileReferences {
    let lexemes = lex(source);
    let mut extractor = Extractor {
        child_modules: declared_child_modules(&lexemes),
        lexemes: &lexemes,
        file_module: file_module.to_vec(),
        imports: BTreeMap::new(),
        inline_modules: Vec::new(),
        brace_depth: 0,
        references: Vec::new(),
        through_imports: Vec::new(),
    };
    extractor.run();
    FileReferences {
        direct: extractor.references,
        through_imports: extractor.through_imports,
    }
}

/// The names in `mod name;` declarations: the files `name.rs` or `name/mod.rs` below this
/// one, reachable as `name::…` without a prefix.
fn declared_child_modules(lexemes: &[Lexeme]) -> BTreeSet<String> {
    lexemes
        .windows(3)
        .filter_map(
            |window| match (&window[0].token, &window[1].token, &window[2].token) {
                (Token::Ident(keyword), Token::Ident(name), Token::Punct(';'))
                    if keyword == "mod" =>
                {
                    Some(name.clone())
                }
                _ => None,
            },
        )
        .collect()
}

struct Extractor<'a> {
    lexemes: &'a [Lexeme],
    file_module: Vec<String>,
    child_modules: BTreeSet<String>,
    /// Names brought into scope by `use` of a crate path, and the absolute path they stand for.
    imports: BTreeMap<String, Vec<String>>,
    /// Inline `mod name { … }` blocks we are inside, with the brace depth of their body,
    /// so `super::` inside `mod tests` resolves to the file's own module.
    inline_modules: Vec<(String, usize)>,
    brace_depth: usize,
    references: Vec<Reference>,
    /// Every path in code that starts with a name imported from the crate, unfiltered.
    through_imports: Vec<Reference>,
}

impl Extractor<'_> {
    fn token(&self, i: usize) -> Option<&Token> {
        self.lexemes.get(i).map(|lexeme| &lexeme.token)
    }

    fn run(&mut self) {
        let mut i = 0;
        while i < self.lexemes.len() {
            match self.token(i) {
                Some(Token::Punct('{')) => {
                    self.brace_depth += 1;
                    i += 1;
                }
                Some(Token::Punct('}')) => {
                    self.brace_depth = self.brace_depth.saturating_sub(1);
                    while self
                        .inline_modules
                        .last()
                        .is_some_and(|(_, body_depth)| *body_depth > self.brace_depth)
                    {
                        self.inline_modules.pop();
                    }
                    i += 1;
                }
                Some(Token::Ident(word)) if word == "mod" => {
                    if let (Some(Token::Ident(name)), Some(Token::Punct('{'))) =
                        (self.token(i + 1), self.token(i + 2))
                    {
                        self.inline_modules
                            .push((name.clone(), self.brace_depth + 1));
                    }
                    i += 1;
                }
                // `use<'a>` in `impl Trait + use<'a>` is not an import.
                Some(Token::Ident(word))
                    if word == "use"
                        && matches!(
                            self.token(i + 1),
                            Some(Token::Ident(_) | Token::PathSep | Token::Punct('{'))
                        ) =>
                {
                    i = self.use_declaration(i + 1);
                }
                Some(Token::Ident(_)) if self.starts_path(i) => i = self.inline_path(i),
                _ => i += 1,
            }
        }
    }

    /// An identifier followed by `::` that is not itself the continuation of a path or a
    /// method name (`a::b`, `x.f::<T>()`).
    fn starts_path(&self, i: usize) -> bool {
        let continues =
            i > 0 && matches!(self.token(i - 1), Some(Token::PathSep | Token::Punct('.')));
        !continues
            && self.token(i + 1) == Some(&Token::PathSep)
            && matches!(self.token(i + 2), Some(Token::Ident(_)))
    }

    fn inline_path(&mut self, start: usize) -> usize {
        let mut segments = Vec::new();
        let mut i = start;
        while let Some(Token::Ident(segment)) = self.token(i) {
            segments.push(segment.clone());
            if self.token(i + 1) == Some(&Token::PathSep)
                && matches!(self.token(i + 2), Some(Token::Ident(_)))
            {
                i += 2;
            } else {
                i += 1;
                break;
            }
        }
        let line = self.lexemes[start].line;
        if let Some(path) = self.resolve(&segments) {
            self.references.push(Reference { line, path });
        }
        if let Some((first, rest)) = segments.split_first()
            && !self.child_modules.contains(first)
            && let Some(imported) = self.imports.get(first)
        {
            let mut path = imported.clone();
            path.extend_from_slice(rest);
            self.through_imports.push(Reference { line, path });
        }
        i
    }

    /// `start` is just after `use`; returns the index after the closing `;`.
    fn use_declaration(&mut self, start: usize) -> usize {
        let mut leaves = Vec::new();
        let mut i = parse_use_tree(self.lexemes, start, Vec::new(), &mut leaves);
        while i < self.lexemes.len() && self.token(i) != Some(&Token::Punct(';')) {
            i += 1;
        }
        for leaf in leaves {
            let Some(path) = self.resolve(&leaf.segments) else {
                continue;
            };
            if let Some(binding) = leaf.binding.filter(|name| name != "_") {
                self.imports.insert(binding, path.clone());
            }
            self.references.push(Reference {
                line: leaf.line,
                path,
            });
        }
        i + 1
    }

    /// The module the code at the current position is in: the file's, plus inline modules.
    fn current_module(&self) -> Vec<String> {
        let mut module = self.file_module.clone();
        module.extend(self.inline_modules.iter().map(|(name, _)| name.clone()));
        module
    }

    /// The absolute path (without `crate`) for a path as written, or `None` when it does
    /// not lead into the crate (`std::…`, `kube::…`, `Self::…`, a leading `::`).
    fn resolve(&self, segments: &[String]) -> Option<Vec<String>> {
        let (first, rest) = segments.split_first()?;
        match first.as_str() {
            "crate" => Some(rest.to_vec()),
            "self" => {
                let mut path = self.current_module();
                path.extend_from_slice(rest);
                Some(path)
            }
            "super" => {
                let mut path = self.current_module();
                path.pop()?;
                let mut rest = rest;
                while rest.first().is_some_and(|segment| segment == "super") {
                    path.pop()?;
                    rest = &rest[1..];
                }
                path.extend_from_slice(rest);
                Some(path)
            }
            name if self.child_modules.contains(name) => {
                let mut path = self.file_module.clone();
                path.extend_from_slice(segments);
                Some(path)
            }
            name => {
                let imported = self.imports.get(name)?;
                let mut path = imported.clone();
                path.extend_from_slice(rest);
                // The `use` itself was already recorded; only a path that reaches into a
                // different (finer) unit is a new dependency.
                (unit_of(&path) != unit_of(imported)).then_some(path)
            }
        }
    }
}

/// Parses one use tree starting at `start`, adding its leaves to `leaves` with `prefix` in
/// front, and returns the index after it: `a::b`, `a::b as c`, `a::*`, `a::{tree, …}`,
/// `{tree, …}`, `a::{self, …}`, with an optional leading `::`.
fn parse_use_tree(
    lexemes: &[Lexeme],
    start: usize,
    mut prefix: Vec<String>,
    leaves: &mut Vec<UseLeaf>,
) -> usize {
    let token = |i: usize| lexemes.get(i).map(|lexeme| &lexeme.token);
    let mut i = start;
    loop {
        match token(i) {
            Some(Token::PathSep) => {
                // A leading `::` names an external crate; the marker makes it unresolvable.
                if prefix.is_empty() {
                    prefix.push("::".to_owned());
                }
                i += 1;
            }
            Some(Token::Ident(name)) => {
                let line = lexemes[i].line;
                prefix.push(name.clone());
                i += 1;
                if token(i) == Some(&Token::PathSep) {
                    i += 1;
                    continue;
                }
                let mut binding = Some(name.clone());
                if matches!(token(i), Some(Token::Ident(word)) if word == "as") {
                    binding = match token(i + 1) {
                        Some(Token::Ident(alias)) => Some(alias.clone()),
                        _ => None,
                    };
                    i += 2;
                }
                if name == "self" {
                    // `a::{self}` is `a` itself, and binds `a` unless renamed.
                    prefix.pop();
                    if binding.as_deref() == Some("self") {
                        binding = prefix.last().cloned();
                    }
                }
                leaves.push(UseLeaf {
                    segments: prefix,
                    line,
                    binding,
                });
                return i;
            }
            Some(Token::Punct('{')) => {
                i += 1;
                loop {
                    match token(i) {
                        Some(Token::Punct('}')) => return i + 1,
                        Some(Token::Punct(',')) => i += 1,
                        None => return i,
                        _ => {
                            let after = parse_use_tree(lexemes, i, prefix.clone(), leaves);
                            // Skip a token we do not understand rather than loop on it.
                            i = if after == i { i + 1 } else { after };
                        }
                    }
                }
            }
            Some(Token::Punct('*')) => {
                leaves.push(UseLeaf {
                    segments: prefix,
                    line: lexemes[i].line,
                    binding: None,
                });
                return i + 1;
            }
            _ => return i,
        }
    }
}

// ---------------------------------------------------------------------------------------
// The scan of src/ and the layer check
// ---------------------------------------------------------------------------------------

/// A reference from code in one unit to another unit.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
struct Edge {
    from: String,
    to: String,
    /// Relative to the crate root, such as `src/rules/docs.rs`.
    file: String,
    line: usize,
}

struct SourceScan {
    /// Every scanned file, relative to the crate root, with its unit.
    file_units: Vec<(String, String)>,
    edges: Vec<Edge>,
    /// References from one file to another: `from` and `to` are files (`src/sites/helm.rs`).
    /// A module's own file using the files of modules inside it (`sites/mod.rs` calling
    /// `helm::sites`, re-exporting `pub use helm::X`) is left out: that file declares those
    /// modules and is their front, so its children using its shared types is no loop.
    file_edges: Vec<Edge>,
}

/// The file that holds the item at an absolute path: the file of the longest prefix of the
/// path that is a module with a file of its own (`sites::path::pointer` is in
/// `src/sites/path.rs`; an inline `mod tests` is part of its file). `None` for the crate root.
fn file_of<'a>(files: &'a BTreeMap<Vec<String>, String>, path: &[String]) -> Option<&'a str> {
    (1..=path.len())
        .rev()
        .find_map(|len| files.get(&path[..len]))
        .map(String::as_str)
}

fn rust_files_under(dir: &Path, files: &mut Vec<PathBuf>) {
    let entries = std::fs::read_dir(dir).unwrap_or_else(|e| panic!("read {}: {e}", dir.display()));
    for entry in entries {
        let path = entry.unwrap().path();
        if path.is_dir() {
            rust_files_under(&path, files);
        } else if path.extension().is_some_and(|ext| ext == "rs") {
            files.push(path);
        }
    }
}

/// The files that the file `display` (the module `module`) uses, one edge per line and file,
/// without the files of modules inside `module` (see [`SourceScan::file_edges`]).
fn file_edges_of(
    module: &[String],
    display: &str,
    references: &FileReferences,
    module_files: &BTreeMap<Vec<String>, String>,
) -> BTreeSet<Edge> {
    let mut file_edges = BTreeSet::new();
    for reference in references.direct.iter().chain(&references.through_imports) {
        let inside_this_module = reference.path.len() > module.len()
            && reference.path[..module.len()] == module[..]
            && file_of(module_files, &reference.path[..=module.len()])
                .is_some_and(|child| child != display);
        match file_of(module_files, &reference.path) {
            Some(to) if to != display && !inside_this_module => {
                file_edges.insert(Edge {
                    from: display.to_owned(),
                    to: to.to_owned(),
                    file: display.to_owned(),
                    line: reference.line,
                });
            }
            _ => {}
        }
    }
    file_edges
}

fn scan_source_tree() -> SourceScan {
    let crate_root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let src = crate_root.join("src");
    let mut files = Vec::new();
    rust_files_under(&src, &mut files);
    files.sort();

    let display_of = |file: &Path| {
        file.strip_prefix(crate_root)
            .unwrap()
            .to_string_lossy()
            .replace('\\', "/")
    };
    // Every module that has a file, so a path can be mapped to the file it leads into.
    let module_files: BTreeMap<Vec<String>, String> = files
        .iter()
        .map(|file| {
            (
                module_path_of(file.strip_prefix(&src).unwrap()),
                display_of(file),
            )
        })
        .filter(|(module, _)| {
            !module.is_empty() && module[..] != [BINARY_ROOT.trim_end_matches(".rs")]
        })
        .collect();
    let mut scan = SourceScan {
        file_units: Vec::new(),
        edges: Vec::new(),
        file_edges: Vec::new(),
    };
    for file in files {
        let relative_to_src = file.strip_prefix(&src).unwrap();
        if relative_to_src == Path::new(BINARY_ROOT) {
            continue;
        }
        let module = module_path_of(relative_to_src);
        // The crate root only declares modules.
        let Some(from) = unit_of(&module) else {
            continue;
        };
        let display = display_of(&file);
        let source = std::fs::read_to_string(&file)
            .unwrap_or_else(|e| panic!("read {}: {e}", file.display()));
        let references = scan_references(&module, &source);
        scan.file_edges
            .extend(file_edges_of(&module, &display, &references, &module_files));
        let mut edges = BTreeSet::new();
        for reference in references.direct {
            match unit_of(&reference.path) {
                Some(to) if to != from => {
                    edges.insert(Edge {
                        from: from.clone(),
                        to,
                        file: display.clone(),
                        line: reference.line,
                    });
                }
                _ => {}
            }
        }
        scan.edges.extend(edges);
        scan.file_units.push((display, from));
    }
    // Report in reading order: by file, then line.
    scan.edges
        .sort_by(|a, b| (&a.file, a.line, &a.to).cmp(&(&b.file, b.line, &b.to)));
    scan.file_edges
        .sort_by(|a, b| (&a.file, a.line, &a.to).cmp(&(&b.file, b.line, &b.to)));
    scan
}

/// Groups of units that reach each other through edges (strongly connected components with
/// more than one unit), each sorted, found by mutual reachability: the graph is small.
fn cycles(edges: &[Edge]) -> Vec<BTreeSet<String>> {
    let mut successors: BTreeMap<&str, BTreeSet<&str>> = BTreeMap::new();
    for edge in edges {
        successors.entry(&edge.from).or_default().insert(&edge.to);
        successors.entry(&edge.to).or_default();
    }
    let reachable_from = |start: &str| {
        let mut seen = BTreeSet::new();
        let mut stack = vec![start];
        while let Some(unit) = stack.pop() {
            for &next in &successors[unit] {
                if seen.insert(next) {
                    stack.push(next);
                }
            }
        }
        seen
    };
    let reach: BTreeMap<&str, BTreeSet<&str>> = successors
        .keys()
        .map(|&unit| (unit, reachable_from(unit)))
        .collect();

    let mut components: Vec<BTreeSet<String>> = Vec::new();
    for &unit in reach.keys() {
        if components.iter().any(|component| component.contains(unit)) {
            continue;
        }
        let component: BTreeSet<String> = reach[unit]
            .iter()
            .filter(|&&other| other != unit && reach[other].contains(unit))
            .map(|&other| other.to_owned())
            .chain([unit.to_owned()])
            .collect();
        if component.len() > 1 {
            components.push(component);
        }
    }
    components
}

/// Checks the scan against [`LAYERS`]: returns the number of violations (a unit missing
/// from the table, a pair of units with an upward edge, a cycle) and a report for a reader
/// who has never seen this test.
fn check_layers(file_units: &[(String, String)], edges: &[Edge]) -> (usize, String) {
    let mut count = 0;
    let mut report = String::new();

    // Units missing from the table, with the first place each is seen.
    let mut unplaced: BTreeMap<&str, &str> = BTreeMap::new();
    for (file, unit) in file_units {
        unplaced.entry(unit).or_insert(file);
    }
    for edge in edges {
        unplaced.entry(&edge.to).or_insert(&edge.file);
    }
    unplaced.retain(|unit, _| layer_of(unit).is_none());
    if !unplaced.is_empty() {
        report.push_str(
            "Units that are not in the layer table. Add each one to LAYERS in tests/layers.rs \
             (and the copy in ARCHITECTURE.md), in the lowest layer whose units it uses:\n",
        );
        for (unit, file) in &unplaced {
            let _ = writeln!(report, "  {file}: `{unit}` has no layer");
        }
        report.push('\n');
        count += unplaced.len();
    }

    // Upward edges, grouped by pair of units.
    let mut upward: BTreeMap<(&str, &str), Vec<&Edge>> = BTreeMap::new();
    for edge in edges {
        if let (Some(from), Some(to)) = (layer_of(&edge.from), layer_of(&edge.to))
            && to > from
        {
            upward.entry((&edge.from, &edge.to)).or_default().push(edge);
        }
    }
    if !upward.is_empty() {
        report.push_str(
            "Upward dependencies: code in a lower layer uses a higher layer, so the lower one \
             cannot be built, tested or understood without the higher one. Fix each by moving \
             the code it needs down (into the lower unit, or a layer both can use), or by \
             having the caller pass the value in (a parameter, a closure or a trait the lower \
             unit defines).\n",
        );
        for ((from, to), pair_edges) in &upward {
            let (from_layer, to_layer) = (layer_of(from).unwrap(), layer_of(to).unwrap());
            let _ = writeln!(
                report,
                "  {from} (layer {from_layer}, {}) -> {to} (layer {to_layer}, {}):",
                layer_name(from_layer),
                layer_name(to_layer)
            );
            for edge in pair_edges {
                let _ = writeln!(
                    report,
                    "    {}:{}: {from} -> {to} (layer {from_layer} -> {to_layer}: upward)",
                    edge.file, edge.line
                );
            }
        }
        report.push('\n');
        count += upward.len();
    }

    // Cycles, at any layer.
    let cycles = cycles(edges);
    if !cycles.is_empty() {
        report.push_str(
            "Cycles: these units use each other in a loop, so none of them can be understood \
             or changed on its own, and a loop inside one layer hides which unit is the lower \
             one. Break each loop at one of the edges listed: move that code into the unit \
             that uses it or into a lower layer, or pass the value in.\n",
        );
        for members in &cycles {
            let names: Vec<String> = members
                .iter()
                .map(|unit| match layer_of(unit) {
                    Some(layer) => format!("{unit} (layer {layer})"),
                    None => format!("{unit} (no layer)"),
                })
                .collect();
            let _ = writeln!(report, "  cycle among {}:", names.join(", "));
            for edge in edges
                .iter()
                .filter(|edge| members.contains(&edge.from) && members.contains(&edge.to))
            {
                // Point at the edges to cut: downward ones are fine once the loop is gone.
                let layers = match (layer_of(&edge.from), layer_of(&edge.to)) {
                    (Some(from), Some(to)) if to > from => {
                        format!("layer {from} -> {to}: in the cycle, upward, cut here")
                    }
                    (Some(from), Some(to)) if to == from => {
                        format!("layer {from} -> {to}: in the cycle, same layer")
                    }
                    (Some(from), Some(to)) => format!("layer {from} -> {to}: in the cycle"),
                    _ => "no layer: in the cycle".to_owned(),
                };
                let _ = writeln!(
                    report,
                    "    {}:{}: {} -> {} ({layers})",
                    edge.file, edge.line, edge.from, edge.to
                );
            }
        }
        report.push('\n');
        count += cycles.len();
    }

    (count, report)
}

/// Checks the file graph: returns the number of file cycles (groups of files that use each
/// other in a loop, inside a unit or across units) and a report naming each edge of each
/// loop with its file and line.
fn check_file_cycles(file_edges: &[Edge]) -> (usize, String) {
    let cycles = cycles(file_edges);
    let mut report = String::new();
    if cycles.is_empty() {
        return (0, report);
    }
    report.push_str(
        "File cycles: these files use each other in a loop (a file A that uses B while B uses \
         A, directly or through other files), so none of them can be read or moved on its \
         own. Break each loop at one of the lines listed: move the items both sides need \
         into a file of their own that uses neither, or into the file that uses them. (A \
         module's own file, such as `sites/mod.rs`, may use the files of the modules it \
         declares while they use it: it is their front.)\n",
    );
    for members in &cycles {
        let names: Vec<&str> = members.iter().map(String::as_str).collect();
        let _ = writeln!(report, "  file cycle among {}:", names.join(", "));
        // One entry per pair of files, with the first lines (enough to find the use).
        let mut pairs: BTreeMap<(&str, &str), Vec<usize>> = BTreeMap::new();
        for edge in file_edges
            .iter()
            .filter(|edge| members.contains(&edge.from) && members.contains(&edge.to))
        {
            pairs
                .entry((&edge.from, &edge.to))
                .or_default()
                .push(edge.line);
        }
        for ((from, to), lines) in &pairs {
            let shown: Vec<String> = lines.iter().take(5).map(usize::to_string).collect();
            let more = match lines.len() {
                n if n > 5 => format!(" and {} more", n - 5),
                _ => String::new(),
            };
            let _ = writeln!(
                report,
                "    {from}:{}: uses {to} (line{} {}{more})",
                lines[0],
                if lines.len() == 1 { "" } else { "s" },
                shown.join(", ")
            );
        }
    }
    report.push('\n');
    (cycles.len(), report)
}

// ---------------------------------------------------------------------------------------
// The check on src/
// ---------------------------------------------------------------------------------------

#[test]
fn src_follows_the_layer_table() {
    let scan = scan_source_tree();
    let (count, report) = check_layers(&scan.file_units, &scan.edges);
    assert!(
        count == 0,
        "\n{report}{count} layer violation(s). The layer table is LAYERS at the top of \
         tests/layers.rs; a unit may use units in lower layers, and units in its own layer \
         only without a cycle.\n"
    );
}

#[test]
fn src_has_no_file_cycles() {
    let scan = scan_source_tree();
    let (count, report) = check_file_cycles(&scan.file_edges);
    assert!(
        count == 0,
        "\n{report}{count} file cycle(s). Files may use each other in one direction only, \
         even inside one unit.\n"
    );
}

#[test]
fn the_scan_of_src_finds_the_crate_edges() {
    // If the extractor broke and found nothing, the layer check would pass vacuously.
    let scan = scan_source_tree();
    assert!(
        scan.file_units.len() > 30,
        "only {} files scanned",
        scan.file_units.len()
    );
    assert!(
        scan.edges.len() > 30,
        "only {} references between units found in src/: the extractor is broken",
        scan.edges.len()
    );
    assert!(
        scan.file_edges.len() > scan.edges.len(),
        "only {} references between files found in src/ (fewer than the {} between units): \
         the file graph is broken",
        scan.file_edges.len(),
        scan.edges.len()
    );
    let units: BTreeSet<&str> = scan
        .file_units
        .iter()
        .map(|(_, unit)| unit.as_str())
        .collect();
    for unit in [
        "engine",
        "rules",
        "policy",
        "releases::watcher",
        "releases::metrics",
    ] {
        assert!(units.contains(unit), "no file maps to the unit `{unit}`");
    }
}

#[test]
fn the_layer_table_is_consistent() {
    let mut seen = BTreeSet::new();
    for (_, units) in LAYERS {
        for unit in *units {
            assert!(seen.insert(*unit), "`{unit}` is in LAYERS twice");
            assert!(
                !unit.contains("::") || FINER_UNITS.contains(unit),
                "`{unit}` is in LAYERS but not in FINER_UNITS, so no file maps to it"
            );
        }
    }
    for unit in FINER_UNITS {
        assert!(
            layer_of(unit).is_some(),
            "FINER_UNITS has `{unit}` but LAYERS does not"
        );
    }
}

// ---------------------------------------------------------------------------------------
// Tests of the extractor and the checker themselves
// ---------------------------------------------------------------------------------------

fn module(path: &str) -> Vec<String> {
    path.split("::").map(str::to_owned).collect()
}

/// `(line, "a::b::c")` for each reference, for short assertions.
fn references(file_module: &str, source: &str) -> Vec<(usize, String)> {
    crate_references(&module(file_module), source)
        .into_iter()
        .map(|reference| (reference.line, reference.path.join("::")))
        .collect()
}

#[test]
fn simple_and_public_uses_are_references() {
    let source = "use crate::budget::Cancel;\n\
                  pub use crate::sites::SiteKind;\n\
                  pub(crate) use crate::yaml::Node;\n\
                  use std::fmt;\n";
    assert_eq!(
        references("engine", source),
        [
            (1, "budget::Cancel".to_owned()),
            (2, "sites::SiteKind".to_owned()),
            (3, "yaml::Node".to_owned()),
        ]
    );
}

#[test]
fn grouped_multi_line_uses_give_one_reference_per_leaf_on_its_line() {
    let source = "use crate::{\n\
                  \x20   a::b,\n\
                  \x20   c,\n\
                  \x20   d::{e, f::{self, g as h}},\n\
                  \x20   releases::{self, watcher::*},\n\
                  };\n";
    assert_eq!(
        references("engine", source),
        [
            (2, "a::b".to_owned()),
            (3, "c".to_owned()),
            (4, "d::e".to_owned()),
            (4, "d::f".to_owned()),
            (4, "d::f::g".to_owned()),
            (5, "releases".to_owned()),
            (5, "releases::watcher".to_owned()),
        ]
    );
}

#[test]
fn inline_paths_in_code_types_and_attributes_are_references() {
    let source = "fn f(x: crate::yaml::Limit) -> Box<crate::check::Args> {\n\
                  \x20   let n = crate::sites::helm::object_name(&x);\n\
                  \x20   std::mem::drop(n); Vec::<crate::rules::Id>::new()\n\
                  }\n\
                  #[arg(value_parser = crate::cli::parse_duration)]\n\
                  pub(crate) struct S; pub(in crate::engine) struct T;\n\
                  macro_rules! m { () => { $crate::budget::Cancel::new() } }\n";
    assert_eq!(
        references("guard", source),
        [
            (1, "yaml::Limit".to_owned()),
            (1, "check::Args".to_owned()),
            (2, "sites::helm::object_name".to_owned()),
            (3, "rules::Id".to_owned()),
            (5, "cli::parse_duration".to_owned()),
            (6, "engine".to_owned()),
            (7, "budget::Cancel::new".to_owned()),
        ]
    );
}

#[test]
fn comments_are_not_references() {
    let source = "// use crate::a;\n\
                  /// See [`crate::b::f`].\n\
                  //! Uses crate::c.\n\
                  /* crate::d /* nested crate::e */ still comment crate::f */\n\
                  /** crate::g */\n\
                  use crate::real; // crate::h\n";
    assert_eq!(references("engine", source), [(6, "real".to_owned())]);
}

#[test]
fn string_and_char_literals_are_not_references() {
    let source = r####"
const A: &str = "crate::a \" crate::b";
const B: &str = r"crate::c";
const C: &str = r#"crate::d "still" crate::e"#;
const D: &[u8] = br##"crate::f "# crate::g"##;
const E: &[u8] = b"crate::h";
const F: char = '"'; const G: u8 = b'"'; const H: char = '\'';
fn f<'a>(x: &'a str) -> &'static str { crate::after::literals(x) }
const I: &str = "multi
line crate::i";
use crate::last;
"####;
    assert_eq!(
        references("engine", source),
        [(8, "after::literals".to_owned()), (11, "last".to_owned())]
    );
}

#[test]
fn super_and_self_resolve_against_the_module_including_inline_ones() {
    let source = "use super::{Snapshot, VersionState};\n\
                  fn f() { self::g(); }\n\
                  #[cfg(test)]\n\
                  mod tests {\n\
                  \x20   use super::*;\n\
                  \x20   fn t() { super::super::catalog::load(); }\n\
                  }\n\
                  fn after() { super::Snapshot::empty(); }\n";
    assert_eq!(
        references("releases::watcher", source),
        [
            (1, "releases::Snapshot".to_owned()),
            (1, "releases::VersionState".to_owned()),
            (2, "releases::watcher::g".to_owned()),
            (5, "releases::watcher".to_owned()),
            (6, "releases::catalog::load".to_owned()),
            (8, "releases::Snapshot::empty".to_owned()),
        ]
    );
}

#[test]
fn declared_child_modules_and_crate_imports_reach_finer_units() {
    // In releases/mod.rs, `metrics::X` is the child module; in server, after
    // `use crate::releases`, `releases::watcher::run` reaches the watcher unit, while
    // `releases::Snapshot` is the same unit as the `use` and adds nothing.
    let releases_mod = "pub mod metrics;\npub use metrics::ReleaseMetrics;\n";
    assert_eq!(
        references("releases", releases_mod),
        [(2, "releases::metrics::ReleaseMetrics".to_owned())]
    );
    let server = "use crate::releases;\n\
                  use crate::yaml::edit::{self as yamledit};\n\
                  fn f() { releases::watcher::run(); releases::Snapshot::empty(); yamledit::apply(); }\n\
                  fn g() { kube::runtime::watcher::watcher(); x.metrics::<u8>(); }\n";
    assert_eq!(
        references("server", server),
        [
            (1, "releases".to_owned()),
            (2, "yaml::edit".to_owned()),
            (3, "releases::watcher::run".to_owned()),
        ]
    );
}

#[test]
fn files_map_to_units() {
    let unit = |path: &str| unit_of(&module_path_of(Path::new(path)));
    assert_eq!(unit("engine/mod.rs").as_deref(), Some("engine"));
    assert_eq!(unit("engine/x.rs").as_deref(), Some("engine"));
    assert_eq!(unit("cli.rs").as_deref(), Some("cli"));
    assert_eq!(unit("guard/metrics.rs").as_deref(), Some("guard"));
    assert_eq!(unit("releases/mod.rs").as_deref(), Some("releases"));
    assert_eq!(unit("releases/catalog.rs").as_deref(), Some("releases"));
    assert_eq!(
        unit("releases/watcher.rs").as_deref(),
        Some("releases::watcher")
    );
    assert_eq!(
        unit("releases/metrics.rs").as_deref(),
        Some("releases::metrics")
    );
    assert_eq!(unit("lib.rs"), None);
}

fn edge(from: &str, to: &str, line: usize) -> Edge {
    Edge {
        from: from.to_owned(),
        to: to.to_owned(),
        file: format!("src/{}.rs", from.replace("::", "/")),
        line,
    }
}

#[test]
fn the_checker_allows_downward_and_acyclic_same_layer_edges() {
    let files = [("src/engine/mod.rs".to_owned(), "engine".to_owned())];
    let edges = [
        edge("engine", "rules", 1),
        edge("server", "cli", 2),
        edge("guard", "metrics", 3),
    ];
    assert_eq!(check_layers(&files, &edges), (0, String::new()));
}

#[test]
fn the_checker_rejects_upward_edges_cycles_and_unplaced_units() {
    let files = [("src/newthing.rs".to_owned(), "newthing".to_owned())];
    let edges = [
        edge("rules", "engine", 12),
        edge("engine", "rules", 5),
        edge("guard", "check", 7),
        edge("check", "guard", 8),
    ];
    let (count, report) = check_layers(&files, &edges);
    // One unplaced unit, one upward pair, two cycles.
    assert_eq!(count, 4, "{report}");
    assert!(
        report.contains("src/newthing.rs: `newthing` has no layer"),
        "{report}"
    );
    assert!(
        report.contains("src/rules.rs:12: rules -> engine (layer 2 -> 4: upward)"),
        "{report}"
    );
    assert!(
        report.contains("cycle among engine (layer 4), rules (layer 2)"),
        "{report}"
    );
    assert!(
        report.contains(
            "src/rules.rs:12: rules -> engine (layer 2 -> 4: in the cycle, upward, cut here)"
        ),
        "{report}"
    );
    assert!(
        report.contains("src/engine.rs:5: engine -> rules (layer 4 -> 2: in the cycle)"),
        "{report}"
    );
    assert!(
        report.contains("src/check.rs:8: check -> guard (layer 5 -> 5: in the cycle, same layer)"),
        "{report}"
    );
}

/// The file graph of a few files, as the scan builds it from their source.
fn file_graph(files: &[(&str, &str)]) -> Vec<Edge> {
    let module_files: BTreeMap<Vec<String>, String> = files
        .iter()
        .map(|(path, _)| (module_path_of(Path::new(path)), format!("src/{path}")))
        .collect();
    let mut edges = Vec::new();
    for (path, source) in files {
        let module = module_path_of(Path::new(path));
        let references = scan_references(&module, source);
        edges.extend(file_edges_of(
            &module,
            &format!("src/{path}"),
            &references,
            &module_files,
        ));
    }
    edges
}

#[test]
fn file_edges_come_from_uses_bodies_and_imported_names() {
    let edges = file_graph(&[
        (
            "sites/mod.rs",
            "pub mod helm;\npub mod values;\npub use helm::Carrier;\n",
        ),
        (
            "sites/helm.rs",
            "use super::values;\nfn f() { values::read(); super::Anchor::Object; }\n",
        ),
        (
            "sites/values.rs",
            "fn g() {\n    let p = super::helm::pointer(&[]);\n}\n",
        ),
        (
            "sites/object_data.rs",
            "use crate::sites::helm::{self as h};\nfn k() { h::Seg; }\n",
        ),
    ]);
    let mut found: Vec<(&str, usize, &str)> = edges
        .iter()
        .map(|e| (e.file.as_str(), e.line, e.to.as_str()))
        .collect();
    found.sort();
    assert_eq!(
        found,
        [
            // sites/mod.rs uses its own children: left out.
            ("src/sites/helm.rs", 1, "src/sites/values.rs"),
            ("src/sites/helm.rs", 2, "src/sites/mod.rs"),
            ("src/sites/helm.rs", 2, "src/sites/values.rs"),
            ("src/sites/object_data.rs", 1, "src/sites/helm.rs"),
            ("src/sites/object_data.rs", 2, "src/sites/helm.rs"),
            ("src/sites/values.rs", 2, "src/sites/helm.rs"),
        ]
    );
}

#[test]
fn the_file_checker_names_each_loop_with_its_files_and_lines() {
    // helm.rs and values.rs use each other (one of them from a function body); mod.rs and
    // its children do not form a loop; a chain without a way back is fine.
    let edges = file_graph(&[
        (
            "sites/mod.rs",
            "pub mod helm;\npub mod values;\npub use helm::X;\n",
        ),
        (
            "sites/helm.rs",
            "use super::values::ValuesAt;\nuse super::Anchor;\n",
        ),
        (
            "sites/values.rs",
            "use super::Anchor;\nfn g() {\n    super::helm::pointer(&[]);\n}\n",
        ),
        (
            "check/evaluate.rs",
            "use crate::sites::helm;\nuse super::report::Item;\n",
        ),
        ("check/report.rs", "use crate::sites::values;\n"),
    ]);
    let (count, report) = check_file_cycles(&edges);
    assert_eq!(count, 1, "{report}");
    assert!(
        report.contains("file cycle among src/sites/helm.rs, src/sites/values.rs:"),
        "{report}"
    );
    assert!(
        report.contains("src/sites/helm.rs:1: uses src/sites/values.rs (line 1)"),
        "{report}"
    );
    assert!(
        report.contains("src/sites/values.rs:3: uses src/sites/helm.rs (line 3)"),
        "{report}"
    );
    assert!(!report.contains("src/sites/mod.rs"), "{report}");
    assert!(!report.contains("check/"), "{report}");

    // One more line closes a loop through three files.
    let edges = file_graph(&[
        ("check/evaluate.rs", "use super::report::Item;\n"),
        ("check/report.rs", "use super::mask::masked_diff;\n"),
        ("check/mask.rs", "fn f() { super::evaluate::locate(); }\n"),
    ]);
    let (count, report) = check_file_cycles(&edges);
    assert_eq!(count, 1, "{report}");
    assert!(
        report.contains(
            "file cycle among src/check/evaluate.rs, src/check/mask.rs, src/check/report.rs:"
        ),
        "{report}"
    );
    assert!(
        report.contains("src/check/mask.rs:1: uses src/check/evaluate.rs (line 1)"),
        "{report}"
    );
}
