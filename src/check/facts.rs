//! `check`'s fact feeder: the facts the enabled policies need ([`crate::facts`]), reduced from
//! the whole input. What the webhook learns from the live cluster (the cloud config the
//! `ovn-source-ranges` family reads) is taken here from the cloud configs found in the checked
//! files (a Secret or ConfigMap site, or the CCM chart's values). Pure: the texts in,
//! [`Facts`] out; the reducers are [`crate::facts`]'s, shared with `audit`.

use crate::engine::{Engine, Facts};
use std::sync::Arc;

use crate::facts::Collector;
use crate::facts::ccm_config::CcmConfigReads;
use crate::yaml;

use super::evaluate::{candidates_of, object_of};

/// One input: its name, its text, and the chart it is a values file of, if it is one.
pub type Input<'a> = (&'a str, &'a str, Option<super::input::ValuesTarget<'a>>);

/// The facts for every object of `inputs`. Only computed when an input may hold a Service
/// of type LoadBalancer (the one kind that reads them), so most runs parse nothing twice.
pub fn from_inputs(inputs: &[Input<'_>], engine: &Engine) -> Facts {
    let mut facts = Facts::default();
    // The config objects CCM containers of the run read (`CcmConfigSource`): only when an
    // input names a CCM marker, so most runs parse nothing twice.
    let params = engine.ccm_marker_params();
    let markers = crate::rules::ccm_workload::CcmMarkers::new(&params.ccm_images, &params.ccm_args);
    if inputs.iter().any(|(_, text, _)| {
        markers
            .images
            .iter()
            .chain(markers.args.iter())
            .any(|m| text.contains(m))
    }) {
        let mut reads = CcmConfigReads::default();
        each_object(inputs, |kind, object, _| {
            reads.add_workload(kind, object, &markers);
            reads.add_present(kind, object);
        });
        if !reads.is_empty() {
            facts.merge(Facts::of_ccm_reads(Arc::new(reads)));
        }
    }
    // Cheap: a Service of type LoadBalancer names both words.
    let names = |word: &str| inputs.iter().any(|(_, text, _)| text.contains(word));
    if !(names("Service") && names("LoadBalancer")) {
        return facts;
    }
    let mut collector = Collector::new(&engine.policies().needed_facts());
    if collector.is_empty() {
        return facts;
    }
    each_object(inputs, |kind, object, name| {
        collector.add(kind, object, Some(name), &engine.policies().sites);
    });
    facts.merge(Facts::of_reduced(collector.reduced(
        "this input holds",
        "check cannot tell which cluster the Service belongs to",
    )));
    facts
}

/// Calls `visit` with every object of `inputs` and the name of its input.
fn each_object(
    inputs: &[Input<'_>],
    mut visit: impl FnMut(&kube::core::GroupVersionKind, &kube::core::DynamicObject, &str),
) {
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
                visit(&kind, &object, name);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::PolicySet;
    use crate::rules::ovn_source_ranges::{self, CloudConfigFact};

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
