//! Resource registration: which `(group, version, plural)` triples the server serves.

use std::fmt;

/// Identifies a resource type: API group (empty for the core group), version and plural name.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Gvr {
    /// API group, `""` for the core group (`/api/v1`).
    pub group: String,
    /// API version, e.g. `v1`.
    pub version: String,
    /// Plural resource name as it appears in URLs, e.g. `secrets`.
    pub plural: String,
}

impl Gvr {
    /// Builds a `Gvr`.
    pub fn new(group: &str, version: &str, plural: &str) -> Self {
        Self {
            group: group.to_string(),
            version: version.to_string(),
            plural: plural.to_string(),
        }
    }

    /// Core v1 `secrets`.
    pub fn secrets() -> Self {
        Self::new("", "v1", "secrets")
    }

    /// Core v1 `namespaces`.
    pub fn namespaces() -> Self {
        Self::new("", "v1", "namespaces")
    }

    /// `coordination.k8s.io/v1` `leases`.
    pub fn leases() -> Self {
        Self::new("coordination.k8s.io", "v1", "leases")
    }

    /// `rbac.authorization.k8s.io/v1` `clusterrolebindings`.
    pub fn cluster_role_bindings() -> Self {
        Self::new("rbac.authorization.k8s.io", "v1", "clusterrolebindings")
    }

    /// `infrastructuremanager.kyma-project.io/v1` `runtimes`.
    pub fn runtimes() -> Self {
        Self::new("infrastructuremanager.kyma-project.io", "v1", "runtimes")
    }

    /// `core.gardener.cloud/v1beta1` `shoots`.
    pub fn shoots() -> Self {
        Self::new("core.gardener.cloud", "v1beta1", "shoots")
    }

    /// `group/version`, or just `version` for the core group.
    pub fn api_version(&self) -> String {
        if self.group.is_empty() {
            self.version.clone()
        } else {
            format!("{}/{}", self.group, self.version)
        }
    }

    /// `plural.group` (or `plural` for the core group), as the apiserver names a resource in
    /// error messages.
    pub fn qualified(&self) -> String {
        if self.group.is_empty() {
            self.plural.clone()
        } else {
            format!("{}.{}", self.plural, self.group)
        }
    }
}

impl fmt::Display for Gvr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.api_version(), self.plural)
    }
}

/// Describes one served resource type.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ResourceInfo {
    /// API group, `""` for the core group.
    pub group: String,
    /// API version.
    pub version: String,
    /// Plural name used in URLs.
    pub plural: String,
    /// `kind` of a single object.
    pub kind: String,
    /// Whether objects live in a namespace.
    pub namespaced: bool,
    /// Whether the resource has a `status` subresource (status/spec separation applies).
    pub status_subresource: bool,
    /// `kind` of list responses, normally `<kind>List`.
    pub list_kind: String,
}

impl ResourceInfo {
    /// A resource without status subresource; `list_kind` is `<kind>List`.
    pub fn new(group: &str, version: &str, plural: &str, kind: &str, namespaced: bool) -> Self {
        Self {
            group: group.to_string(),
            version: version.to_string(),
            plural: plural.to_string(),
            kind: kind.to_string(),
            namespaced,
            status_subresource: false,
            list_kind: format!("{kind}List"),
        }
    }

    /// Enables the `status` subresource.
    #[must_use]
    pub fn with_status(mut self) -> Self {
        self.status_subresource = true;
        self
    }

    /// The `Gvr` of this resource.
    pub fn gvr(&self) -> Gvr {
        Gvr::new(&self.group, &self.version, &self.plural)
    }

    /// `group/version` (or `version` for the core group).
    pub fn api_version(&self) -> String {
        self.gvr().api_version()
    }
}

/// The resources kim's tests need: core v1 secrets, configmaps, namespaces, events;
/// `events.k8s.io/v1` events; `coordination.k8s.io/v1` leases; `rbac.authorization.k8s.io/v1` clusterrolebindings
/// and clusterroles; `infrastructuremanager.kyma-project.io/v1` runtimes and
/// `core.gardener.cloud/v1beta1` shoots (both with a status subresource).
pub fn default_resources() -> Vec<ResourceInfo> {
    vec![
        ResourceInfo::new("", "v1", "secrets", "Secret", true),
        ResourceInfo::new("", "v1", "configmaps", "ConfigMap", true),
        ResourceInfo::new("", "v1", "namespaces", "Namespace", false).with_status(),
        ResourceInfo::new("", "v1", "events", "Event", true),
        ResourceInfo::new("events.k8s.io", "v1", "events", "Event", true),
        ResourceInfo::new("coordination.k8s.io", "v1", "leases", "Lease", true),
        ResourceInfo::new(
            "rbac.authorization.k8s.io",
            "v1",
            "clusterrolebindings",
            "ClusterRoleBinding",
            false,
        ),
        ResourceInfo::new(
            "rbac.authorization.k8s.io",
            "v1",
            "clusterroles",
            "ClusterRole",
            false,
        ),
        ResourceInfo::new(
            "infrastructuremanager.kyma-project.io",
            "v1",
            "runtimes",
            "Runtime",
            true,
        )
        .with_status(),
        ResourceInfo::new("core.gardener.cloud", "v1beta1", "shoots", "Shoot", true).with_status(),
    ]
}
