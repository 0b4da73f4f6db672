//! `stackgate check` reads YAML as kubectl's go-yaml does (issue 14): NEL is a line break
//! inside scalars, quoted scalars may continue at their key's indentation (controller-gen
//! CRDs), and `--fix` escapes what a double-quoted string must not hold raw, so the fixed
//! file reads back, by the same reader, as the webhook's patched object.

use clap::Parser;
use stackgate::check::{self, CheckOptions};
use stackgate::cli::CheckArgs;
use stackgate::engine::Engine;
use stackgate::policy::PolicySet;
use stackgate::report::{ItemKind, Report};
use stackgate::yaml;

#[derive(Parser)]
struct Cmd {
    #[command(flatten)]
    args: CheckArgs,
}

fn check_file(name: &str, text: &str, fix: bool) -> (Report, String) {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join(name);
    std::fs::write(&path, text).unwrap();
    let mut argv = vec!["check".to_owned(), path.display().to_string()];
    if fix {
        argv.push("--fix".to_owned());
    }
    let options = CheckOptions::from(&Cmd::try_parse_from(argv).expect("flags").args);
    let engine = Engine::new(PolicySet::embedded().expect("policies"));
    let report = check::check(&options, &engine, &mut std::io::empty()).expect("runs");
    let after = std::fs::read_to_string(&path).unwrap();
    (report, after)
}

#[test]
fn a_controller_gen_description_continuing_at_the_key_indentation_is_read() {
    let crd = "apiVersion: apiextensions.k8s.io/v1\nkind: CustomResourceDefinition\nmetadata:\n  \
               name: things.example.test\nspec:\n  group: example.test\n  names:\n    kind: Thing\n    \
               plural: things\n  scope: Namespaced\n  versions:\n  - name: v1\n    schema:\n      \
               openAPIV3Schema:\n        description: 'Thing is the Schema for the things API. It\n        \
               continues here, at the key''s indentation.'\n        type: object\n    served: true\n    \
               storage: true\n";
    let (report, _) = check_file("crd.yaml", crd, false);
    let f = &report.files[0];
    assert!(f.problems.is_empty(), "{:?}", f.problems);
    assert_eq!(f.objects.len(), 1);
    assert_eq!(report.exit_code(), 0);
}

#[test]
fn a_nel_in_a_literal_block_is_the_line_break_kubectl_reads() {
    // kubectl stores `provider-requires-serial-api-calls = false` on a line of its own: the
    // NEL ends the comment line for go-yaml.
    let secret = "apiVersion: v1\nkind: Secret\nmetadata:\n  name: cloud-config\n  namespace: \
                  kube-system\nstringData:\n  cloud.conf: |\n    [Global]\n    region = RegionOne\n    \
                  [LoadBalancer]\n    # tuned\u{85}    provider-requires-serial-api-calls = false\n";
    let (report, _) = check_file("secret.yaml", secret, false);
    let items = &report.files[0].objects[0].items;
    let denial = items
        .iter()
        .find(|i| i.rule == "serial-lb-api-calls" && i.kind == ItemKind::Denial)
        .unwrap_or_else(|| panic!("the false setting is found: {items:?}"));
    // Line 11 of the file: the NEL starts no line in an editor.
    assert_eq!(denial.line, 11);
}

#[test]
fn fix_escapes_a_nel_in_a_double_quoted_string_and_reads_back_the_same() {
    // The config holds a U+0085 (written as the escape \N) in a comment; the fix rewrites the
    // double-quoted string, which must keep it escaped: raw, go-yaml would read a line break.
    let configmap = "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: occm\n  namespace: ns\n  \
                     labels:\n    stackgate.dev/cloud-config: cloud.conf\ndata:\n  cloud.conf: \
                     \"[Global]\\nregion = RegionOne # a\\Nb\\n[LoadBalancer]\\nlb-provider = amphora\\n\"\n";
    let (report, fixed) = check_file("cm.yaml", configmap, true);
    assert!(report.files[0].written, "{:?}", report.files[0]);
    assert!(!fixed.contains('\u{85}'), "{fixed:?}");
    assert!(fixed.contains("\\N"), "{fixed:?}");
    let docs = yaml::parse_stream(&fixed).expect("the fixed file reads");
    let value = docs[0].root.to_json().unwrap()["data"]["cloud.conf"]
        .as_str()
        .unwrap()
        .to_owned();
    assert_eq!(
        value,
        "[Global]\nregion = RegionOne # a\u{85}b\n[LoadBalancer]\nlb-provider = amphora\n\
         provider-requires-serial-api-calls = true\n"
    );
}
