//! Every exported manifest validates against the vendored schemas
//! (tests/schemas/README.md): the core kinds against Kubernetes' own
//! (strict: an unknown field is an error), the SandboxTemplate against its
//! CRD's `openAPIV3Schema` made as strict as the API server is with
//! `fieldValidation=Strict` (a field the schema does not declare is
//! refused), and its embedded Pod and claim specs against the core
//! schemas too. A misspelt or misplaced field fails (tested below).

// A test crate: a failed unwrap or expect is a failed test.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::collections::BTreeMap;
use std::path::Path;

use serde_json::{json, Value};

/// The core kinds exported, and the definition each validates against.
const ROOTS: [(&str, &str); 12] = [
    ("RuntimeClass", "io.k8s.api.node.v1.RuntimeClass"),
    ("NetworkPolicy", "io.k8s.api.networking.v1.NetworkPolicy"),
    ("ConfigMap", "io.k8s.api.core.v1.ConfigMap"),
    ("Deployment", "io.k8s.api.apps.v1.Deployment"),
    ("Service", "io.k8s.api.core.v1.Service"),
    (
        "PersistentVolumeClaim",
        "io.k8s.api.core.v1.PersistentVolumeClaim",
    ),
    (
        "ValidatingAdmissionPolicy",
        "io.k8s.api.admissionregistration.v1.ValidatingAdmissionPolicy",
    ),
    (
        "ValidatingAdmissionPolicyBinding",
        "io.k8s.api.admissionregistration.v1.ValidatingAdmissionPolicyBinding",
    ),
    // What the SandboxTemplate embeds.
    ("PodSpec", "io.k8s.api.core.v1.PodSpec"),
    (
        "ObjectMeta",
        "io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta",
    ),
    (
        "PersistentVolumeClaimSpec",
        "io.k8s.api.core.v1.PersistentVolumeClaimSpec",
    ),
    (
        "NetworkPolicyEgressRule",
        "io.k8s.api.networking.v1.NetworkPolicyEgressRule",
    ),
];

struct Schemas {
    core: BTreeMap<&'static str, jsonschema::Validator>,
    template: jsonschema::Validator,
}

fn schemas_dir() -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/schemas")
}

fn core_validator(defs: &Value, root: &str) -> jsonschema::Validator {
    assert!(
        defs.get(root).is_some(),
        "{root} is not in the vendored definitions"
    );
    let schema = json!({
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "$defs": defs,
        "$ref": format!("#/$defs/{root}"),
    });
    jsonschema::validator_for(&schema).unwrap_or_else(|e| panic!("{root}: {e}"))
}

/// The CRD's structural schema, with every object that declares its
/// properties closed to others (`additionalProperties: false`) unless it
/// keeps unknown fields on purpose (`x-kubernetes-preserve-unknown-fields`)
/// or is a map (`additionalProperties` given).
fn strict(v: &mut Value) {
    match v {
        Value::Object(m) => {
            let closed = m.contains_key("properties")
                && !m.contains_key("additionalProperties")
                && m.get("x-kubernetes-preserve-unknown-fields") != Some(&Value::Bool(true));
            if closed {
                m.insert("additionalProperties".into(), Value::Bool(false));
            }
            for (_, child) in m.iter_mut() {
                strict(child);
            }
        }
        Value::Array(a) => a.iter_mut().for_each(strict),
        _ => {}
    }
}

fn load() -> Schemas {
    let text = std::fs::read_to_string(schemas_dir().join("kubernetes/definitions.json")).unwrap();
    let all: Value = serde_json::from_str(&text).unwrap();
    let defs = &all["$defs"];
    let core = ROOTS
        .iter()
        .map(|(kind, root)| (*kind, core_validator(defs, root)))
        .collect();
    let crd_text = std::fs::read_to_string(
        schemas_dir().join("agent-sandbox/extensions.agents.x-k8s.io_sandboxtemplates.yaml"),
    )
    .unwrap();
    let crd: Value = serde_norway::from_str(&crd_text).unwrap();
    let version = crd["spec"]["versions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|v| v["name"] == "v1beta1")
        .expect("the CRD serves v1beta1");
    let mut schema = version["schema"]["openAPIV3Schema"].clone();
    strict(&mut schema);
    let template = jsonschema::validator_for(&schema).unwrap();
    Schemas { core, template }
}

fn errors(v: &jsonschema::Validator, instance: &Value) -> Vec<String> {
    v.iter_errors(instance)
        .map(|e| format!("{} at {}", e, e.instance_path()))
        .collect()
}

impl Schemas {
    /// Why `m` does not validate (empty: it does).
    fn check(&self, kind: &str, m: &Value) -> Vec<String> {
        if kind != "SandboxTemplate" {
            let v = self
                .core
                .get(kind)
                .unwrap_or_else(|| panic!("no schema for {kind}"));
            return errors(v, m);
        }
        assert_eq!(m["apiVersion"], "extensions.agents.x-k8s.io/v1beta1");
        assert_eq!(m["kind"], "SandboxTemplate");
        let mut out = errors(&self.template, m);
        // What the CRD leaves open, or states loosely, the core schemas
        // check: metadata, the Pod, the claims' and policy's specs.
        let core = |kind: &str, v: &Value| errors(&self.core[kind], v);
        out.extend(core("PodSpec", &m["spec"]["podTemplate"]["spec"]));
        out.extend(core("ObjectMeta", &m["metadata"]));
        for c in m["spec"]["volumeClaimTemplates"]
            .as_array()
            .into_iter()
            .flatten()
        {
            out.extend(core("PersistentVolumeClaimSpec", &c["spec"]));
        }
        for r in m["spec"]["networkPolicy"]["egress"]
            .as_array()
            .into_iter()
            .flatten()
        {
            out.extend(core("NetworkPolicyEgressRule", r));
        }
        out
    }
}

#[test]
fn every_exported_manifest_validates() {
    let s = load();
    let mut kinds = std::collections::BTreeSet::new();
    for (name, profile) in common::profiles() {
        for repo in [true, false] {
            let mut o = common::options(&name);
            if !repo {
                o.repo = None;
                o.git_ref = None;
            }
            let e = lazaret_kubernetes::export(&profile, &o).unwrap();
            for m in &e.manifests {
                let errs = s.check(m.kind, &m.value);
                assert!(errs.is_empty(), "{name}: {} {}: {errs:#?}", m.kind, m.name);
                // What kubectl reads is the YAML: the same object.
                let back: Value = serde_norway::from_str(&m.to_yaml().unwrap()).unwrap();
                assert_eq!(back, m.value, "{name}: {} {}", m.kind, m.name);
                kinds.insert(m.kind);
            }
        }
    }
    // Every kind the export can emit was checked at least once.
    for k in [
        "RuntimeClass",
        "SandboxTemplate",
        "NetworkPolicy",
        "PersistentVolumeClaim",
        "ConfigMap",
        "Deployment",
        "Service",
        "ValidatingAdmissionPolicy",
        "ValidatingAdmissionPolicyBinding",
    ] {
        assert!(kinds.contains(k), "{k} never exported");
    }
}

/// The codex export's object of `kind` (and `name`, when several).
fn object(kind: &str, name: Option<&str>) -> Value {
    let config = common::example("codex");
    let e = common::export(config.profile("codex").unwrap(), "codex");
    e.manifests
        .into_iter()
        .find(|m| m.kind == kind && name.is_none_or(|n| m.name == n))
        .unwrap_or_else(|| panic!("no {kind}"))
        .value
}

/// Renames `from` to `to` in the object at `path` (JSON pointer).
fn rename(v: &mut Value, path: &str, from: &str, to: &str) {
    let m = v.pointer_mut(path).unwrap().as_object_mut().unwrap();
    let x = m
        .remove(from)
        .unwrap_or_else(|| panic!("no {from} at {path}"));
    m.insert(to.into(), x);
}

#[test]
fn a_misspelt_or_misplaced_field_fails() {
    let s = load();
    let template = object("SandboxTemplate", None);
    assert_eq!(s.check("SandboxTemplate", &template), Vec::<String>::new());

    // Misspelt in the Pod the CRD embeds.
    let mut t = template.clone();
    rename(
        &mut t,
        "/spec/podTemplate/spec",
        "automountServiceAccountToken",
        "automountServiceAcountToken",
    );
    let errs = s.check("SandboxTemplate", &t);
    assert!(
        errs.iter()
            .any(|e| e.contains("automountServiceAcountToken")),
        "{errs:#?}"
    );
    // Misspelt in the template's own fields.
    let mut t = template.clone();
    rename(
        &mut t,
        "/spec",
        "networkPolicyManagement",
        "networkPolicyManagment",
    );
    assert!(!s.check("SandboxTemplate", &t).is_empty());
    // Misplaced: the RuntimeClass named in the container, not the Pod.
    let mut t = template.clone();
    let rc = t
        .pointer_mut("/spec/podTemplate/spec")
        .unwrap()
        .as_object_mut()
        .unwrap()
        .remove("runtimeClassName")
        .unwrap();
    t.pointer_mut("/spec/podTemplate/spec/containers/0")
        .unwrap()
        .as_object_mut()
        .unwrap()
        .insert("runtimeClassName".into(), rc);
    assert!(!s.check("SandboxTemplate", &t).is_empty());
    // A wrong type: the memory limit as a list.
    let mut t = template;
    *t.pointer_mut("/spec/podTemplate/spec/containers/0/resources/limits/memory")
        .unwrap() = json!(["4Gi"]);
    assert!(!s.check("SandboxTemplate", &t).is_empty());

    // Core kinds.
    let np = object("NetworkPolicy", Some("lazaret-codex-agent"));
    assert!(s.check("NetworkPolicy", &np).is_empty());
    let mut bad = np.clone();
    rename(&mut bad, "/spec", "podSelector", "podselector");
    assert!(!s.check("NetworkPolicy", &bad).is_empty());
    let mut bad = np;
    // `policyTypes` belongs in the spec, not the metadata.
    let pt = bad["spec"]
        .as_object_mut()
        .unwrap()
        .remove("policyTypes")
        .unwrap();
    bad["metadata"]
        .as_object_mut()
        .unwrap()
        .insert("policyTypes".into(), pt);
    assert!(!s.check("NetworkPolicy", &bad).is_empty());

    let d = object("Deployment", None);
    assert!(s.check("Deployment", &d).is_empty());
    let mut bad = d;
    rename(
        &mut bad,
        "/spec/template/spec/containers/0",
        "image",
        "imagee",
    );
    assert!(!s.check("Deployment", &bad).is_empty());

    let rc = object("RuntimeClass", None);
    assert!(s.check("RuntimeClass", &rc).is_empty());
    let mut bad = rc;
    rename(&mut bad, "", "handler", "handlr");
    let errs = s.check("RuntimeClass", &bad);
    assert!(!errs.is_empty(), "handler is required and handlr unknown");
}
