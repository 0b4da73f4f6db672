//! Plain INI cloud configs in a repository (`cloud.conf` named on the command line, or files
//! matching `--ini GLOB`): checked as a bare cloud config with every cloud-config rule, and
//! fixed with the lossless INI editor.
//!
//! The file becomes a synthetic `stackgate.dev/v1alpha1 CloudConfigFile` object whose `text`
//! is the file, so the engine, the messages and the edits are the ones the webhook applies to
//! a Secret's `cloud.conf`; a line of the config is the line of the file. The file is treated
//! as a Secret's content (it holds credentials): its fix is shown as a masked diff.

use serde_json::json;

use super::evaluate::Checked;
use crate::engine::{Engine, Subject};
use crate::report::mask::{MaskMode, masked_diff};
use crate::report::{ObjectResult, verdict_items};
use crate::sites::{CONFIG_FILE_API_VERSION, CONFIG_FILE_KIND};

/// Checks `text`, the content of the INI file `name`.
pub fn check_ini(engine: &Engine, name: &str, text: &str) -> Checked {
    let object_json = json!({
        "apiVersion": CONFIG_FILE_API_VERSION,
        "kind": CONFIG_FILE_KIND,
        "metadata": {"name": name},
        "text": text,
    });
    let gvk = kube::core::GroupVersionKind::gvk("stackgate.dev", "v1alpha1", CONFIG_FILE_KIND);
    let object = kube::core::DynamicObject {
        types: Some(kube::core::TypeMeta {
            api_version: CONFIG_FILE_API_VERSION.to_owned(),
            kind: CONFIG_FILE_KIND.to_owned(),
        }),
        metadata: kube::core::ObjectMeta {
            name: Some(name.to_owned()),
            ..Default::default()
        },
        data: json!({ "text": text }),
    };
    let verdict = engine.evaluate(&Subject::create(&gvk, &object));
    // A file has no annotations, so no exemptions: their line would be the first.
    let mut items = verdict_items(&verdict, |f| f.line().unwrap_or(1), 1, |_, _| {});
    items.sort_by_key(|i| (i.line, std::cmp::Reverse(i.level)));
    // The patch replaces `/text` with the edited config (one line changed or inserted).
    let fixed = verdict.patch.iter().find_map(|op| match op {
        json_patch::PatchOperation::Replace(r) if r.path.as_str() == "/text" => {
            r.value.as_str().map(str::to_owned)
        }
        _ => None,
    });
    let secret_diffs = fixed
        .iter()
        .map(|new| {
            masked_diff(
                text,
                new,
                &format!("{name} (values masked)"),
                MaskMode::SecretIni,
            )
        })
        .collect();
    let lines = text.lines().count().max(1);
    Checked {
        problems: Vec::new(),
        objects: vec![ObjectResult {
            object: format!("cloud config file {name}"),
            line: 1,
            items,
            fixable_in_place: fixed.is_some(),
            verdict,
            json: object_json,
            secret_diffs,
        }],
        fixed,
        shown: None,
        secret_lines: vec![(1, lines)],
    }
}
