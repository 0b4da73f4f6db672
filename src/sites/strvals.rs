//! Helm's `--set` syntax (`strvals`), ported so that values set on top of the chart's values
//! (RKE2/k3s HelmChart `spec.set`, Argo CD `helm.parameters`) are merged as Helm merges them.
//!
//! Port of `pkg/strvals/parser.go` of github.com/helm/helm at commit
//! e9b85e4de16ad45805843fb121748018cf89094b (`ParseInto` / `ParseIntoString`): dots separate
//! keys, `[N]` indexes lists (missing elements are null, at most index 65536), a backslash
//! makes the next character literal (`a\.b` is one key, `x\,y` one value), `{a,b}` is a list
//! value, `,` separates assignments, at most 30 nested keys. `--set` types values
//! (`true`/`false`/`null` any case, decimal integers without a leading zero), `--set-string`
//! does not. Where Helm fails (a key without a value, an index that is not a number, a path
//! through a value of another type), this fails too: Helm would not render the chart.
//!
//! Besides the merged values, the parse records the path of each value it sets, so findings
//! about a rendered line can point at the entry that set it.

use serde_json::{Map, Value};

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
    /// The entries grow lists by more than their [`ListBudget`]: stackgate's limit, not
    /// Helm's (Helm would pad each list up to index 65536, whatever the number of entries).
    #[error("the entries grow lists by more than {MAX_LIST_GROWTH} elements")]
    TooManyElements,
}

/// Most list elements the entries applied to one values document may add (padding included):
/// the YAML reader's cap for a values string ([`crate::yaml::MAX_VALUES_NODES`]). Without it,
/// thousands of `k[65536]=1` entries in a 400 KB `spec.set` would build billions of nulls.
pub const MAX_LIST_GROWTH: usize = crate::yaml::MAX_VALUES_NODES;

/// What is left of [`MAX_LIST_GROWTH`] for the entries applied to one values document.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ListBudget(usize);

impl Default for ListBudget {
    fn default() -> Self {
        ListBudget(MAX_LIST_GROWTH)
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

/// One value an assignment set: its path in the values and the value.
#[derive(Debug, Clone, PartialEq)]
pub struct Assigned {
    /// Keys and list indexes from the values root.
    pub path: Vec<Seg>,
    /// The value set (a list for `{a,b}`).
    pub value: Value,
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
    parse_into_within(line, dest, typing, &mut ListBudget::default())
}

/// [`parse_into`], charging the list elements it adds to `budget` (shared by the entries
/// applied to one values document).
pub fn parse_into_within(
    line: &str,
    dest: &mut Map<String, Value>,
    typing: Typing,
    budget: &mut ListBudget,
) -> Result<Vec<Assigned>, StrvalsError> {
    let mut parser = Parser {
        chars: line.chars().collect(),
        pos: 0,
        typing,
        assigned: Vec::new(),
        budget,
    };
    loop {
        match parser.key(dest, 0, &mut Vec::new()) {
            Ok(()) => continue,
            Err(Halt::End) => return Ok(parser.assigned),
            Err(Halt::Error(e)) => return Err(e),
        }
    }
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
    budget: &'b mut ListBudget,
}

impl Parser<'_> {
    fn next(&mut self) -> Option<char> {
        let c = self.chars.get(self.pos).copied();
        if c.is_some() {
            self.pos += 1;
        }
        c
    }

    /// Helm's `runesUntil`: the characters up to one of `stop` (backslash escapes), and the
    /// stop character, or None at the end of the text.
    fn until(&mut self, stop: &[char]) -> (String, Option<char>) {
        let mut out = String::new();
        loop {
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
            Typing::Typed => super::helm::set_typed(&text),
        }
    }

    fn record(&mut self, path: &[Seg], value: &Value) {
        // Helm sets nothing for an empty key.
        if matches!(path.last(), Some(Seg::Key(k)) if k.is_empty()) {
            return;
        }
        self.assigned.push(Assigned {
            path: path.to_vec(),
            value: value.clone(),
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
                let list = match data.get(&k) {
                    None => Vec::new(),
                    Some(Value::Array(list)) => list.clone(),
                    Some(_) => return Err(StrvalsError::WrongType.into()),
                };
                path.push(Seg::key(&k));
                let (list, result) = self.list_item(list, index, level, path);
                path.pop();
                set(data, &k, Value::Array(list));
                result
            }
            Some('=') => {
                path.push(Seg::key(&k));
                let result = match self.value_list() {
                    Ok(list) => {
                        let value = Value::Array(list);
                        self.record(path, &value);
                        set(data, &k, value);
                        Ok(())
                    }
                    Err(ListHalt::End) => {
                        let value = Value::String(String::new());
                        self.record(path, &value);
                        set(data, &k, value);
                        Err(Halt::End)
                    }
                    Err(ListHalt::NotList) => {
                        let (text, _) = self.until(&[',']);
                        let value = self.typed(text);
                        self.record(path, &value);
                        set(data, &k, value);
                        // Helm returns no error here even at the end of the text: the next
                        // key finds the end.
                        Ok(())
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
                let mut inner = match data.get(&k) {
                    None => Map::new(),
                    Some(Value::Object(m)) => m.clone(),
                    Some(_) => return Err(StrvalsError::WrongType.into()),
                };
                path.push(Seg::key(&k));
                let result = self.key(&mut inner, level, path);
                path.pop();
                if result.is_ok() && inner.is_empty() {
                    return Err(StrvalsError::NoValue.into());
                }
                if !inner.is_empty() {
                    set(data, &k, Value::Object(inner));
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
                        self.record(path, &value);
                        set_index(&mut list, index, value, self.budget).map_err(Halt::Error)
                    }
                    Err(e) => Err(e),
                }
            }
            Some('[') => match self.index() {
                Err(e) => Err(e),
                Ok(next) => {
                    let current = match list.get(slot) {
                        None | Some(Value::Null) => Ok(Vec::new()),
                        Some(Value::Array(l)) => Ok(l.clone()),
                        Some(_) => Err(StrvalsError::WrongType),
                    };
                    match current {
                        Err(e) => Err(e.into()),
                        Ok(current) => match self.list_item(current, next, level, path) {
                            (inner, Ok(())) => {
                                set_index(&mut list, index, Value::Array(inner), self.budget)
                                    .map_err(Halt::Error)
                            }
                            (_, Err(e)) => Err(e),
                        },
                    }
                }
            },
            Some(_) => {
                // '.': a map in the list.
                let (mut inner, existing) = match list.get(slot) {
                    Some(Value::Object(m)) => (m.clone(), true),
                    _ => (Map::new(), false),
                };
                match self.key(&mut inner, level, path) {
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

    /// Helm's `valList`: a `{a,b}` list value.
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

/// Helm's `set`: an empty key sets nothing.
fn set(data: &mut Map<String, Value>, key: &str, value: Value) {
    if !key.is_empty() {
        data.insert(key.to_owned(), value);
    }
}

/// Helm's `setIndex`: the list grown with nulls up to `index`, the growth charged to `budget`.
fn set_index(
    list: &mut Vec<Value>,
    index: i64,
    value: Value,
    budget: &mut ListBudget,
) -> Result<(), StrvalsError> {
    if !(0..=MAX_INDEX).contains(&index) {
        return Err(StrvalsError::BadIndex);
    }
    let slot = usize::try_from(index).map_err(|_| StrvalsError::BadIndex)?;
    if list.len() <= slot {
        let growth = slot + 1 - list.len();
        budget.0 = budget
            .0
            .checked_sub(growth)
            .ok_or(StrvalsError::TooManyElements)?;
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
        let mut budget = ListBudget::default();
        let mut map = Map::new();
        parse_into_within("a[65536]=1", &mut map, Typing::Typed, &mut budget).unwrap();
        assert_eq!(map["a"].as_array().map(Vec::len), Some(65_537));
        assert_eq!(
            parse_into_within("b[65536]=1", &mut Map::new(), Typing::Typed, &mut budget),
            Err(StrvalsError::TooManyElements)
        );
        // Filling an existing slot costs nothing.
        assert!(parse_into_within("a[3]=2", &mut map, Typing::Typed, &mut budget).is_ok());
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
