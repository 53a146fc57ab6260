//! The agent-sandbox kinds Lazaret emits, typed: `SandboxTemplate` of
//! `extensions.agents.x-k8s.io/v1beta1` (CRD vendored in
//! `tests/schemas/agent-sandbox/`; the tests check every exported template
//! against its `openAPIV3Schema`, unknown fields refused). Only the fields
//! Lazaret sets are modelled; each name is the CRD's.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{PersistentVolumeClaimSpec, PodSpec};
use k8s_openapi::api::networking::v1::{NetworkPolicyEgressRule, NetworkPolicyIngressRule};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde::{Deserialize, Serialize};

/// The API group and version of `SandboxTemplate`.
pub const API_VERSION: &str = "extensions.agents.x-k8s.io/v1beta1";

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct SandboxTemplate {
    pub api_version: String,
    pub kind: String,
    pub metadata: ObjectMeta,
    pub spec: SandboxTemplateSpec,
}

impl SandboxTemplate {
    pub fn new(metadata: ObjectMeta, spec: SandboxTemplateSpec) -> Self {
        Self {
            api_version: API_VERSION.into(),
            kind: "SandboxTemplate".into(),
            metadata,
            spec,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct SandboxTemplateSpec {
    pub pod_template: PodTemplate,
    /// The NetworkPolicy the controller makes for each Sandbox of this
    /// template (with [`NetworkPolicyManagement::Managed`]).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub network_policy: Option<SandboxNetworkPolicy>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub network_policy_management: Option<NetworkPolicyManagement>,
    /// Whether a SandboxClaim may add environment variables.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub env_vars_injection_policy: Option<InjectionPolicy>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub volume_claim_templates: Vec<VolumeClaimTemplate>,
    /// Whether a SandboxClaim may add or replace volume claims.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub volume_claim_templates_policy: Option<InjectionPolicy>,
    /// Whether the controller makes a Service for each Sandbox.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub service: Option<bool>,
}

/// `spec.podTemplate`: labels and annotations, and a full PodSpec.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct PodTemplate {
    pub metadata: EmbeddedMetadata,
    pub spec: PodSpec,
}

/// The CRD's embedded object metadata (no namespace, uid, ...).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct EmbeddedMetadata {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub labels: BTreeMap<String, String>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub annotations: BTreeMap<String, String>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct SandboxNetworkPolicy {
    /// Empty: nothing may leave (with `Egress` among the policy types the
    /// controller sets).
    pub egress: Vec<NetworkPolicyEgressRule>,
    /// Empty: nothing may come in.
    pub ingress: Vec<NetworkPolicyIngressRule>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum NetworkPolicyManagement {
    Managed,
    Unmanaged,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum InjectionPolicy {
    Allowed,
    Overrides,
    Disallowed,
}

/// One entry of `spec.volumeClaimTemplates`: a PersistentVolumeClaim made
/// per Sandbox, mounted by the name in its metadata.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct VolumeClaimTemplate {
    pub metadata: EmbeddedMetadata,
    pub spec: PersistentVolumeClaimSpec,
}
