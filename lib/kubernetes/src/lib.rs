//! `lazaret export kubernetes`: an Agent Profile as Kubernetes manifests.
//!
//! What a profile becomes (docs/kubernetes.md has the whole mapping):
//!
//! - the sandbox: a `RuntimeClass` (handler `runsc`) and, per profile, an
//!   agent-sandbox `SandboxTemplate` whose Pod runs the profile's image
//!   under it, without a service-account token, with the profile's limits
//!   as resources, its `env`, and its `pass_env` as references to one
//!   Secret by name (never values);
//! - the workspace: a volume a trusted init container clones the
//!   repository into, its Git directory a volume of its own, mounted with
//!   `.git/config` read-only and `.git/hooks` an empty read-only volume;
//! - persistent paths: a PersistentVolumeClaim per Sandbox each, seeded
//!   from the image once; shared paths: one claim per profile;
//! - the Network Sidecar: all containers of a Pod share one gVisor kernel
//!   and network stack, so nothing that enforces egress may live in the
//!   agent's Pod. The agent Pod may reach only Lazaret's egress Pod (its
//!   NetworkPolicy, set in the template for the controller to manage, and
//!   as an object of its own); the egress Pod resolves by the profile's
//!   `allow_hosts` and forwards for the sandbox, with the profile's policy
//!   (derived exactly as for the local Network Sidecar) in a ConfigMap,
//!   and is itself fenced by a NetworkPolicy whose `ipBlock`s allow what
//!   the policy's address rules allow ([`fence`]);
//! - Host Escalation: off (no mailbox, no helper); see docs/kubernetes.md.
//!
//! Everything here is pure: the same profile and [`Options`] always give
//! the same bytes (the golden files in `tests/golden/` hold them).

pub mod fence;
pub mod sandbox;
pub mod yaml;

use std::collections::BTreeMap;
use std::net::Ipv4Addr;

use k8s_openapi::api::admissionregistration::v1::{
    MatchResources, NamedRuleWithOperations, ValidatingAdmissionPolicy,
    ValidatingAdmissionPolicyBinding, ValidatingAdmissionPolicyBindingSpec,
    ValidatingAdmissionPolicySpec, Validation,
};
use k8s_openapi::api::apps::v1::{Deployment, DeploymentSpec};
use k8s_openapi::api::core::v1::{
    Capabilities, ConfigMap, ConfigMapVolumeSource, Container, ContainerPort, EmptyDirVolumeSource,
    EnvVar, EnvVarSource, PersistentVolumeClaim, PersistentVolumeClaimSpec,
    PersistentVolumeClaimVolumeSource, PodDNSConfig, PodSpec, PodTemplateSpec,
    ResourceRequirements, SecretKeySelector, SecurityContext, Service, ServicePort, ServiceSpec,
    Volume, VolumeMount, VolumeResourceRequirements,
};
use k8s_openapi::api::networking::v1::{
    IPBlock, NetworkPolicy, NetworkPolicyEgressRule, NetworkPolicyIngressRule, NetworkPolicyPeer,
    NetworkPolicyPort, NetworkPolicySpec,
};
use k8s_openapi::api::node::v1::RuntimeClass;
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use lazaret_config::Profile;
use lazaret_netpolicy::NetworkPlan;
use lazaret_protocol::netpolicy::policy::Policy;
use sandbox::{
    EmbeddedMetadata, InjectionPolicy, NetworkPolicyManagement, PodTemplate, SandboxNetworkPolicy,
    SandboxTemplate, SandboxTemplateSpec, VolumeClaimTemplate,
};
use sha2::{Digest, Sha256};

/// The RuntimeClass every exported Pod runs under.
pub const RUNTIME_CLASS: &str = "lazaret-gvisor";
/// The handler containerd maps to its runsc shim.
pub const HANDLER: &str = "runsc";
/// Where the agent sees its workspace, as in a local sandbox.
pub const WORKSPACE: &str = "/workspace";
/// The egress Service's DNS port, and its forwarding (HTTP CONNECT)
/// proxy's.
pub const DNS_PORT: i32 = 53;
pub const PROXY_PORT: i32 = 3128;
/// The egress container's DNS port: unprivileged, so it needs no
/// capability (the Service maps 53 to it). NetworkPolicies name the Pod's
/// ports, so they say this one.
pub const DNS_POD_PORT: i32 = 5353;
/// Where the egress container reads its policy (the ConfigMap's key).
pub const POLICY_DIR: &str = "/etc/lazaret";
pub const POLICY_KEY: &str = "policy.json";
/// The egress entrypoint in the image `scripts/release` builds.
pub const EGRESS_ENTRYPOINT: &str = "/lazaret-egress";
/// The default egress Service address: one of kubeadm's default Service
/// range (10.96.0.0/12); the Pods' resolver must be an address, and a
/// Service's is known before it exists only when it is chosen.
pub const DEFAULT_EGRESS_IP: Ipv4Addr = Ipv4Addr::new(10, 96, 53, 53);
/// The default image of the trusted init step that clones the workspace.
pub const DEFAULT_GIT_IMAGE: &str = "docker.io/alpine/git:latest";
/// Labels every exported object carries, and those that select Pods.
const LABEL_NAME: &str = "app.kubernetes.io/name";
const LABEL_MANAGED: &str = "app.kubernetes.io/managed-by";
const LABEL_PROFILE: &str = "lazaret.dev/profile";
const LABEL_ROLE: &str = "lazaret.dev/role";
/// The longest profile name that keeps every object name a DNS label.
const MAX_NAME: usize = 40;

/// What the command line adds to the profile.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Options {
    pub profile_name: String,
    /// The repository the trusted init step clones; `None`: the
    /// workspace starts empty.
    pub repo: Option<String>,
    /// What it checks out (a branch, tag or commit); default: the
    /// repository's default branch.
    pub git_ref: Option<String>,
    /// The objects' namespace; `None`: the one `kubectl` applies them in.
    pub namespace: Option<String>,
    /// The agent image; `None`: the profile's `image`.
    pub image: Option<String>,
    pub egress_ip: Ipv4Addr,
    pub egress_image: String,
    pub git_image: String,
}

impl Options {
    /// The defaults for `profile_name`, with the egress image of this
    /// Lazaret version.
    pub fn new(profile_name: &str) -> Self {
        Self {
            profile_name: profile_name.into(),
            repo: None,
            git_ref: None,
            namespace: None,
            image: None,
            egress_ip: DEFAULT_EGRESS_IP,
            egress_image: format!("lazaret-egress:{}", env!("CARGO_PKG_VERSION")),
            git_image: DEFAULT_GIT_IMAGE.into(),
        }
    }
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum ExportError {
    #[error("profile name {name:?} cannot name Kubernetes objects: use lower-case letters, digits and '-', starting with a letter, at most {MAX_NAME} characters")]
    ProfileName { name: String },
    #[error("--ref {git_ref:?} needs --repo: there is no repository to check it out of")]
    RefWithoutRepo { git_ref: String },
    #[error("--namespace {namespace:?} is not a Kubernetes namespace name (lower-case letters, digits and '-', at most 63 characters)")]
    Namespace { namespace: String },
    #[error("--egress-ip {ip} cannot be a Service address (it is unspecified, loopback, link-local or multicast)")]
    EgressIp { ip: Ipv4Addr },
    #[error("the profile's network configuration is refused: {0}; nothing was exported")]
    Network(#[from] lazaret_netpolicy::DeriveError),
    #[error("cannot encode the {kind} {name}: {why}")]
    Encode {
        kind: &'static str,
        name: String,
        why: String,
    },
}

/// One object, as JSON (the form the schema tests validate), with the
/// comment printed above its YAML.
#[derive(Debug, Clone, PartialEq)]
pub struct Manifest {
    pub kind: &'static str,
    pub name: String,
    pub comment: Option<String>,
    pub value: serde_json::Value,
}

/// The manifests of one profile, and what of the profile they leave out.
#[derive(Debug, Clone, PartialEq)]
pub struct Export {
    pub manifests: Vec<Manifest>,
    /// One line each: a setting of the profile that does not map, and
    /// what the cluster does instead.
    pub notes: Vec<String>,
    /// The policy the egress Pod enforces (`None`: `mode = "none"`).
    pub policy: Option<Policy>,
}

impl Export {
    /// Every object as one YAML stream (`---` between documents).
    pub fn to_yaml(&self) -> Result<String, ExportError> {
        let mut out = String::new();
        for m in &self.manifests {
            out.push_str("---\n");
            out.push_str(&m.to_yaml()?);
        }
        Ok(out)
    }

    /// `NN-kind-name.yaml` for each object, in order: `kubectl apply -f
    /// DIR` applies them in that (alphabetical) order.
    pub fn files(&self) -> Result<Vec<(String, String)>, ExportError> {
        self.manifests
            .iter()
            .enumerate()
            .map(|(i, m)| {
                let name = format!("{:02}-{}-{}.yaml", i + 1, m.kind.to_lowercase(), m.name);
                Ok((name, m.to_yaml()?))
            })
            .collect()
    }
}

impl Manifest {
    fn new<T: serde::Serialize>(
        kind: &'static str,
        name: &str,
        comment: Option<String>,
        object: &T,
    ) -> Result<Self, ExportError> {
        let value = serde_json::to_value(object).map_err(|e| ExportError::Encode {
            kind,
            name: name.into(),
            why: e.to_string(),
        })?;
        Ok(Self {
            kind,
            name: name.into(),
            comment,
            value,
        })
    }

    /// This object as one YAML document, its comment first.
    pub fn to_yaml(&self) -> Result<String, ExportError> {
        let body = yaml::to_string(&self.value);
        let mut out = String::new();
        for line in self.comment.iter().flat_map(|c| c.lines()) {
            out.push_str(if line.is_empty() { "#" } else { "# " });
            out.push_str(line);
            out.push('\n');
        }
        out.push_str(&body);
        Ok(out)
    }
}

/// A DNS label (RFC 1123) of at most `max` bytes, starting with a letter.
fn dns_label(s: &str, max: usize) -> bool {
    !s.is_empty()
        && s.len() <= max
        && s.starts_with(|c: char| c.is_ascii_lowercase())
        && !s.ends_with('-')
        && s.bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
}

/// The objects' names, from the profile's.
struct Names {
    profile: String,
    template: String,
    agent_policy: String,
    egress: String,
    env_secret: String,
}

impl Names {
    fn new(profile: &str) -> Self {
        Self {
            profile: profile.into(),
            template: format!("lazaret-{profile}"),
            agent_policy: format!("lazaret-{profile}-agent"),
            egress: format!("lazaret-egress-{profile}"),
            env_secret: format!("lazaret-{profile}-env"),
        }
    }

    fn labels(&self, role: &str) -> BTreeMap<String, String> {
        BTreeMap::from([
            (LABEL_NAME.into(), "lazaret".into()),
            (LABEL_PROFILE.into(), self.profile.clone()),
            (LABEL_ROLE.into(), role.into()),
        ])
    }

    /// The labels that select this profile's Pods of `role`.
    fn selector(&self, role: &str) -> LabelSelector {
        LabelSelector {
            match_labels: Some(BTreeMap::from([
                (LABEL_PROFILE.into(), self.profile.clone()),
                (LABEL_ROLE.into(), role.into()),
            ])),
            ..LabelSelector::default()
        }
    }

    fn meta(&self, name: &str, role: &str, namespace: &Option<String>) -> ObjectMeta {
        let mut labels = self.labels(role);
        labels.insert(LABEL_MANAGED.into(), "lazaret".into());
        ObjectMeta {
            name: Some(name.into()),
            namespace: namespace.clone(),
            labels: Some(labels),
            ..ObjectMeta::default()
        }
    }
}

/// The manifests for `profile` (already loaded and validated, as `lazaret
/// run` loads it).
pub fn export(profile: &Profile, opts: &Options) -> Result<Export, ExportError> {
    if !dns_label(&opts.profile_name, MAX_NAME) {
        return Err(ExportError::ProfileName {
            name: opts.profile_name.clone(),
        });
    }
    if let (None, Some(r)) = (&opts.repo, &opts.git_ref) {
        return Err(ExportError::RefWithoutRepo { git_ref: r.clone() });
    }
    if let Some(ns) = &opts.namespace {
        if !dns_label(ns, 63) {
            return Err(ExportError::Namespace {
                namespace: ns.clone(),
            });
        }
    }
    let ip = opts.egress_ip;
    if ip.is_unspecified() || ip.is_loopback() || ip.is_link_local() || ip.is_multicast() {
        return Err(ExportError::EgressIp { ip });
    }
    // Derived exactly as the coordinator derives a generation's policy,
    // less the host's own addresses: the cluster's nodes are not this
    // machine, and the private ranges already hold theirs.
    let net = &profile.network;
    let binding = format!("kubernetes:{}", opts.profile_name);
    let policy =
        match lazaret_netpolicy::derive(net, &lazaret_netpolicy::options_for(net, &binding)?)? {
            NetworkPlan::None => None,
            NetworkPlan::Policy(p) => Some(p),
        };
    let names = Names::new(&opts.profile_name);
    let mut notes = notes(profile);
    let mut manifests = vec![runtime_class(profile, opts)?];
    manifests.push(template(
        profile,
        opts,
        &names,
        policy.is_some(),
        &mut notes,
    )?);
    manifests.push(agent_network_policy(opts, &names, policy.is_some())?);
    for (i, path) in profile.shared_paths.iter().enumerate() {
        manifests.push(shared_claim(opts, &names, i, path)?);
    }
    if let Some(p) = &policy {
        manifests.extend(egress(p, opts, &names)?);
    }
    manifests.extend(admission_policy()?);
    Ok(Export {
        manifests,
        notes,
        policy,
    })
}

/// The settings of the profile that do not map, each with what the
/// cluster does instead.
fn notes(p: &Profile) -> Vec<String> {
    let mut out = Vec::new();
    if !p.volumes.is_empty() {
        out.push(format!(
            "volumes ({}) are host directories of this machine: not exported; give the template a PersistentVolumeClaim instead",
            p.volumes.len()
        ));
    }
    if !p.ports.is_empty() {
        out.push("ports are published on this machine's loopback: not exported; reach the Sandbox with `kubectl port-forward`".into());
    }
    if !p.escalation.auto_approve.is_empty() || !p.escalation.pass_env.is_empty() {
        out.push("escalation: Host Escalation is off in a cluster (no mailbox, no helper); its rules are not exported".into());
    }
    if p.trust_host_ca {
        out.push(
            "trust_host_ca: this machine's CA bundle is not exported; build it into the image"
                .into(),
        );
    }
    if p.keep_alive.is_some() || p.detach_on_hangup {
        out.push("keep_alive and detach_on_hangup: a Sandbox lives until it is deleted or its shutdownTime (the controller's lifecycle)".into());
    }
    if p.git_identity.from_host && p.git_identity.name.is_none() && p.git_identity.email.is_none() {
        out.push("git_identity.from_host: this machine's Git identity is not exported; set git_identity.name and .email to give the cluster's sessions one".into());
    }
    if p.user.is_some() {
        out.push("user: the image must have the user (Lazaret makes it at each local start); the Pod starts as the image's user".into());
    }
    out.push(format!(
        "limits.processes ({}) has no Pod field: the node's kubelet bounds processes per Pod (podPidsLimit)",
        p.limits.processes
    ));
    out
}

/// `4GiB` as a Kubernetes quantity (`4Gi`); `None`: unlimited.
fn quantity(bytes: Option<u64>) -> Option<Quantity> {
    let b = bytes?;
    for (shift, unit) in [(40, "Ti"), (30, "Gi"), (20, "Mi"), (10, "Ki")] {
        if b != 0 && b & ((1u64 << shift) - 1) == 0 {
            return Some(Quantity(format!("{}{unit}", b >> shift)));
        }
    }
    Some(Quantity(b.to_string()))
}

/// The runsc flags Lazaret's sandboxes run with (`RunscInfo::global_flags`
/// in lazaret-helpers), as the node's runsc.toml, with what changes.
fn runsc_toml(profile: &Profile) -> String {
    let suid = if profile.user.is_some() {
        "allow-suid = \"true\"   # `user` profiles: sudo inside (gVisor 2025 and later)"
    } else {
        "# allow-suid = \"true\" # only for profiles with `user` (sudo inside)"
    };
    format!(
        "The node side of this RuntimeClass: containerd's runsc shim, with\n\
         /etc/containerd/config.toml naming the runtime and its options file:\n\
         \n\
         [plugins.\"io.containerd.cri.v1.runtime\".containerd.runtimes.runsc]\n\
         \x20 runtime_type = \"io.containerd.runsc.v1\"\n\
         [plugins.\"io.containerd.cri.v1.runtime\".containerd.runtimes.runsc.options]\n\
         \x20 TypeUrl = \"io.containerd.runsc.v1.options\"\n\
         \x20 ConfigPath = \"/etc/containerd/runsc.toml\"\n\
         \n\
         /etc/containerd/runsc.toml, the flags Lazaret runs runsc with:\n\
         \n\
         [runsc_config]\n\
         \x20 platform = \"systrap\"               # never kvm: it hangs without VMX\n\
         \x20 file-access-mounts = \"shared\"      # volumes stay coherent with the node\n\
         \x20 dcache = \"{dcache}\"                 # bounded dentry cache\n\
         \x20 directfs = \"true\"\n\
         \x20 {suid}\n\
         \x20 # allow-flag-override stays unset (false): Pods cannot change these\n\
         \x20 # with dev.gvisor.flag.* annotations (refused by admission below too).\n\
         \n\
         Not carried over: --ignore-cgroups (the kubelet's cgroups bound the\n\
         Pod), --overlay2=none (the root file system's writes stay in the\n\
         container, gVisor's default), --network=sandbox/none (the Pod's\n\
         network is the CNI's; egress is fenced by NetworkPolicy).",
        dcache = lazaret_helpers::runsc::DCACHE_SIZE,
    )
}

fn runtime_class(profile: &Profile, _opts: &Options) -> Result<Manifest, ExportError> {
    let names = Names::new("all");
    let mut meta = names.meta(RUNTIME_CLASS, "runtime", &None);
    // Cluster-scoped: one for every profile.
    if let Some(l) = meta.labels.as_mut() {
        l.remove(LABEL_PROFILE);
    }
    let rc = RuntimeClass {
        metadata: meta,
        handler: HANDLER.into(),
        ..RuntimeClass::default()
    };
    Manifest::new(
        "RuntimeClass",
        RUNTIME_CLASS,
        Some(runsc_toml(profile)),
        &rc,
    )
}

fn mount(name: &str, path: &str, read_only: bool, sub_path: Option<&str>) -> VolumeMount {
    VolumeMount {
        name: name.into(),
        mount_path: path.into(),
        read_only: read_only.then_some(true),
        sub_path: sub_path.map(Into::into),
        ..VolumeMount::default()
    }
}

fn empty_dir(name: &str, size: Option<Quantity>) -> Volume {
    Volume {
        name: name.into(),
        empty_dir: Some(EmptyDirVolumeSource {
            size_limit: size,
            ..EmptyDirVolumeSource::default()
        }),
        ..Volume::default()
    }
}

fn env(name: &str, value: &str) -> EnvVar {
    EnvVar {
        name: name.into(),
        value: Some(value.into()),
        ..EnvVar::default()
    }
}

/// Single-quoted for sh.
fn sh_quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', "'\\''"))
}

/// The trusted init step: clones the repository with its Git directory
/// apart (a volume of its own), hooks emptied. It runs before the agent
/// and shares nothing with it but the two volumes.
fn clone_container(opts: &Options, repo: &str) -> Container {
    let script = "set -eu\n\
        git clone --no-checkout -- \"$LAZARET_REPO\" /tmp/clone\n\
        cp -a /tmp/clone/.git/. /lazaret/git/\n\
        rm -rf /tmp/clone\n\
        export GIT_DIR=/lazaret/git GIT_WORK_TREE=/workspace\n\
        if [ -n \"${LAZARET_REF:-}\" ]; then\n\
        \x20 git fetch --quiet origin \"$LAZARET_REF\"\n\
        \x20 git checkout --quiet --detach FETCH_HEAD\n\
        else\n\
        \x20 git checkout --quiet\n\
        fi\n\
        # The agent's Git runs no hook of the repository's, and cannot add one.\n\
        rm -rf /lazaret/git/hooks\n\
        mkdir /lazaret/git/hooks\n";
    let mut env_vars = vec![env("LAZARET_REPO", repo)];
    if let Some(r) = &opts.git_ref {
        env_vars.push(env("LAZARET_REF", r));
    }
    Container {
        name: "workspace".into(),
        image: Some(opts.git_image.clone()),
        command: Some(vec!["/bin/sh".into(), "-c".into(), script.into()]),
        env: Some(env_vars),
        volume_mounts: Some(vec![
            mount("workspace", WORKSPACE, false, None),
            mount("git-dir", "/lazaret/git", false, None),
        ]),
        security_context: Some(SecurityContext {
            allow_privilege_escalation: Some(false),
            ..SecurityContext::default()
        }),
        ..Container::default()
    }
}

/// Seeds each persistent path's claim from the image, once: an empty
/// volume over `/usr` would hide the image's.
fn seed_container(image: &str, paths: &[String]) -> Container {
    let mut script = String::from("set -eu\n");
    for (i, p) in paths.iter().enumerate() {
        let q = sh_quote(p);
        script.push_str(&format!(
            "if [ ! -e /lazaret/persist/{i}/.lazaret-seeded ]; then\n\
             \x20 if [ -d {q} ]; then cp -a {q}/. /lazaret/persist/{i}/; fi\n\
             \x20 touch /lazaret/persist/{i}/.lazaret-seeded\n\
             fi\n"
        ));
    }
    Container {
        name: "persistent-paths".into(),
        image: Some(image.into()),
        command: Some(vec!["/bin/sh".into(), "-c".into(), script]),
        volume_mounts: Some(
            (0..paths.len())
                .map(|i| {
                    mount(
                        &format!("persist-{i}"),
                        &format!("/lazaret/persist/{i}"),
                        false,
                        None,
                    )
                })
                .collect(),
        ),
        ..Container::default()
    }
}

fn egress_peer(names: &Names) -> NetworkPolicyPeer {
    NetworkPolicyPeer {
        pod_selector: Some(names.selector("egress")),
        ..NetworkPolicyPeer::default()
    }
}

fn port(protocol: &str, number: i32) -> NetworkPolicyPort {
    NetworkPolicyPort {
        protocol: Some(protocol.into()),
        port: Some(IntOrString::Int(number)),
        ..NetworkPolicyPort::default()
    }
}

fn dns_ports(number: i32) -> Vec<NetworkPolicyPort> {
    vec![port("UDP", number), port("TCP", number)]
}

/// The agent Pod's egress: the egress Pod's resolver and proxy, nothing
/// else (none at all with `mode = "none"`).
fn agent_egress(names: &Names, networked: bool) -> Vec<NetworkPolicyEgressRule> {
    if !networked {
        return Vec::new();
    }
    let mut ports = dns_ports(DNS_POD_PORT);
    ports.push(port("TCP", PROXY_PORT));
    vec![NetworkPolicyEgressRule {
        to: Some(vec![egress_peer(names)]),
        ports: Some(ports),
    }]
}

fn template(
    profile: &Profile,
    opts: &Options,
    names: &Names,
    networked: bool,
    notes: &mut Vec<String>,
) -> Result<Manifest, ExportError> {
    let image = agent_image(profile, opts, notes);
    let env_vars = agent_env(profile, opts, names, networked);
    let storage = agent_storage(profile, opts, names, &image, notes);
    let agent = agent_container(profile, image, env_vars, storage.mounts);
    let spec = PodSpec {
        runtime_class_name: Some(RUNTIME_CLASS.into()),
        automount_service_account_token: Some(false),
        enable_service_links: Some(false),
        dns_policy: Some("None".into()),
        dns_config: Some(PodDNSConfig {
            // The egress Pod's filtering resolver; with no network, an
            // address nothing answers on.
            nameservers: Some(vec![if networked {
                opts.egress_ip.to_string()
            } else {
                "127.0.0.1".into()
            }]),
            ..PodDNSConfig::default()
        }),
        init_containers: (!storage.init.is_empty()).then_some(storage.init),
        containers: vec![agent],
        volumes: Some(storage.volumes),
        ..PodSpec::default()
    };
    let mut labels = names.labels("agent");
    labels.insert(LABEL_MANAGED.into(), "lazaret".into());
    let pod_template = PodTemplate {
        metadata: EmbeddedMetadata {
            name: None,
            labels,
            annotations: BTreeMap::from([("lazaret.dev/host-escalation".into(), "off".into())]),
        },
        spec,
    };
    let t = SandboxTemplate::new(
        names.meta(&names.template, "agent", &opts.namespace),
        SandboxTemplateSpec {
            pod_template,
            network_policy: Some(SandboxNetworkPolicy {
                egress: agent_egress(names, networked),
                ingress: Vec::new(),
            }),
            network_policy_management: Some(NetworkPolicyManagement::Managed),
            env_vars_injection_policy: Some(InjectionPolicy::Disallowed),
            volume_claim_templates: storage.claims,
            volume_claim_templates_policy: Some(InjectionPolicy::Disallowed),
            service: Some(false),
        },
    );
    let comment = template_comment(profile, names);
    Manifest::new("SandboxTemplate", &names.template, Some(comment), &t)
}

/// The agent's image reference, with a note when it names this machine's
/// store.
fn agent_image(profile: &Profile, opts: &Options, notes: &mut Vec<String>) -> String {
    // `docker://REGISTRY/NAME:TAG` is the one kind of reference a
    // cluster pulls as it is; the others name this machine's store.
    let image = opts.image.clone().unwrap_or_else(|| {
        let i = &profile.image;
        i.strip_prefix("docker://").unwrap_or(i).to_string()
    });
    let local_store = [
        "local:",
        "lazaret:",
        "oci:",
        "oci-archive:",
        "docker-archive:",
        "containers-storage:",
    ];
    if opts.image.is_none() && local_store.iter().any(|p| image.starts_with(p)) {
        notes.push(format!(
            "image {image:?} is in this machine's Lazaret image store: push it to a registry the cluster pulls from and pass --image"
        ));
    }
    image
}

/// The agent's environment: the profile's `env`, its `pass_env` from the
/// Secret by name, the Git identity, and (networked) the proxy.
fn agent_env(profile: &Profile, opts: &Options, names: &Names, networked: bool) -> Vec<EnvVar> {
    let mut env_vars: Vec<EnvVar> = profile.env.iter().map(|(k, v)| env(k, v)).collect();
    for name in &profile.pass_env {
        env_vars.push(EnvVar {
            name: name.clone(),
            value_from: Some(EnvVarSource {
                secret_key_ref: Some(SecretKeySelector {
                    name: names.env_secret.clone(),
                    key: name.clone(),
                    optional: Some(false),
                }),
                ..EnvVarSource::default()
            }),
            ..EnvVar::default()
        });
    }
    let gi = &profile.git_identity;
    for (who, value) in [("NAME", &gi.name), ("EMAIL", &gi.email)] {
        if let Some(v) = value {
            env_vars.push(env(&format!("GIT_AUTHOR_{who}"), v));
            env_vars.push(env(&format!("GIT_COMMITTER_{who}"), v));
        }
    }
    if networked {
        // Advisory: the agent could ignore it, but the fence leaves it
        // nowhere else to go.
        let proxy = format!("http://{}:{PROXY_PORT}", opts.egress_ip);
        for k in ["HTTPS_PROXY", "HTTP_PROXY", "https_proxy", "http_proxy"] {
            env_vars.push(env(k, &proxy));
        }
    }
    env_vars
}

/// The agent Pod's storage: its volumes, the agent's mounts (sorted), the
/// init containers that fill them, and the per-Sandbox claims.
struct Storage {
    volumes: Vec<Volume>,
    mounts: Vec<VolumeMount>,
    init: Vec<Container>,
    claims: Vec<VolumeClaimTemplate>,
}

fn agent_storage(
    profile: &Profile,
    opts: &Options,
    names: &Names,
    image: &str,
    notes: &mut Vec<String>,
) -> Storage {
    let mut s = Storage {
        volumes: vec![empty_dir(
            "workspace",
            quantity(profile.limits.ignored_state_bytes()),
        )],
        mounts: vec![mount("workspace", WORKSPACE, false, None)],
        init: Vec::new(),
        claims: Vec::new(),
    };
    if let Some(repo) = &opts.repo {
        s.volumes.push(empty_dir("git-dir", None));
        s.volumes
            .push(empty_dir("git-hooks", Some(Quantity("1Mi".into()))));
        s.mounts
            .push(mount("git-dir", "/workspace/.git", false, None));
        s.mounts.push(mount(
            "git-dir",
            "/workspace/.git/config",
            true,
            Some("config"),
        ));
        s.mounts
            .push(mount("git-hooks", "/workspace/.git/hooks", true, None));
        s.init.push(clone_container(opts, repo));
    } else {
        notes.push("no --repo: the workspace starts empty".into());
    }
    for p in &profile.protected_paths {
        let rel = p.trim_start_matches("./").trim_end_matches('/');
        s.mounts.push(mount(
            "workspace",
            &format!("{WORKSPACE}/{rel}"),
            true,
            Some(rel),
        ));
    }
    persistent_storage(profile, image, &mut s);
    for (i, p) in profile.shared_paths.iter().enumerate() {
        let name = format!("shared-{i}");
        s.volumes.push(Volume {
            name: name.clone(),
            persistent_volume_claim: Some(PersistentVolumeClaimVolumeSource {
                claim_name: format!("{}-shared-{i}", names.template),
                read_only: None,
            }),
            ..Volume::default()
        });
        s.mounts.push(mount(&name, p, false, None));
    }
    // Nested mounts after their parents (`/root` before `/root/.codex`).
    s.mounts.sort_by(|a, b| a.mount_path.cmp(&b.mount_path));
    s
}

/// The persistent paths: a claim per Sandbox each, seeded from the image
/// by one init container.
fn persistent_storage(profile: &Profile, image: &str, s: &mut Storage) {
    let anchor = quantity(profile.limits.anchor_bytes()).unwrap_or(Quantity("8Gi".into()));
    for (i, p) in profile.persistent_paths.iter().enumerate() {
        let name = format!("persist-{i}");
        s.claims.push(VolumeClaimTemplate {
            metadata: EmbeddedMetadata {
                name: Some(name.clone()),
                annotations: BTreeMap::from([("lazaret.dev/path".into(), p.clone())]),
                ..EmbeddedMetadata::default()
            },
            spec: PersistentVolumeClaimSpec {
                access_modes: Some(vec!["ReadWriteOnce".into()]),
                resources: Some(VolumeResourceRequirements {
                    requests: Some(BTreeMap::from([("storage".into(), anchor.clone())])),
                    ..VolumeResourceRequirements::default()
                }),
                ..PersistentVolumeClaimSpec::default()
            },
        });
        s.mounts.push(mount(&name, p, false, None));
    }
    if !profile.persistent_paths.is_empty() {
        s.init
            .push(seed_container(image, &profile.persistent_paths));
    }
}

fn agent_container(
    profile: &Profile,
    image: String,
    env_vars: Vec<EnvVar>,
    mounts: Vec<VolumeMount>,
) -> Container {
    let memory = quantity(profile.limits.memory_bytes());
    let resources = memory.map(|m| ResourceRequirements {
        limits: Some(BTreeMap::from([("memory".into(), m.clone())])),
        requests: Some(BTreeMap::from([("memory".into(), m)])),
        ..ResourceRequirements::default()
    });
    Container {
        name: "agent".into(),
        image: Some(image),
        working_dir: Some(WORKSPACE.into()),
        env: Some(env_vars),
        resources,
        volume_mounts: Some(mounts),
        stdin: Some(true),
        tty: Some(true),
        security_context: Some(SecurityContext {
            // sudo, for a profile's `user`, is set-user-ID.
            allow_privilege_escalation: Some(profile.user.is_some()),
            capabilities: Some(Capabilities {
                drop: Some(vec!["NET_RAW".into()]),
                ..Capabilities::default()
            }),
            ..SecurityContext::default()
        }),
        ..Container::default()
    }
}

fn template_comment(profile: &Profile, names: &Names) -> String {
    format!(
        "Profile {:?} as an agent-sandbox template. Claim a Sandbox of it with a\n\
         SandboxClaim (spec.sandboxTemplateRef.name: {}).{}\n\
         Host Escalation: off (annotation lazaret.dev/host-escalation).",
        names.profile,
        names.template,
        if profile.pass_env.is_empty() {
            String::new()
        } else {
            format!(
                "\npass_env comes from the Secret {} (never in these files):\n\
                 \x20 kubectl create secret generic {} {}",
                names.env_secret,
                names.env_secret,
                profile
                    .pass_env
                    .iter()
                    .map(|k| format!("--from-literal={k}=..."))
                    .collect::<Vec<_>>()
                    .join(" ")
            )
        }
    )
}

fn agent_network_policy(
    opts: &Options,
    names: &Names,
    networked: bool,
) -> Result<Manifest, ExportError> {
    let np = NetworkPolicy {
        metadata: names.meta(&names.agent_policy, "agent", &opts.namespace),
        spec: Some(NetworkPolicySpec {
            pod_selector: Some(names.selector("agent")),
            policy_types: Some(vec!["Ingress".into(), "Egress".into()]),
            ingress: Some(Vec::new()),
            egress: Some(agent_egress(names, networked)),
        }),
    };
    Manifest::new(
        "NetworkPolicy",
        &names.agent_policy,
        Some("The agent Pod reaches Lazaret's egress Pod (its resolver and proxy) and\nnothing else; nothing reaches it. The template asks the controller for\nthe same policy; this one holds whatever the controller does.".into()),
        &np,
    )
}

fn shared_claim(
    opts: &Options,
    names: &Names,
    i: usize,
    path: &str,
) -> Result<Manifest, ExportError> {
    let name = format!("{}-shared-{i}", names.template);
    let mut meta = names.meta(&name, "agent", &opts.namespace);
    meta.annotations = Some(BTreeMap::from([("lazaret.dev/path".into(), path.into())]));
    let pvc = PersistentVolumeClaim {
        metadata: meta,
        spec: Some(PersistentVolumeClaimSpec {
            access_modes: Some(vec!["ReadWriteMany".into()]),
            resources: Some(VolumeResourceRequirements {
                requests: Some(BTreeMap::from([("storage".into(), Quantity("1Gi".into()))])),
                ..VolumeResourceRequirements::default()
            }),
            ..PersistentVolumeClaimSpec::default()
        }),
        ..PersistentVolumeClaim::default()
    };
    Manifest::new(
        "PersistentVolumeClaim",
        &name,
        Some(format!(
            "Shared path {path}: one volume every Sandbox of the profile mounts\n\
             (ReadWriteMany), as one host directory is locally."
        )),
        &pvc,
    )
}

/// The policy as the egress Pod reads it: JSON, one object.
pub fn policy_json(policy: &Policy) -> Result<String, serde_json::Error> {
    let mut s = serde_json::to_string_pretty(policy)?;
    s.push('\n');
    Ok(s)
}

/// Whether the egress Pod's resolver forwards to the cluster's own DNS:
/// locally, to slirp's forwarder (the host's resolver).
fn upstream_is_cluster_dns(policy: &Policy) -> bool {
    match &policy.hosts {
        Some(h) => h.upstream == [policy.link.dns],
        None => policy.resolvers == [policy.link.dns],
    }
}

fn egress(policy: &Policy, opts: &Options, names: &Names) -> Result<Vec<Manifest>, ExportError> {
    let json = policy_json(policy).map_err(|e| ExportError::Encode {
        kind: "ConfigMap",
        name: names.egress.clone(),
        why: e.to_string(),
    })?;
    let cluster_dns = upstream_is_cluster_dns(policy);
    let upstream_list = match &policy.hosts {
        Some(h) => h.upstream.clone(),
        None => policy.resolvers.clone(),
    };
    let digest = hex_sha256(json.as_bytes());
    let cm = ConfigMap {
        metadata: names.meta(&names.egress, "egress", &opts.namespace),
        data: Some(BTreeMap::from([(POLICY_KEY.into(), json)])),
        ..ConfigMap::default()
    };
    let upstream = Upstream {
        cluster_dns,
        list: &upstream_list,
    };
    let container = egress_container(opts, &digest);
    let deployment = egress_deployment(opts, names, container, digest, &upstream);
    let service = egress_service(opts, names);
    let fence = egress_fence(policy, opts, names, &upstream);
    let allow_hosts = match &policy.hosts {
        Some(h) => format!("allow_hosts: {}", h.allow.join(", ")),
        None => "no allow_hosts: every name resolves".into(),
    };
    Ok(vec![
        Manifest::new(
            "ConfigMap",
            &names.egress,
            Some(format!(
                "The Network Sidecar's policy for profile {:?}, derived as the local one\n\
                 is ({allow_hosts}); the egress Pod reads it.",
                names.profile
            )),
            &cm,
        )?,
        Manifest::new(
            "Deployment",
            &names.egress,
            Some("Lazaret's egress Pod: the filtering resolver (NXDOMAIN for names the\npolicy does not allow) and a forwarding proxy that connects only to\nallowed names at allowed addresses. It must not run in the agent's Pod:\nall containers of a Pod share one gVisor kernel and network stack.".into()),
            &deployment,
        )?,
        Manifest::new(
            "Service",
            &names.egress,
            Some(format!(
                "The agent Pods' resolver and proxy address ({}, --egress-ip): a free\n\
                 address of the cluster's Service range.",
                opts.egress_ip
            )),
            &service,
        )?,
        Manifest::new(
            "NetworkPolicy",
            &names.egress,
            Some("The egress Pod's fence: agent Pods in; out, the policy's allowed\naddresses (each ipBlock minus its denied ranges) and its resolvers.".into()),
            &fence,
        )?,
    ])
}

/// Where the egress Pod's resolver forwards: the cluster's DNS, or the
/// listed addresses (the profile's `dns`).
struct Upstream<'a> {
    cluster_dns: bool,
    list: &'a [Ipv4Addr],
}

/// The egress container: the resolver and proxy, reading the policy
/// from the ConfigMap, unprivileged and read-only.
fn egress_container(opts: &Options, digest: &str) -> Container {
    Container {
        name: "egress".into(),
        image: Some(opts.egress_image.clone()),
        command: Some(vec![EGRESS_ENTRYPOINT.into()]),
        args: Some(vec![
            "--policy".into(),
            format!("{POLICY_DIR}/{POLICY_KEY}"),
            "--digest".into(),
            digest.to_string(),
            "--dns".into(),
            format!("0.0.0.0:{DNS_POD_PORT}"),
        ]),
        ports: Some(vec![
            ContainerPort {
                name: Some("dns-udp".into()),
                container_port: DNS_POD_PORT,
                protocol: Some("UDP".into()),
                ..ContainerPort::default()
            },
            ContainerPort {
                name: Some("dns-tcp".into()),
                container_port: DNS_POD_PORT,
                protocol: Some("TCP".into()),
                ..ContainerPort::default()
            },
            ContainerPort {
                name: Some("proxy".into()),
                container_port: PROXY_PORT,
                protocol: Some("TCP".into()),
                ..ContainerPort::default()
            },
        ]),
        volume_mounts: Some(vec![mount("policy", POLICY_DIR, true, None)]),
        resources: Some(ResourceRequirements {
            limits: Some(BTreeMap::from([
                ("cpu".into(), Quantity("1".into())),
                ("memory".into(), Quantity("256Mi".into())),
            ])),
            requests: Some(BTreeMap::from([
                ("cpu".into(), Quantity("50m".into())),
                ("memory".into(), Quantity("64Mi".into())),
            ])),
            ..ResourceRequirements::default()
        }),
        security_context: Some(SecurityContext {
            run_as_non_root: Some(true),
            run_as_user: Some(65532),
            run_as_group: Some(65532),
            read_only_root_filesystem: Some(true),
            allow_privilege_escalation: Some(false),
            capabilities: Some(Capabilities {
                drop: Some(vec!["ALL".into()]),
                add: None,
            }),
            ..SecurityContext::default()
        }),
        ..Container::default()
    }
}

fn egress_deployment(
    opts: &Options,
    names: &Names,
    container: Container,
    digest: String,
    upstream: &Upstream,
) -> Deployment {
    let cluster_dns = upstream.cluster_dns;
    Deployment {
        metadata: names.meta(&names.egress, "egress", &opts.namespace),
        spec: DeploymentSpec {
            replicas: Some(1),
            selector: names.selector("egress"),
            template: PodTemplateSpec {
                metadata: Some(ObjectMeta {
                    labels: Some(names.labels("egress")),
                    // A changed policy rolls the Pod.
                    annotations: Some(BTreeMap::from([(
                        "lazaret.dev/policy-digest".into(),
                        digest,
                    )])),
                    ..ObjectMeta::default()
                }),
                spec: Some(PodSpec {
                    // Trusted, and sandboxed all the same: a resolver or
                    // proxy bug is then inside gVisor too.
                    runtime_class_name: Some(RUNTIME_CLASS.into()),
                    automount_service_account_token: Some(false),
                    enable_service_links: Some(false),
                    // Its resolver and proxy look names up as the local
                    // filter does: with the profile's `dns`, or the
                    // cluster's (the host's resolver, locally).
                    dns_policy: (!cluster_dns).then(|| "None".into()),
                    dns_config: (!cluster_dns).then(|| PodDNSConfig {
                        nameservers: Some(upstream.list.iter().map(|a| a.to_string()).collect()),
                        ..PodDNSConfig::default()
                    }),
                    containers: vec![container],
                    volumes: Some(vec![Volume {
                        name: "policy".into(),
                        config_map: Some(ConfigMapVolumeSource {
                            name: names.egress.clone(),
                            ..ConfigMapVolumeSource::default()
                        }),
                        ..Volume::default()
                    }]),
                    ..PodSpec::default()
                }),
            },
            ..DeploymentSpec::default()
        },
        ..Deployment::default()
    }
}

fn egress_service(opts: &Options, names: &Names) -> Service {
    Service {
        metadata: names.meta(&names.egress, "egress", &opts.namespace),
        spec: Some(ServiceSpec {
            cluster_ip: Some(opts.egress_ip.to_string()),
            selector: names.selector("egress").match_labels,
            ports: Some(vec![
                ServicePort {
                    name: Some("dns-udp".into()),
                    port: DNS_PORT,
                    target_port: Some(IntOrString::Int(DNS_POD_PORT)),
                    protocol: Some("UDP".into()),
                    ..ServicePort::default()
                },
                ServicePort {
                    name: Some("dns-tcp".into()),
                    port: DNS_PORT,
                    target_port: Some(IntOrString::Int(DNS_POD_PORT)),
                    protocol: Some("TCP".into()),
                    ..ServicePort::default()
                },
                ServicePort {
                    name: Some("proxy".into()),
                    port: PROXY_PORT,
                    protocol: Some("TCP".into()),
                    ..ServicePort::default()
                },
            ]),
            ..ServiceSpec::default()
        }),
        ..Service::default()
    }
}

/// The egress Pod's own fence: only the agent Pods come in; out, what
/// the policy's address rules allow, and its resolvers on port 53.
fn egress_fence(
    policy: &Policy,
    opts: &Options,
    names: &Names,
    upstream: &Upstream,
) -> NetworkPolicy {
    let mut out_rules = Vec::new();
    let blocks = fence::blocks(policy);
    if !blocks.is_empty() {
        out_rules.push(NetworkPolicyEgressRule {
            to: Some(
                blocks
                    .iter()
                    .map(|b| NetworkPolicyPeer {
                        ip_block: Some(IPBlock {
                            cidr: b.cidr.to_string(),
                            except: (!b.except.is_empty())
                                .then(|| b.except.iter().map(|e| e.to_string()).collect()),
                        }),
                        ..NetworkPolicyPeer::default()
                    })
                    .collect(),
            ),
            ports: None,
        });
    }
    out_rules.push(NetworkPolicyEgressRule {
        to: Some(upstream_peers(upstream)),
        ports: Some(dns_ports(DNS_PORT)),
    });
    let mut in_ports = dns_ports(DNS_POD_PORT);
    in_ports.push(port("TCP", PROXY_PORT));
    NetworkPolicy {
        metadata: names.meta(&names.egress, "egress", &opts.namespace),
        spec: Some(NetworkPolicySpec {
            pod_selector: Some(names.selector("egress")),
            policy_types: Some(vec!["Ingress".into(), "Egress".into()]),
            ingress: Some(vec![NetworkPolicyIngressRule {
                from: Some(vec![NetworkPolicyPeer {
                    pod_selector: Some(names.selector("agent")),
                    ..NetworkPolicyPeer::default()
                }]),
                ports: Some(in_ports),
            }]),
            egress: Some(out_rules),
        }),
    }
}

/// The egress Pod's resolvers as peers: the cluster's DNS Pods, or a /32
/// per listed address.
fn upstream_peers(upstream: &Upstream) -> Vec<NetworkPolicyPeer> {
    if upstream.cluster_dns {
        vec![NetworkPolicyPeer {
            namespace_selector: Some(LabelSelector {
                match_labels: Some(BTreeMap::from([(
                    "kubernetes.io/metadata.name".into(),
                    "kube-system".into(),
                )])),
                ..LabelSelector::default()
            }),
            pod_selector: Some(LabelSelector {
                match_labels: Some(BTreeMap::from([("k8s-app".into(), "kube-dns".into())])),
                ..LabelSelector::default()
            }),
            ..NetworkPolicyPeer::default()
        }]
    } else {
        upstream
            .list
            .iter()
            .map(|a| NetworkPolicyPeer {
                ip_block: Some(IPBlock {
                    cidr: format!("{a}/32"),
                    except: None,
                }),
                ..NetworkPolicyPeer::default()
            })
            .collect()
    }
}

/// The admission policy that refuses Pods asking runsc for other flags
/// (`dev.gvisor.flag.*`, `host-uds` among them) or other gVisor
/// annotations: the node's runsc.toml is the whole configuration.
fn admission_policy() -> Result<Vec<Manifest>, ExportError> {
    const NAME: &str = "lazaret-forbid-gvisor-annotations";
    let meta = |name: &str| ObjectMeta {
        name: Some(name.into()),
        labels: Some(BTreeMap::from([
            (LABEL_NAME.into(), "lazaret".into()),
            (LABEL_MANAGED.into(), "lazaret".into()),
        ])),
        ..ObjectMeta::default()
    };
    let vap = ValidatingAdmissionPolicy {
        metadata: meta(NAME),
        spec: Some(ValidatingAdmissionPolicySpec {
            failure_policy: Some("Fail".into()),
            match_constraints: Some(MatchResources {
                resource_rules: Some(vec![NamedRuleWithOperations {
                    api_groups: Some(vec!["".into()]),
                    api_versions: Some(vec!["v1".into()]),
                    operations: Some(vec!["CREATE".into(), "UPDATE".into()]),
                    resources: Some(vec!["pods".into()]),
                    ..NamedRuleWithOperations::default()
                }]),
                ..MatchResources::default()
            }),
            validations: Some(vec![Validation {
                expression: "!has(object.metadata.annotations) || object.metadata.annotations.all(k, !k.startsWith('dev.gvisor.'))".into(),
                message: Some("dev.gvisor.* annotations change how runsc runs the Pod (flags such as host-uds, mounts); they are refused: the node's runsc.toml decides".into()),
                ..Validation::default()
            }]),
            ..ValidatingAdmissionPolicySpec::default()
        }),
        ..ValidatingAdmissionPolicy::default()
    };
    let binding = ValidatingAdmissionPolicyBinding {
        metadata: meta(NAME),
        spec: ValidatingAdmissionPolicyBindingSpec {
            policy_name: NAME.into(),
            validation_actions: vec!["Deny".into()],
            ..ValidatingAdmissionPolicyBindingSpec::default()
        },
    };
    Ok(vec![
        Manifest::new(
            "ValidatingAdmissionPolicy",
            NAME,
            Some("Cluster-wide, one for every profile: no Pod may carry dev.gvisor.*\nannotations (dev.gvisor.flag.host-uds would open host sockets to it).".into()),
            &vap,
        )?,
        Manifest::new("ValidatingAdmissionPolicyBinding", NAME, None, &binding)?,
    ])
}

fn hex_sha256(bytes: &[u8]) -> String {
    hex::encode(Sha256::digest(bytes))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn template_of(e: &Export) -> &serde_json::Value {
        &e.manifests
            .iter()
            .find(|m| m.kind == "SandboxTemplate")
            .unwrap()
            .value
    }

    #[test]
    fn quantities_are_binary_units() {
        assert_eq!(quantity(Some(4 << 30)), Some(Quantity("4Gi".into())));
        assert_eq!(quantity(Some(1536 << 20)), Some(Quantity("1536Mi".into())));
        assert_eq!(quantity(Some(1000)), Some(Quantity("1000".into())));
        assert_eq!(quantity(None), None);
    }

    #[test]
    fn registry_images_are_pulled_as_they_are_and_local_ones_noted() {
        let p = Profile {
            image: "docker://ghcr.io/team/agent:1".into(),
            ..Profile::default()
        };
        let e = export(&p, &Options::new("p")).unwrap();
        let c = &template_of(&e)["spec"]["podTemplate"]["spec"]["containers"][0];
        assert_eq!(c["image"], "ghcr.io/team/agent:1");
        assert!(!e.notes.iter().any(|n| n.contains("image store")));
        let e = export(&Profile::default(), &Options::new("p")).unwrap();
        assert!(e.notes.iter().any(|n| n.contains("\"lazaret:default\"")));
        let mut o = Options::new("p");
        o.image = Some("registry.example.com/a:b".into());
        let e = export(&Profile::default(), &o).unwrap();
        let c = &template_of(&e)["spec"]["podTemplate"]["spec"]["containers"][0];
        assert_eq!(c["image"], "registry.example.com/a:b");
    }

    #[test]
    fn what_does_not_map_is_said() {
        let p = Profile {
            ports: vec!["8080:80".into()],
            trust_host_ca: true,
            escalation: lazaret_config::Escalation {
                pass_env: vec!["SSH_AUTH_SOCK".into()],
                ..Default::default()
            },
            ..Profile::default()
        };
        let notes = export(&p, &Options::new("p")).unwrap().notes.join("\n");
        for word in [
            "ports",
            "trust_host_ca",
            "Host Escalation is off",
            "processes",
        ] {
            assert!(notes.contains(word), "{word}: {notes}");
        }
    }

    #[test]
    fn no_secret_value_and_no_token_reach_the_manifests() {
        let p = Profile {
            pass_env: vec!["OPENAI_API_KEY".into()],
            ..Profile::default()
        };
        let e = export(&p, &Options::new("p")).unwrap();
        let t = template_of(&e);
        let spec = &t["spec"]["podTemplate"]["spec"];
        assert_eq!(spec["automountServiceAccountToken"], false);
        let env = spec["containers"][0]["env"].as_array().unwrap();
        let key = env.iter().find(|v| v["name"] == "OPENAI_API_KEY").unwrap();
        assert!(key.get("value").is_none());
        assert_eq!(key["valueFrom"]["secretKeyRef"]["name"], "lazaret-p-env");
        assert!(!e.manifests.iter().any(|m| m.kind == "Secret"));
        for m in &e.manifests {
            if let Some(s) = m.value.pointer("/spec/template/spec") {
                assert_eq!(s["automountServiceAccountToken"], false, "{}", m.name);
            }
        }
    }
}
