//! Facts about the cluster for `check`, derived from the whole input: what the webhook learns
//! from the live cluster (the cloud config the `ovn-source-ranges` family reads) is taken here
//! from the cloud configs found in the checked files (a Secret or ConfigMap site, or the CCM
//! chart's values). Pure: the texts in, [`Facts`] out. `audit` reduces the cloud-config
//! objects it lists the same way ([`settings_of`], [`fact_of`]).

use kube::core::{DynamicObject, GroupVersionKind};

use crate::cloudconf::{Document, schema};
use crate::engine::{Engine, Facts};
use crate::rules::ovn_source_ranges::{self, CloudConfigFact, LbSettings};
use crate::sites;
use crate::yaml;

use super::evaluate::{candidates_of, object_of};

/// One input: its name, its text, and the chart it is a values file of, if it is one.
pub type Input<'a> = (&'a str, &'a str, Option<super::input::ValuesTarget<'a>>);

/// The facts for every object of `inputs`. Only computed when an input may hold a Service
/// of type LoadBalancer (the one kind that reads them), so most runs parse nothing twice.
pub fn from_inputs(inputs: &[Input<'_>], engine: &Engine) -> Facts {
    // Cheap: a Service of type LoadBalancer names both words.
    let names = |word: &str| inputs.iter().any(|(_, text, _)| text.contains(word));
    if !(names("Service") && names("LoadBalancer")) {
        return Facts::default();
    }
    let found = cloud_configs(inputs, engine);
    match fact_of(
        found,
        "this input holds",
        "check cannot tell which cluster the Service belongs to",
    ) {
        Some(fact) => Facts::of(ovn_source_ranges::FAMILY.id, fact),
        None => Facts::default(),
    }
}

/// The load-balancer settings of every OpenStack cloud config in `inputs`.
fn cloud_configs(inputs: &[Input<'_>], engine: &Engine) -> Vec<LbSettings> {
    let mut out = Vec::new();
    for (name, text, values_chart) in inputs {
        // Unparseable files are reported by the evaluation itself.
        let Ok(docs) = yaml::parse_stream(text) else {
            continue;
        };
        for doc in &docs {
            let Ok(candidates) = candidates_of(doc, name, *values_chart) else {
                continue;
            };
            for c in candidates {
                let Some((kind, object)) = object_of(&c.json) else {
                    continue;
                };
                out.extend(settings_of(&kind, &object, Some(name), engine));
            }
        }
    }
    out
}

/// The load-balancer settings of every OpenStack cloud config one object carries (its
/// sites under the `CloudConfigSites` policy), each named by its site and, when given, the
/// place the object was read from (`in a.yaml`). Shared by `check` and `audit`.
pub fn settings_of(
    kind: &GroupVersionKind,
    object: &DynamicObject,
    place: Option<&str>,
    engine: &Engine,
) -> Vec<LbSettings> {
    let mut out = Vec::new();
    for site in sites::find(kind, object, &engine.policies().sites) {
        let Ok(ini) = &site.text else {
            continue;
        };
        let source = match place {
            Some(place) => format!("{} in {place}", site.describe(None)),
            None => site.describe(None),
        };
        match Document::parse(ini) {
            Ok(doc) => {
                if site.other_platforms && !schema::is_openstack_config(&doc) {
                    continue;
                }
                out.push(LbSettings::from_document(source, &doc));
            }
            Err(_) => out.push(LbSettings::from_ini(source, ini)),
        }
    }
    out
}

/// One fact from the cloud configs found: none when there is none (the family then says it
/// sees no config); the settings when they all agree; unavailable when they disagree, since
/// then the face cannot tell which one applies. `holder` names where they were found ("this
/// input holds"), `undecidable` says why the face cannot choose.
pub fn fact_of(found: Vec<LbSettings>, holder: &str, undecidable: &str) -> Option<CloudConfigFact> {
    let first = found.first()?;
    if let Some(other) = found.iter().find(|s| !s.agrees_with(first)) {
        return Some(CloudConfigFact::Unavailable(format!(
            "{holder} {} cloud configs whose load-balancer settings differ, e.g. {} and {}, \
             and {undecidable}",
            found.len(),
            first.source,
            other.source
        )));
    }
    found.into_iter().next().map(CloudConfigFact::Known)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::PolicySet;

    fn engine() -> Engine {
        Engine::new(PolicySet::embedded().expect("embedded policies"))
    }

    const SECRET_OVN: &str = "apiVersion: v1\nkind: Secret\nmetadata:\n  name: cloud-config\n  namespace: kube-system\nstringData:\n  cloud.conf: |\n    [LoadBalancer]\n    lb-provider = ovn\n";
    const SERVICE: &str =
        "apiVersion: v1\nkind: Service\nmetadata:\n  name: s\nspec:\n  type: LoadBalancer\n";

    #[test]
    fn a_cloud_config_in_the_input_is_the_fact() {
        let facts = from_inputs(
            &[("a.yaml", SECRET_OVN, None), ("s.yaml", SERVICE, None)],
            &engine(),
        );
        match facts.get::<CloudConfigFact>(ovn_source_ranges::FAMILY.id) {
            Some(CloudConfigFact::Known(s)) => {
                assert!(s.ovn && !s.manage_security_groups, "{s:?}");
                assert_eq!(
                    s.source,
                    "Secret kube-system/cloud-config stringData[\"cloud.conf\"] in a.yaml"
                );
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn no_service_no_work_and_disagreeing_configs_are_unavailable() {
        let facts = from_inputs(&[("a.yaml", SECRET_OVN, None)], &engine());
        assert!(
            facts
                .get::<CloudConfigFact>(ovn_source_ranges::FAMILY.id)
                .is_none()
        );
        let amphora = SECRET_OVN.replace("ovn", "amphora");
        let facts = from_inputs(
            &[
                ("a.yaml", SECRET_OVN, None),
                ("b.yaml", &amphora, None),
                ("s.yaml", SERVICE, None),
            ],
            &engine(),
        );
        match facts.get::<CloudConfigFact>(ovn_source_ranges::FAMILY.id) {
            Some(CloudConfigFact::Unavailable(why)) => {
                assert!(why.contains("differ"), "{why}");
                assert!(!why.contains("lb-provider = "), "{why}");
            }
            other => panic!("{other:?}"),
        }
    }
}
