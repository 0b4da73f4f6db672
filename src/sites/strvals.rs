//! Helm's `--set` syntax (`strvals`), ported so that values set on top of the chart's values
//! (RKE2/k3s HelmChart `spec.set`, Argo CD `helm.parameters`) are merged as Helm merges them.
//!
//! Port of `pkg/strvals/parser.go` of github.com/helm/helm at commit
//! e9b85e4de16ad45805843fb121748018cf89094b (`ParseInto` / `ParseIntoString`): dots separate
//! keys, `[N]` indexes lists (missing elements are null, at most index 65536, Helm's
//! `MaxIndex`), a backslash makes the next character literal (`a\.b` is one key, `x\,y` one
//! value), `{a,b}` is a list value, `,` separates assignments, at most 30 nested keys (Helm's
//! `MaxNestedNameLevel`, counted at each `.` that follows a key). `--set` types values
//! (`true`/`false`/`null` any case, decimal integers without a leading zero), `--set-string`
//! does not. Where Helm fails (a key without a value, an index that is not a number, a path
//! through a value of another type), this fails too: Helm would not render the chart.
//!
//! Helm bounds neither a chain of list indexes (`a[0][0]…`) nor `.` after an index
//! (`a[0].b[0].c…`): its parser recurses once per step on Go's growable stack. This port
//! recurses too, so it stops a path at [`MAX_SET_PATH_DEPTH`] segments (stackgate's limit, not
//! Helm's), and charges every key and list element the entries of one values document add,
//! `{a,b,…}` list values included, to one [`SetBudget`] of [`MAX_SET_NODES`], the cap of a
//! YAML values string. Maps and lists are changed in place, never copied, so applying N
//! entries costs time linear in their text.
//!
//! Besides the merged values, the parse records the path of each value it sets, so findings
//! about a rendered line can point at the entry that set it.

use serde_json::{Map, Value};

use crate::budget::Cancel;
use crate::yaml::Seg;

/// Largest list index Helm accepts (`strvals.MaxIndex`).
pub const MAX_INDEX: i64 = 65536;
/// Most nested keys in one path Helm accepts (`strvals.MaxNestedNameLevel`).
pub const MAX_NESTED_NAME_LEVEL: usize = 30;

/// Why Helm cannot read a `--set` entry. Messages name the kind of problem only, never the
/// entry's text (a value may be a secret).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum StrvalsError {
    /// A key with no `=value` (`a.b`, `a,b=1`).
    #[error("a key has no value")]
    NoValue,
    /// `[...]` that is not a decimal integer, or a negative or too large index.
    #[error("a list index is not a number from 0 to {MAX_INDEX}")]
    BadIndex,
    /// Characters between `]` and the next `.`, `[` or `=`.
    #[error("unexpected characters after a list index")]
    AfterIndex,
    /// A `{...}` list value without its closing brace.
    #[error("a list value must end with '}}'")]
    UnclosedList,
    /// The path goes through a value of another type (a key into a string, an index into a
    /// map), which Helm reports as "unable to parse key".
    #[error("the path goes through a value that is not a map or list")]
    WrongType,
    /// More than [`MAX_NESTED_NAME_LEVEL`] nested keys.
    #[error("more than {MAX_NESTED_NAME_LEVEL} nested keys")]
    TooDeep,
    /// Past one of stackgate's limits for `--set` entries (Helm would read them): a path
    /// longer than [`MAX_SET_PATH_DEPTH`], or entries that add more than [`MAX_SET_NODES`]
    /// keys and list elements to one values document.
    #[error("{0}")]
    OverLimit(SetLimit),
    /// The evaluation's cancel flag fired (its request was answered): nothing more is read.
    #[error("the evaluation ran out of time")]
    Cancelled,
}

/// Which of stackgate's limits for `--set` entries an entry reached.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum SetLimit {
    /// A path of more than [`MAX_SET_PATH_DEPTH`] keys and list indexes.
    #[error("a path of more than {MAX_SET_PATH_DEPTH} keys and list indexes")]
    Depth,
    /// More than [`MAX_SET_NODES`] keys and list elements added to one values document.
    #[error("more than {MAX_SET_NODES} keys and list elements")]
    Nodes,
}

impl SetLimit {
    /// The YAML reader's cap of the same kind (the metric label it is counted under).
    pub fn yaml_limit(self) -> crate::yaml::Limit {
        match self {
            SetLimit::Depth => crate::yaml::Limit::Depth,
            SetLimit::Nodes => crate::yaml::Limit::Nodes,
        }
    }

    /// The limit's number.
    pub fn limit(self) -> usize {
        match self {
            SetLimit::Depth => MAX_SET_PATH_DEPTH,
            SetLimit::Nodes => MAX_SET_NODES,
        }
    }
}

/// Most keys and list elements (a list's padding and the elements of `{a,b,…}` values
/// included) the `--set` entries applied to one values document may add: the YAML reader's
/// cap for a values string ([`crate::yaml::MAX_VALUES_NODES`]). Without it, thousands of
/// `k[65536]=1` entries in a 400 KB `spec.set` would build billions of nulls, and a 3 MiB
/// `{,,,…}` value three million strings.
pub const MAX_SET_NODES: usize = crate::yaml::MAX_VALUES_NODES;

/// Most keys and list indexes in the path of one `--set` assignment. Helm allows 30 nested
/// keys but any number of list indexes (`a[0][0]…`) and of keys after an index
/// (`a[0].b[0].c…`); the parser recurses once per segment, so stackgate stops there. Real
/// values nest a few levels; 128 is also far below the YAML reader's 512 levels.
pub const MAX_SET_PATH_DEPTH: usize = 128;

/// How often (in characters read) the parser looks at the cancel flag.
const CANCEL_CHECK_EVERY: usize = 4096;

/// What is left of [`MAX_SET_NODES`] for the entries applied to one values document, and the
/// evaluation's cancel flag.
#[derive(Debug, Clone)]
pub struct SetBudget {
    nodes: usize,
    cancel: Cancel,
}

impl Default for SetBudget {
    fn default() -> Self {
        SetBudget::new(Cancel::never())
    }
}

impl SetBudget {
    /// A full budget whose parses stop when `cancel` fires.
    pub fn new(cancel: Cancel) -> Self {
        SetBudget {
            nodes: MAX_SET_NODES,
            cancel,
        }
    }

    /// Charges `count` new keys or list elements.
    fn charge(&mut self, count: usize) -> Result<(), StrvalsError> {
        self.nodes = self
            .nodes
            .checked_sub(count)
            .ok_or(StrvalsError::OverLimit(SetLimit::Nodes))?;
        Ok(())
    }

    /// `Err(Cancelled)` once the cancel flag has fired.
    pub fn check(&self) -> Result<(), StrvalsError> {
        self.cancel.check().map_err(|_| StrvalsError::Cancelled)
    }
}

/// How values are typed: `--set` or `--set-string`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Typing {
    /// `--set`: `true`, `false`, `null`, integers typed.
    Typed,
    /// `--set-string`: every value a string.
    Strings,
}

/// One value an assignment set: its path in the values.
#[derive(Debug, Clone, PartialEq)]
pub struct Assigned {
    /// Keys and list indexes from the values root.
    pub path: Vec<Seg>,
}

/// Why the parse stopped: the end of the text (Helm's `io.EOF`, not an error), or an error.
enum Halt {
    End,
    Error(StrvalsError),
}

impl From<StrvalsError> for Halt {
    fn from(e: StrvalsError) -> Self {
        Halt::Error(e)
    }
}

/// Applies the `--set` line `line` to `dest` as Helm's `strvals.ParseInto` (or
/// `ParseIntoString`) does, and returns every value it set. On error `dest` may hold the
/// assignments before the failing one, as in Helm (which then stops).
pub fn parse_into(
    line: &str,
    dest: &mut Map<String, Value>,
    typing: Typing,
) -> Result<Vec<Assigned>, StrvalsError> {
    parse_into_within(line, dest, typing, &mut SetBudget::default())
}

/// [`parse_into`], charging the keys and list elements it adds to `budget` (shared by the
/// entries applied to one values document) and stopping when its cancel flag fires.
pub fn parse_into_within(
    line: &str,
    dest: &mut Map<String, Value>,
    typing: Typing,
    budget: &mut SetBudget,
) -> Result<Vec<Assigned>, StrvalsError> {
    budget.check()?;
    let mut parser = Parser {
        chars: line.chars().collect(),
        pos: 0,
        typing,
        assigned: Vec::new(),
        budget,
    };
    let result = loop {
        match parser.key(dest, 0, &mut Vec::new()) {
            Ok(()) => continue,
            Err(Halt::End) => break Ok(parser.assigned),
            Err(Halt::Error(e)) => break Err(e),
        }
    };
    // A cancelled read stops as if the text ended: what it returns is not Helm's answer.
    budget.check()?;
    result
}

/// `value` with each comma that is not already escaped escaped, as RKE2/k3s helm-controller
/// does for a `--set-string` value (`escapeComma`: a comma after an even number of
/// backslashes gets one more).
pub fn escape_commas_helm_controller(value: &str) -> String {
    let mut out = String::with_capacity(value.len());
    let mut backslashes = 0usize;
    for c in value.chars() {
        if c == ',' && backslashes.is_multiple_of(2) {
            out.push('\\');
        }
        backslashes = if c == '\\' { backslashes + 1 } else { 0 };
        out.push(c);
    }
    out
}

/// `value` as Argo CD passes a `helm.parameters` value to Helm (`cleanSetParameters`): as is
/// when it is a `{...}` list, else each comma not right after a backslash escaped.
pub fn escape_commas_argo(value: &str) -> String {
    if value.starts_with('{') && value.ends_with('}') {
        return value.to_owned();
    }
    let mut out = String::with_capacity(value.len());
    let mut previous = None;
    for c in value.chars() {
        if c == ',' && previous != Some('\\') {
            out.push('\\');
        }
        out.push(c);
        previous = Some(c);
    }
    out
}

struct Parser<'b> {
    chars: Vec<char>,
    pos: usize,
    typing: Typing,
    assigned: Vec<Assigned>,
    budget: &'b mut SetBudget,
}

impl Parser<'_> {
    fn next(&mut self) -> Option<char> {
        let c = self.chars.get(self.pos).copied();
        if c.is_some() {
            self.pos += 1;
        }
        c
    }

    /// Err past [`MAX_SET_PATH_DEPTH`] segments, before `path` grows by one.
    fn deeper(path: &[Seg]) -> Result<(), StrvalsError> {
        if path.len() >= MAX_SET_PATH_DEPTH {
            return Err(StrvalsError::OverLimit(SetLimit::Depth));
        }
        Ok(())
    }

    /// Sets `key` in `data` (Helm's `set`), charging a new key to the budget.
    fn set(&mut self, data: &mut Map<String, Value>, key: &str, value: Value) -> Result<(), Halt> {
        if key.is_empty() {
            return Ok(());
        }
        if !data.contains_key(key) {
            self.budget.charge(1)?;
        }
        data.insert(key.to_owned(), value);
        Ok(())
    }

    /// Helm's `runesUntil`: the characters up to one of `stop` (backslash escapes), and the
    /// stop character, or None at the end of the text.
    fn until(&mut self, stop: &[char]) -> (String, Option<char>) {
        let mut out = String::new();
        loop {
            if self.pos.is_multiple_of(CANCEL_CHECK_EVERY) && self.budget.cancel.is_cancelled() {
                // Read as the end of the text; the caller's next check reports it.
                self.pos = self.chars.len();
                return (out, None);
            }
            match self.next() {
                None => return (out, None),
                Some(c) if stop.contains(&c) => return (out, Some(c)),
                Some('\\') => match self.next() {
                    Some(n) => out.push(n),
                    None => return (out, None),
                },
                Some(c) => out.push(c),
            }
        }
    }

    fn typed(&self, text: String) -> Value {
        match self.typing {
            Typing::Strings => Value::String(text),
            Typing::Typed => set_typed(&text),
        }
    }

    fn record(&mut self, path: &[Seg]) {
        // Helm sets nothing for an empty key.
        if matches!(path.last(), Some(Seg::Key(k)) if k.is_empty()) {
            return;
        }
        self.assigned.push(Assigned {
            path: path.to_vec(),
        });
    }

    /// Helm's `parser.key`.
    fn key(
        &mut self,
        data: &mut Map<String, Value>,
        level: usize,
        path: &mut Vec<Seg>,
    ) -> Result<(), Halt> {
        let (k, last) = self.until(&['=', '[', ',', '.']);
        match last {
            None if k.is_empty() => Err(Halt::End),
            None => Err(StrvalsError::NoValue.into()),
            Some('[') => {
                let index = self.index()?;
                // Changed in place (Helm's maps and slices are references): taken out of the
                // map and put back, never copied.
                let (list, existed) = match data.get_mut(&k) {
                    None => (Vec::new(), false),
                    Some(Value::Array(list)) => (std::mem::take(list), true),
                    Some(_) => return Err(StrvalsError::WrongType.into()),
                };
                Self::deeper(path)?;
                path.push(Seg::key(&k));
                let (list, result) = self.list_item(list, index, level, path);
                path.pop();
                match (existed, data.get_mut(&k)) {
                    (true, Some(slot)) => *slot = Value::Array(list),
                    _ => self.set(data, &k, Value::Array(list))?,
                }
                result
            }
            Some('=') => {
                Self::deeper(path)?;
                path.push(Seg::key(&k));
                let result = match self.value_list() {
                    Ok(list) => {
                        self.record(path);
                        self.set(data, &k, Value::Array(list))
                    }
                    Err(ListHalt::End) => {
                        self.record(path);
                        self.set(data, &k, Value::String(String::new()))
                            .and(Err(Halt::End))
                    }
                    Err(ListHalt::NotList) => {
                        let (text, _) = self.until(&[',']);
                        let value = self.typed(text);
                        self.record(path);
                        // Helm returns no error here even at the end of the text: the next
                        // key finds the end.
                        self.set(data, &k, value)
                    }
                    Err(ListHalt::Error(e)) => Err(e.into()),
                };
                path.pop();
                result
            }
            Some(',') => Err(StrvalsError::NoValue.into()),
            Some(_) => {
                // '.'
                let level = level + 1;
                if level > MAX_NESTED_NAME_LEVEL {
                    return Err(StrvalsError::TooDeep.into());
                }
                Self::deeper(path)?;
                let (mut inner, existed) = match data.get_mut(&k) {
                    None => (Map::new(), false),
                    Some(Value::Object(m)) => (std::mem::take(m), true),
                    Some(_) => return Err(StrvalsError::WrongType.into()),
                };
                path.push(Seg::key(&k));
                let result = self.key(&mut inner, level, path);
                path.pop();
                let empty = inner.is_empty();
                match (existed, data.get_mut(&k)) {
                    (true, Some(slot)) => *slot = Value::Object(inner),
                    _ if !empty => self.set(data, &k, Value::Object(inner))?,
                    _ => {}
                }
                if result.is_ok() && empty {
                    return Err(StrvalsError::NoValue.into());
                }
                result
            }
        }
    }

    /// Helm's `keyIndex`: the number up to `]` (the end of the text ends the parse, as
    /// Helm's wrapped `io.EOF` does).
    fn index(&mut self) -> Result<i64, Halt> {
        let (text, last) = self.until(&[']']);
        if last.is_none() {
            return Err(Halt::End);
        }
        go_atoi(&text).ok_or(Halt::Error(StrvalsError::BadIndex))
    }

    /// Helm's `listItem`: what follows `[index]`.
    fn list_item(
        &mut self,
        mut list: Vec<Value>,
        index: i64,
        level: usize,
        path: &mut Vec<Seg>,
    ) -> (Vec<Value>, Result<(), Halt>) {
        if index < 0 {
            return (list, Err(StrvalsError::BadIndex.into()));
        }
        if let Err(e) = Self::deeper(path) {
            return (list, Err(e.into()));
        }
        let (k, last) = self.until(&['[', '.', '=']);
        if !k.is_empty() {
            return (list, Err(StrvalsError::AfterIndex.into()));
        }
        let slot = usize::try_from(index).unwrap_or(usize::MAX);
        path.push(Seg::Index(slot));
        let result = match last {
            None => Err(Halt::End),
            Some('=') => {
                let value = match self.value_list() {
                    Ok(l) => Ok(Value::Array(l)),
                    Err(ListHalt::End) => Ok(Value::String(String::new())),
                    Err(ListHalt::NotList) => {
                        let (text, _) = self.until(&[',']);
                        Ok(self.typed(text))
                    }
                    Err(ListHalt::Error(e)) => Err(Halt::Error(e)),
                };
                match value {
                    Ok(value) => {
                        self.record(path);
                        set_index(&mut list, index, value, self.budget).map_err(Halt::Error)
                    }
                    Err(e) => Err(e),
                }
            }
            Some('[') => match self.index() {
                Err(e) => Err(e),
                Ok(next) => {
                    let current = match list.get_mut(slot) {
                        None | Some(Value::Null) => Ok(Vec::new()),
                        Some(Value::Array(l)) => Ok(std::mem::take(l)),
                        Some(_) => Err(StrvalsError::WrongType),
                    };
                    match current {
                        Err(e) => Err(e.into()),
                        Ok(current) => match self.list_item(current, next, level, path) {
                            (inner, Ok(())) => {
                                set_index(&mut list, index, Value::Array(inner), self.budget)
                                    .map_err(Halt::Error)
                            }
                            (inner, Err(e)) => {
                                // What was taken out goes back (Helm changes it in place).
                                if let Some(Value::Array(taken)) = list.get_mut(slot) {
                                    *taken = inner;
                                }
                                Err(e)
                            }
                        },
                    }
                }
            },
            Some(_) => {
                // '.': a map in the list.
                let (mut inner, existing) = match list.get_mut(slot) {
                    Some(Value::Object(m)) => (std::mem::take(m), true),
                    _ => (Map::new(), false),
                };
                match self.key(&mut inner, level, path) {
                    Ok(()) if existing => {
                        list[slot] = Value::Object(inner);
                        Ok(())
                    }
                    Ok(()) => set_index(&mut list, index, Value::Object(inner), self.budget)
                        .map_err(Halt::Error),
                    Err(e) => {
                        // Helm changes a map already in the list in place, even when it stops.
                        if existing {
                            list[slot] = Value::Object(inner);
                        }
                        Err(e)
                    }
                }
            }
        };
        path.pop();
        (list, result)
    }

    /// Helm's `valList`: a `{a,b}` list value, each element charged to the budget.
    fn value_list(&mut self) -> Result<Vec<Value>, ListHalt> {
        match self.next() {
            None => return Err(ListHalt::End),
            Some('{') => {}
            Some(_) => {
                self.pos -= 1;
                return Err(ListHalt::NotList);
            }
        }
        let mut list = Vec::new();
        loop {
            let (text, last) = self.until(&[',', '}']);
            if let Err(e) = self.budget.charge(1) {
                return Err(ListHalt::Error(e));
            }
            match last {
                None => return Err(ListHalt::Error(StrvalsError::UnclosedList)),
                Some('}') => {
                    // A ',' right after the list is consumed.
                    if self.chars.get(self.pos) == Some(&',') {
                        self.pos += 1;
                    }
                    list.push(self.typed(text));
                    return Ok(list);
                }
                Some(_) => list.push(self.typed(text)),
            }
        }
    }
}

/// Why `valList` did not return a list.
enum ListHalt {
    End,
    NotList,
    Error(StrvalsError),
}

/// Helm's `setIndex`: the list grown with nulls up to `index`, the growth charged to `budget`.
fn set_index(
    list: &mut Vec<Value>,
    index: i64,
    value: Value,
    budget: &mut SetBudget,
) -> Result<(), StrvalsError> {
    if !(0..=MAX_INDEX).contains(&index) {
        return Err(StrvalsError::BadIndex);
    }
    let slot = usize::try_from(index).map_err(|_| StrvalsError::BadIndex)?;
    if list.len() <= slot {
        budget.charge(slot + 1 - list.len())?;
        list.resize(slot + 1, Value::Null);
    }
    list[slot] = value;
    Ok(())
}

/// Go's `strconv.Atoi`: an optional sign and decimal digits.
fn go_atoi(text: &str) -> Option<i64> {
    let digits = text.strip_prefix(['+', '-']).unwrap_or(text);
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    text.parse().ok()
}

/// A `--set` value typed as Helm's `strvals` types it (`typedVal`): `true`/`false` booleans and
/// `null` null, compared with Go's `strings.EqualFold` (Unicode simple case folding, so the
/// long s `ſ` matches `s`: `falſe` is false), a decimal integer without a leading zero (or
/// `0`) a number, else the string.
pub fn set_typed(value: &str) -> Value {
    if go_equal_fold(value, "true") {
        return Value::Bool(true);
    }
    if go_equal_fold(value, "false") {
        return Value::Bool(false);
    }
    if go_equal_fold(value, "null") {
        return Value::Null;
    }
    if value == "0" {
        return Value::from(0);
    }
    if !value.starts_with('0')
        && let Ok(n) = value.parse::<i64>()
    {
        return Value::from(n);
    }
    Value::String(value.to_owned())
}

/// Go's `strings.EqualFold(value, word)` for an ASCII lowercase `word`: the only non-ASCII
/// characters whose case-folding orbit holds an ASCII letter are the Kelvin sign `K` (k) and
/// the long s `ſ` (s).
fn go_equal_fold(value: &str, word: &str) -> bool {
    let mut chars = value.chars();
    for w in word.chars() {
        let Some(c) = chars.next() else {
            return false;
        };
        let same = c.to_ascii_lowercase() == w
            || (w == 'k' && c == '\u{212A}')
            || (w == 's' && c == '\u{17F}');
        if !same {
            return false;
        }
    }
    chars.next().is_none()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn parse(line: &str) -> Result<Value, StrvalsError> {
        let mut map = Map::new();
        parse_into(line, &mut map, Typing::Typed).map(|_| Value::Object(map))
    }

    /// Rows of `TestParseSet` in helm/helm `pkg/strvals/parser_test.go` at commit
    /// e9b85e4de16ad45805843fb121748018cf89094b (expected values as there).
    #[test]
    fn helm_parse_set_cases() {
        let ok: &[(&str, Value)] = &[
            (
                "name1=null,f=false,t=true",
                json!({"name1": null, "f": false, "t": true}),
            ),
            (
                "name1=value1,name2=value2,",
                json!({"name1": "value1", "name2": "value2"}),
            ),
            (
                "name1=,name2=value2",
                json!({"name1": "", "name2": "value2"}),
            ),
            ("leading_zeros=00009", json!({"leading_zeros": "00009"})),
            ("zero_int=0", json!({"zero_int": 0})),
            ("long_int=1234567890", json!({"long_int": 1234567890})),
            (
                "name1=one\\,two,name2=three\\,four",
                json!({"name1": "one,two", "name2": "three,four"}),
            ),
            (
                "name1=one\\=two,name2=three\\=four",
                json!({"name1": "one=two", "name2": "three=four"}),
            ),
            (
                "outer.inner1=value,outer.middle.inner=value",
                json!({"outer": {"inner1": "value", "middle": {"inner": "value"}}}),
            ),
            ("name1.name2=", json!({"name1": {"name2": ""}})),
            (
                "name1={value1,value2}",
                json!({"name1": ["value1", "value2"]}),
            ),
            ("name1={1021,902}", json!({"name1": [1021, 902]})),
            (
                "name1.name2={value1,value2}",
                json!({"name1": {"name2": ["value1", "value2"]}}),
            ),
            ("list[0]=foo", json!({"list": ["foo"]})),
            (
                "list[0].foo=bar,list[0].hello=world",
                json!({"list": [{"foo": "bar", "hello": "world"}]}),
            ),
            (
                "list[0]=foo,list[3]=bar",
                json!({"list": ["foo", null, null, "bar"]}),
            ),
            ("noval[0]", json!({"noval": []})),
            ("noval[0]=", json!({"noval": [""]})),
            ("nested[0][0]=1", json!({"nested": [[1]]})),
            ("nested[1][1]=1", json!({"nested": [null, [null, 1]]})),
            (
                "name1.name2[1].foo=bar,name1.name2[0].foo=bar",
                json!({"name1": {"name2": [{"foo": "bar"}, {"foo": "bar"}]}}),
            ),
            (
                "name1.name2[1].foo=bar",
                json!({"name1": {"name2": [null, {"foo": "bar"}]}}),
            ),
        ];
        for (line, want) in ok {
            assert_eq!(parse(line).as_ref(), Ok(want), "{line}");
        }
        for line in [
            "name1=value1,,,,name2=value2,",
            "name1,name2=",
            "name1,name2=value2",
            "name1,name2=value2\\",
            "name1.name2",
            "name1.=name2",
            "name1={1021,902",
            "list[0].foo=bar,list[-30].hello=world",
            "list[0]=foo,list[-20]=bar",
            "illegal[0]name.foo=bar",
            "]={}].",
        ] {
            assert!(parse(line).is_err(), "{line}");
        }
    }

    #[test]
    fn into_existing_values_and_assigned_paths() {
        let mut map = json!({"a": {"b": [1, {"c": "x"}]}, "s": "str"})
            .as_object()
            .cloned()
            .unwrap();
        let assigned = parse_into("a.b[1].d=true,a.b[2]=y", &mut map, Typing::Typed).unwrap();
        assert_eq!(
            Value::Object(map.clone()),
            json!({"a": {"b": [1, {"c": "x", "d": true}, "y"]}, "s": "str"})
        );
        assert_eq!(
            assigned[0].path,
            vec![Seg::key("a"), Seg::key("b"), Seg::Index(1), Seg::key("d")]
        );
        // A key into a string, an index into a map: Helm fails ("unable to parse key").
        assert_eq!(
            parse_into("s.x=1", &mut map, Typing::Typed),
            Err(StrvalsError::WrongType)
        );
        assert_eq!(
            parse_into("a[0]=1", &mut map, Typing::Typed),
            Err(StrvalsError::WrongType)
        );
        // `--set-string` keeps strings; escaped dots make one key.
        let mut map = Map::new();
        parse_into("x\\.y=true", &mut map, Typing::Strings).unwrap();
        assert_eq!(Value::Object(map), json!({"x.y": "true"}));
        assert!(parse("a[x]=1").is_err());
        assert!(parse(&format!("a[{}]=1", MAX_INDEX + 1)).is_err());
    }

    #[test]
    fn list_growth_is_charged_to_one_budget() {
        // One entry may pad a list to Helm's largest index; the next one in the same budget
        // goes past stackgate's limit.
        let mut budget = SetBudget::default();
        let mut map = Map::new();
        parse_into_within("a[65536]=1", &mut map, Typing::Typed, &mut budget).unwrap();
        assert_eq!(map["a"].as_array().map(Vec::len), Some(65_537));
        assert_eq!(
            parse_into_within("b[65536]=1", &mut Map::new(), Typing::Typed, &mut budget),
            Err(StrvalsError::OverLimit(SetLimit::Nodes))
        );
        // Filling an existing slot costs nothing.
        assert!(parse_into_within("a[3]=2", &mut map, Typing::Typed, &mut budget).is_ok());
    }

    /// The budget left after `line` is applied to `map` with a full budget.
    fn spent(line: &str, map: &mut Map<String, Value>) -> usize {
        let mut budget = SetBudget::default();
        parse_into_within(line, map, Typing::Typed, &mut budget).unwrap();
        MAX_SET_NODES - budget.nodes
    }

    #[test]
    fn keys_list_elements_and_list_values_are_charged() {
        // One new key, one element.
        assert_eq!(spent("a[0]=1", &mut Map::new()), 2);
        // Growing a list that already has elements charges only the new ones.
        let mut map = json!({"a": [1, 2, 3]}).as_object().cloned().unwrap();
        assert_eq!(spent("a[5]=1", &mut map), 3);
        assert_eq!(map["a"], json!([1, 2, 3, null, null, 1]));
        // A nested list inside an existing one.
        let mut map = json!({"a": [[1]]}).as_object().cloned().unwrap();
        assert_eq!(spent("a[0][2]=x", &mut map), 2);
        assert_eq!(map["a"], json!([[1, null, "x"]]));
        // Existing keys cost nothing; new ones one each.
        let mut map = json!({"a": {"b": 1}}).as_object().cloned().unwrap();
        assert_eq!(spent("a.b=2,a.c=3", &mut map), 1);
        // Each element of a `{...}` list value, empty ones too.
        assert_eq!(spent("l={,,,}", &mut Map::new()), 1 + 4);
        assert_eq!(spent("l={1,1}", &mut Map::new()), 1 + 2);
    }

    #[test]
    fn list_values_count_against_the_budget_at_the_limit_and_one_past() {
        // The key costs one node: MAX_SET_NODES - 1 elements fit exactly.
        let at = format!("l={{{}}}", ",".repeat(MAX_SET_NODES - 2));
        let mut map = Map::new();
        assert_eq!(spent(&at, &mut map), MAX_SET_NODES);
        assert_eq!(map["l"].as_array().map(Vec::len), Some(MAX_SET_NODES - 1));
        let past = format!("l={{{}}}", ",".repeat(MAX_SET_NODES - 1));
        assert_eq!(
            parse_into(&past, &mut Map::new(), Typing::Typed),
            Err(StrvalsError::OverLimit(SetLimit::Nodes))
        );
    }

    #[test]
    fn helm_nested_name_level_is_thirty_keys() {
        // 30 dots (31 keys) is Helm's limit; 31 dots is past it.
        let at = format!("{}k=1", "k.".repeat(MAX_NESTED_NAME_LEVEL));
        assert!(parse(&at).is_ok());
        let past = format!("{}k=1", "k.".repeat(MAX_NESTED_NAME_LEVEL + 1));
        assert_eq!(parse(&past), Err(StrvalsError::TooDeep));
        // As in Helm, the `.` right after a list index is not counted.
        let after_index = format!("a[0].{}k=1", "k.".repeat(MAX_NESTED_NAME_LEVEL));
        assert!(parse(&after_index).is_ok());
        let past = format!("a[0].{}k=1", "k.".repeat(MAX_NESTED_NAME_LEVEL + 1));
        assert_eq!(parse(&past), Err(StrvalsError::TooDeep));
    }

    #[test]
    fn paths_stop_at_stackgates_depth_limit() {
        // `a` plus MAX_SET_PATH_DEPTH - 1 indexes: at the limit.
        let at = format!("a{}=1", "[0]".repeat(MAX_SET_PATH_DEPTH - 1));
        let value = parse(&at).unwrap();
        let mut depth = 0;
        let mut node = &value["a"];
        while let Some(inner) = node.get(0) {
            depth += 1;
            node = inner;
        }
        assert_eq!(depth, MAX_SET_PATH_DEPTH - 1);
        let past = format!("a{}=1", "[0]".repeat(MAX_SET_PATH_DEPTH));
        assert_eq!(parse(&past), Err(StrvalsError::OverLimit(SetLimit::Depth)));
        // Keys after indexes, which Helm's level does not count, count here.
        let keys = format!(
            "{}=1",
            "a[0]."
                .repeat(MAX_SET_PATH_DEPTH / 2 + 1)
                .trim_end_matches('.')
        );
        assert_eq!(parse(&keys), Err(StrvalsError::OverLimit(SetLimit::Depth)));
        // The shape: thousands of indexes are refused, not a stack overflow, even on
        // a small stack.
        let hostile = format!("cloudConfig.x{}=1", "[0]".repeat(7_500));
        let refused = std::thread::Builder::new()
            .stack_size(256 * 1024)
            .spawn(move || parse(&hostile))
            .unwrap()
            .join()
            .unwrap();
        assert_eq!(refused, Err(StrvalsError::OverLimit(SetLimit::Depth)));
    }

    #[test]
    fn twenty_thousand_entries_under_one_map() {
        // 20,000 entries under one map: each used to copy the map it went through.
        let mut map = Map::new();
        let mut budget = SetBudget::default();
        for i in 0..20_000 {
            let line = format!("cloudConfig.global.k{i}=v");
            parse_into_within(&line, &mut map, Typing::Typed, &mut budget).unwrap();
        }
        assert_eq!(
            map["cloudConfig"]["global"].as_object().map(Map::len),
            Some(20_000)
        );
    }

    #[test]
    fn a_cancelled_budget_stops_the_parse() {
        let cancel = Cancel::new();
        let mut budget = SetBudget::new(cancel.clone());
        assert!(parse_into_within("a=1", &mut Map::new(), Typing::Typed, &mut budget).is_ok());
        cancel.cancel();
        assert_eq!(
            parse_into_within("b=1", &mut Map::new(), Typing::Typed, &mut budget),
            Err(StrvalsError::Cancelled)
        );
        // Cancelled in the middle of a long list value.
        let cancel = Cancel::new();
        let mut budget = SetBudget::new(cancel.clone());
        cancel.cancel();
        let long = format!("l={{{}}}", "x,".repeat(10_000));
        assert_eq!(
            parse_into_within(&long, &mut Map::new(), Typing::Typed, &mut budget),
            Err(StrvalsError::Cancelled)
        );
    }

    #[test]
    fn comma_escaping_of_the_two_controllers() {
        assert_eq!(
            escape_commas_helm_controller("a,b\\,c\\\\,d"),
            "a\\,b\\,c\\\\\\,d"
        );
        assert_eq!(escape_commas_argo("a,b\\,c"), "a\\,b\\,c");
        assert_eq!(escape_commas_argo("{a,b}"), "{a,b}");
    }
}
