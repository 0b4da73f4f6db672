//! What a face found, as data, and how it is shown: the findings of one run (`Report`, one
//! `FileReport` per input or object, each object's `Item`s located in it), rendered as text,
//! JSON, SARIF 2.1.0 or JUnit XML ([`render`]), with fixes shown as masked diffs ([`mask`]).
//!
//! `stackgate check` and `stackgate audit` are peer faces over this model: each turns the
//! engine's verdicts into items ([`verdict_items`]) placed where its input has them (a file's
//! line, an object read from the cluster) and renders the same report.

pub mod mask;
pub mod render;

use clap::ValueEnum;
use serde_json::Value;

use crate::engine::{Finding, Verdict};

/// The SARIF rule id (and text tag) of a skipped template (a file read but not checked).
pub const TEMPLATE_RULE: &str = "template-skipped";

/// How serious an item is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Level {
    /// Informational: a mutation the webhook would make, an audit finding, an exemption.
    Note,
    /// A warning the webhook would return.
    Warning,
    /// A denial.
    Error,
}

impl Level {
    /// `error`, `warning`, `note` (the SARIF level names).
    pub fn as_str(self) -> &'static str {
        match self {
            Level::Note => "note",
            Level::Warning => "warning",
            Level::Error => "error",
        }
    }
}

/// What an item is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ItemKind {
    /// The validating webhook would deny.
    Denial,
    /// The webhook would warn.
    Warning,
    /// A policy in audit mode found this.
    Audit,
    /// The mutating webhook would make this change.
    Mutation,
    /// An exemption annotation admitted a finding.
    Exemption,
    /// A `StackgateException` admitted a finding (a warning while it expires soon).
    Excepted,
}

impl ItemKind {
    /// Lowercase name used in JSON output.
    pub fn as_str(self) -> &'static str {
        match self {
            ItemKind::Denial => "denial",
            ItemKind::Warning => "warning",
            ItemKind::Audit => "audit",
            ItemKind::Mutation => "mutation",
            ItemKind::Exemption => "exemption",
            ItemKind::Excepted => "excepted",
        }
    }
}

/// One finding, located in the input.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Item {
    /// Severity.
    pub level: Level,
    /// What it is.
    pub kind: ItemKind,
    /// Policy name.
    pub policy: String,
    /// Rule family (`serial-lb-api-calls`).
    pub rule: String,
    /// The finding's code: one of the rule family's codes or an engine code
    /// ([`Finding::code`]); `None` for an exemption and for findings a face adds itself.
    pub code: Option<&'static str>,
    /// 1-based line in the input.
    pub line: usize,
    /// The engine's message (never contains configuration values): the full text of `text`.
    pub message: String,
    /// The finding's parts ([`crate::engine::Text`]), which the report formats render; None
    /// for an exemption and for findings a face adds itself (then `message` is all there is).
    pub text: Option<crate::engine::Text>,
    /// Whether the webhook's patch fixes it.
    pub fixed_by_patch: bool,
    /// When the finding is about a merged value set in another input (a values file, a
    /// HelmChartConfig): that input's name; `line` is then a line of it.
    pub file: Option<String>,
}

/// A problem reading the input (exit code 2).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Problem {
    /// 1-based line (0 when unknown).
    pub line: usize,
    /// 1-based column (0 when unknown).
    pub column: usize,
    /// What is wrong (never document content).
    pub message: String,
}

/// One object of the input and what the engine decided about it.
#[derive(Debug, Clone)]
pub struct ObjectResult {
    /// `HelmRelease kube-system/occm`.
    pub object: String,
    /// 1-based line where the object starts.
    pub line: usize,
    /// Findings.
    pub items: Vec<Item>,
    /// The engine's verdict.
    pub verdict: Verdict,
    /// The object as it was evaluated (JSON).
    pub json: Value,
    /// Masked unified diffs of the cloud configs of a Secret (shown instead of the file diff,
    /// which would carry base64 Secret data).
    pub secret_diffs: Vec<String>,
    /// Whether the patch could be written into the file as a minimal edit.
    pub fixable_in_place: bool,
}

/// The report items of `verdict`, one per finding, in the order denials (errors), warnings,
/// audits and mutations (notes), then exemptions (notes), then findings an exception admitted
/// (notes; warnings while the exception expires soon). A finding's item is at `line(f)` and
/// holds its message and fix flag, which `adjust` may change for the carrier (merged values
/// name their sources; a fix that cannot be written is not one); an exemption is at
/// `exemption_line`.
pub fn verdict_items(
    verdict: &Verdict,
    line: impl Fn(&Finding) -> usize,
    exemption_line: usize,
    mut adjust: impl FnMut(&Finding, &mut Item),
) -> Vec<Item> {
    let findings = [
        (Level::Error, ItemKind::Denial, &verdict.denials),
        (Level::Warning, ItemKind::Warning, &verdict.warnings),
        (Level::Note, ItemKind::Audit, &verdict.audits),
        (Level::Note, ItemKind::Mutation, &verdict.mutations),
    ];
    let mut items = Vec::new();
    for (level, kind, list) in findings {
        for f in list {
            let mut item = Item {
                level,
                kind,
                policy: f.policy.clone(),
                rule: f.rule.as_str().to_owned(),
                code: Some(f.code),
                line: line(f),
                message: f.denial_text(),
                text: Some(f.text.clone()),
                fixed_by_patch: f.fixed_by_patch,
                file: None,
            };
            adjust(f, &mut item);
            items.push(item);
        }
    }
    items.extend(verdict.exemptions.iter().map(|e| Item {
        level: Level::Note,
        kind: ItemKind::Exemption,
        policy: e.policy.clone(),
        rule: e.rule.as_str().to_owned(),
        code: None,
        line: exemption_line,
        message: format!(
            "exempted from policy {} by annotation ({}): {}",
            e.policy,
            e.basis.describe(),
            e.reason
        ),
        text: None,
        fixed_by_patch: false,
        file: None,
    }));
    for e in &verdict.excepted {
        let f = &e.finding;
        let mut item = Item {
            level: if e.exception.expiring_in_days.is_some() {
                Level::Warning
            } else {
                Level::Note
            },
            kind: ItemKind::Excepted,
            policy: f.policy.clone(),
            rule: f.rule.as_str().to_owned(),
            code: Some(f.code),
            line: line(f),
            message: format!("{}: {}", e.exception.describe(&f.policy), f.first_line()),
            text: None,
            fixed_by_patch: false,
            file: None,
        };
        adjust(f, &mut item);
        // Whatever a carrier adds, an excepted finding is fixed by nothing.
        item.fixed_by_patch = false;
        items.push(item);
    }
    items
}

/// Output formats.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Format {
    /// `file:line: level [rule/code] message`, fixes as unified diffs, and a summary line.
    Text,
    /// One JSON document with a summary, the results, the fixes and the input errors.
    Json,
    /// SARIF 2.1.0, for GitHub code scanning.
    Sarif,
    /// JUnit XML, for CI test reports.
    Junit,
}

/// Which findings fail the run (exit code 1).
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum FailOn {
    /// Denials only.
    Error,
    /// Denials and warnings.
    Warning,
}

/// The report for one input.
#[derive(Debug, Clone)]
pub struct FileReport {
    /// Display name.
    pub name: String,
    /// Input problems (exit code 2).
    pub problems: Vec<Problem>,
    /// Objects and findings.
    pub objects: Vec<ObjectResult>,
    /// Masked unified diff of the fixes that can be shown as a file edit.
    pub diff: Option<String>,
    /// Whether `--fix` wrote the file (the findings are then those of the fixed file).
    pub written: bool,
    /// Why the input was not read, when it was skipped by design (does not fail the run).
    pub skipped: Option<String>,
    /// The skip is routine: a kind this cluster does not serve (no CRD installed). Text
    /// output folds every such entry into one line unless asked for each.
    pub not_served: bool,
    /// Why `--fix` did not write the file (a symbolic link, replaced since it was read).
    pub not_written: Option<String>,
    /// The note for a template file that was read but not checked (does not fail the run).
    pub template: Option<String>,
}

impl FileReport {
    /// An empty report for the input `name`.
    pub fn new(name: &str) -> Self {
        Self {
            name: name.to_owned(),
            problems: Vec::new(),
            objects: Vec::new(),
            diff: None,
            written: false,
            skipped: None,
            not_served: false,
            not_written: None,
            template: None,
        }
    }
}

/// Everything `stackgate check` found.
#[derive(Debug, Clone)]
pub struct Report {
    /// One entry per input, in input order.
    pub files: Vec<FileReport>,
    /// Which level fails the run.
    pub fail_on: FailOn,
    /// Whether fixes were written.
    pub fix: bool,
    /// Entries left out of `files` to keep the report bounded (`stackgate audit`): what
    /// they held. [`Report::counts`] includes them, so the summary and exit code stay true.
    pub omitted: Counts,
}

/// Counts over a report.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Counts {
    /// Inputs.
    pub files: usize,
    /// Objects evaluated.
    pub objects: usize,
    /// Denials.
    pub errors: usize,
    /// Warnings.
    pub warnings: usize,
    /// Notes (mutations, audits, exemptions).
    pub notes: usize,
    /// Input problems.
    pub problems: usize,
    /// Inputs with a fix that can be written in place (not yet written).
    pub fixable: usize,
    /// Inputs written by `--fix`.
    pub fixed: usize,
    /// Inputs skipped by design (symbolic links out of the tree, FIFOs, sockets, devices,
    /// templates).
    pub skipped: usize,
    /// Inputs `--fix` would have written but left alone (symbolic links, replaced files).
    pub not_written: usize,
}

/// Adds every count: the entries a bounded report left out are counted with those it lists.
impl std::ops::AddAssign for Counts {
    fn add_assign(&mut self, other: Counts) {
        self.files += other.files;
        self.objects += other.objects;
        self.errors += other.errors;
        self.warnings += other.warnings;
        self.notes += other.notes;
        self.problems += other.problems;
        self.fixable += other.fixable;
        self.fixed += other.fixed;
        self.skipped += other.skipped;
        self.not_written += other.not_written;
    }
}

impl Report {
    /// All items with their file, in order.
    fn items(&self) -> impl Iterator<Item = (&FileReport, &ObjectResult, &Item)> {
        self.files.iter().flat_map(|f| {
            f.objects
                .iter()
                .flat_map(move |o| o.items.iter().map(move |i| (f, o, i)))
        })
    }

    /// Counts.
    pub fn counts(&self) -> Counts {
        let mut c = Counts {
            files: self.files.len(),
            ..Counts::default()
        };
        for f in &self.files {
            c.objects += f.objects.len();
            c.problems += f.problems.len();
            c.skipped += usize::from(f.skipped.is_some()) + usize::from(f.template.is_some());
            if f.written {
                c.fixed += 1;
            } else if f.not_written.is_some() {
                c.not_written += 1;
            } else if f.diff.is_some()
                || f.objects
                    .iter()
                    .any(|o| !o.secret_diffs.is_empty() && o.fixable_in_place)
            {
                c.fixable += 1;
            }
        }
        for (_, _, i) in self.items() {
            match i.level {
                Level::Error => c.errors += 1,
                Level::Warning => c.warnings += 1,
                Level::Note => c.notes += 1,
            }
        }
        c += self.omitted;
        c
    }

    /// Exit code: 2 for input problems, 1 for failing findings, else 0.
    pub fn exit_code(&self) -> u8 {
        let c = self.counts();
        if c.problems > 0 {
            2
        } else if c.errors > 0 || (self.fail_on == FailOn::Warning && c.warnings > 0) {
            1
        } else {
            0
        }
    }

    fn failing(&self, level: Level) -> bool {
        level == Level::Error || (self.fail_on == FailOn::Warning && level == Level::Warning)
    }
}
