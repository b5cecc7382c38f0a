//! The built-in Runtime status model as data: states, transitions, condition types, reasons,
//! default messages and the per-state requirements.
//!
//! Source of every row: docs/status-model.md (§2 condition types and reasons, §3 state
//! transitions, §4 invariants). Nothing else in the crate spells out a state, a reason or an edge:
//! the webhook, the reconciler, the CRD generator and `kim policy` all read these tables through
//! [`crate::status::Policy`].

use serde::{Deserialize, Serialize};
use std::fmt;

/// `status.state` of a Runtime (status model §1). Serialised as the bare name (`"Pending"`, …).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub enum State {
    /// Being created or updated; steps in progress or retrying.
    Pending,
    /// Provisioned, kubeconfig stored, administrators configured.
    Ready,
    /// An error that automatic retries will not fix.
    Failed,
    /// Deletion in progress.
    Terminating,
}

impl State {
    /// All states, in the order the spec lists them (also the CRD enum order).
    pub const ALL: [State; 4] = [
        State::Pending,
        State::Ready,
        State::Failed,
        State::Terminating,
    ];

    /// The wire name, e.g. `"Pending"`.
    pub const fn as_str(self) -> &'static str {
        match self {
            State::Pending => "Pending",
            State::Ready => "Ready",
            State::Failed => "Failed",
            State::Terminating => "Terminating",
        }
    }

    /// Parses a wire name; `None` for anything that is not exactly one of [`State::ALL`].
    pub fn parse(s: &str) -> Option<State> {
        State::ALL.into_iter().find(|st| st.as_str() == s)
    }

    /// Meaning of the state (status model §1, "Meaning of the states").
    pub(crate) const fn meaning(self) -> &'static str {
        match self {
            State::Pending => {
                "the runtime is being created or updated; steps in progress or retrying"
            }
            State::Ready => {
                "provisioned, kubeconfig stored, administrators configured: ready to use"
            }
            State::Failed => {
                "an error that automatic retries will not fix; needs a new spec or a person"
            }
            State::Terminating => "deletion in progress",
        }
    }
}

impl fmt::Display for State {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The `status` of a Kubernetes `Condition`: `True`, `False` or `Unknown`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub enum CondStatus {
    True,
    False,
    Unknown,
}

impl CondStatus {
    /// All condition statuses (the CRD enum).
    pub const ALL: [CondStatus; 3] = [CondStatus::True, CondStatus::False, CondStatus::Unknown];

    /// The wire name, e.g. `"True"`.
    pub const fn as_str(self) -> &'static str {
        match self {
            CondStatus::True => "True",
            CondStatus::False => "False",
            CondStatus::Unknown => "Unknown",
        }
    }

    /// The one-letter form used in the spec's tables (T, F, U).
    pub(crate) const fn letter(self) -> char {
        match self {
            CondStatus::True => 'T',
            CondStatus::False => 'F',
            CondStatus::Unknown => 'U',
        }
    }

    /// Parses a wire name (exact, case-sensitive, as the apiserver's CRD enum does).
    pub(crate) fn parse(s: &str) -> Option<CondStatus> {
        CondStatus::ALL.into_iter().find(|st| st.as_str() == s)
    }
}

impl fmt::Display for CondStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Where a reason comes from (status model §2); shown by `kim policy`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Origin {
    /// Written by this product's reconciler.
    Kim,
    /// From the original proposal; accepted although current KIM no longer writes it.
    Seed,
    /// Written by current KIM (not by this reconciler); accepted for compatibility.
    KimCompatible,
    /// Accepted only when a named compatibility switch is on (see [`CompatSwitch`]).
    Switch,
    /// Added by an operator's policy file.
    PolicyFile,
    /// KIM's retired vocabulary ([`super::history`]): a (type, reason) pair whose names KIM
    /// declared at the same time and has since retired one of; accepted only while the
    /// [`CompatSwitch::KimHistory`] switch is on (status model §7.6).
    KimRetired,
}

/// Named compatibility switches (status model §2, last paragraph). Off by default.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum CompatSwitch {
    /// Current KIM writes, on one deletion error path, a condition of type `Terminating` with
    /// reason `KubernetesErr` (a state name used as a condition type).
    #[serde(rename = "terminatingConditionType")]
    TerminatingConditionType,
    /// KIM's retired vocabulary may be written anew (status model §7.6): a condition type or reason KIM
    /// has retired is accepted, with any status, on a pair whose two names KIM declared at the
    /// same time (`super::history::Name::overlaps`). Retired *states* stay unwritable (they
    /// have no edges in the transition table).
    #[serde(rename = "kimHistory")]
    KimHistory,
}

impl CompatSwitch {
    /// All switches.
    pub(crate) const ALL: [CompatSwitch; 2] = [
        CompatSwitch::TerminatingConditionType,
        CompatSwitch::KimHistory,
    ];

    /// The switch's name in policy files and on the command line.
    pub(crate) const fn as_str(self) -> &'static str {
        match self {
            CompatSwitch::TerminatingConditionType => "terminatingConditionType",
            CompatSwitch::KimHistory => "kimHistory",
        }
    }

    /// Parses a switch name (exact).
    pub(crate) fn parse(s: &str) -> Option<CompatSwitch> {
        CompatSwitch::ALL.into_iter().find(|c| c.as_str() == s)
    }
}

/// The enforcement action configured for a rule (status model §7, "Enforcement"): `deny` rejects the
/// write; `warn` lets it through with an AdmissionReview warning, an audit annotation carrying
/// what the denial would have said, and a metric.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default, Serialize, Deserialize,
)]
#[serde(rename_all = "lowercase")]
pub enum Enforcement {
    /// The write is denied (the default for every rule).
    #[default]
    Deny,
    /// The write is allowed with a warning.
    Warn,
}

impl Enforcement {
    /// `deny` or `warn`.
    pub(crate) const fn as_str(self) -> &'static str {
        match self {
            Enforcement::Deny => "deny",
            Enforcement::Warn => "warn",
        }
    }

    /// Parses `deny` or `warn`.
    pub(crate) fn parse(s: &str) -> Option<Enforcement> {
        [Enforcement::Deny, Enforcement::Warn]
            .into_iter()
            .find(|e| e.as_str() == s)
    }
}

impl fmt::Display for Enforcement {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What became of one violation of a write: it denies the write, it is a warning because its
/// rule runs in `warn` mode, or it is *ratcheted* — the stored object already broke the rule
/// and the write does not touch what the rule reads (status model §7.1–7.5). The label values of the
/// violations metric.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Action {
    /// Denies the write.
    Deny,
    /// Allowed with a warning: the rule's enforcement is `warn`.
    Warn,
    /// Allowed with a warning: the stored object already broke the rule, unchanged.
    Ratcheted,
}

impl Action {
    /// `deny`, `warn` or `ratcheted`.
    pub(crate) const fn as_str(self) -> &'static str {
        match self {
            Action::Deny => "deny",
            Action::Warn => "warn",
            Action::Ratcheted => "ratcheted",
        }
    }
}

impl fmt::Display for Action {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One row of status model §2: a condition `type`, a `reason`, the statuses this pair may carry,
/// the default message (used by defaulting, status model §5) and whether it is a deletion reason
/// (counts for invariant 5).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReasonRow {
    pub condition_type: &'static str,
    pub reason: &'static str,
    pub statuses: &'static [CondStatus],
    pub message: &'static str,
    pub deletion: bool,
    pub origin: Origin,
    /// `Some(switch)` when the row only applies while that switch is on.
    pub switch: Option<CompatSwitch>,
}

use CondStatus::{False as F, True as T, Unknown as U};

const fn row(
    condition_type: &'static str,
    reason: &'static str,
    statuses: &'static [CondStatus],
    message: &'static str,
    origin: Origin,
) -> ReasonRow {
    ReasonRow {
        condition_type,
        reason,
        statuses,
        message,
        deletion: false,
        origin,
        switch: None,
    }
}

const fn del(
    condition_type: &'static str,
    reason: &'static str,
    statuses: &'static [CondStatus],
    message: &'static str,
    origin: Origin,
) -> ReasonRow {
    ReasonRow {
        deletion: true,
        ..row(condition_type, reason, statuses, message, origin)
    }
}

use Origin::{Kim, KimCompatible as Compat, Seed};

/// Condition type names used by the reconciler (status model §2).
pub mod types {
    /// `Provisioned`: the Shoot.
    pub const PROVISIONED: &str = "Provisioned";
    /// `KubeconfigReady`: the kubeconfig Secret.
    pub const KUBECONFIG_READY: &str = "KubeconfigReady";
    /// `Configured`: the administrators' bindings.
    pub const CONFIGURED: &str = "Configured";
    /// `Deprovisioned`: the Shoot's deletion.
    pub const DEPROVISIONED: &str = "Deprovisioned";
}

/// Reason names the reconciler writes (docs/reconciler.md), spelled once here and used in
/// [`REASONS`] below and by `crate::reconciler`.
pub mod reasons {
    /// `Provisioned=Unknown`: Runtime accepted, nothing created yet (step 2).
    pub const INITIALISED: &str = "Initialised";
    /// `Provisioned=Unknown`: Shoot created / creation in progress / retryable Gardener failure.
    pub const PENDING: &str = "Pending";
    /// `Provisioned=True`: Gardener finished creating the Shoot.
    pub const SHOOT_CREATION_COMPLETED: &str = "ShootCreationCompleted";
    /// `Provisioned=Unknown`: Shoot update submitted or in progress.
    pub const PROCESSING: &str = "Processing";
    /// `Provisioned=True`: Shoot update finished.
    pub const CONFIGURATION_COMPLETED: &str = "ConfigurationCompleted";
    /// `Provisioned=False` / `Deprovisioned=False`: a Gardener API call failed (retried).
    pub const GARDENER_ERR: &str = "GardenerErr";
    /// `Provisioned=False`: Gardener reports that creation failed for good.
    pub const CREATION_ERR: &str = "CreationErr";
    /// `Provisioned=False`: the Runtime cannot be converted into a Shoot.
    pub const CONVERSION_ERR: &str = "ConversionErr";
    /// `Provisioned=False`: audit logging is mandatory and no tenant is configured for the
    /// Runtime's provider and region.
    pub const AUDIT_LOG_ERR: &str = "AuditLogErr";
    /// `Provisioned=False`: Gardener reports that the update failed for good.
    pub const PROCESSING_ERR: &str = "ProcessingErr";
    /// `KubeconfigReady=True`: kubeconfig Secret written or rotated.
    pub const KUBECONFIG_CREATED: &str = "KubeconfigCreated";
    /// `KubeconfigReady=False`: requesting the kubeconfig or writing the Secret failed.
    pub const KUBERNETES_ERR: &str = "KubernetesErr";
    /// `Configured=True`: administrators' bindings applied.
    pub const ADMINISTRATORS_CONFIGURED: &str = "AdministratorsConfigured";
    /// `Configured=False`: applying the bindings failed (retried).
    pub const CONFIGURATION_ERROR: &str = "ConfigurationError";
    /// `Deprovisioned=Unknown`: Shoot deletion requested / in progress; `False`: it failed.
    pub const GARDENER_SHOOT_DELETED: &str = "GardenerShootDeleted";
}

/// Every (type, reason) pair of status model §2, in the spec's order.
pub const REASONS: &[ReasonRow] = &[
    // Provisioned
    row(
        types::PROVISIONED,
        reasons::INITIALISED,
        &[U],
        "Runtime accepted, nothing created yet",
        Kim,
    ),
    row(
        types::PROVISIONED,
        reasons::PENDING,
        &[U],
        "Shoot creation in progress",
        Kim,
    ),
    row(
        types::PROVISIONED,
        reasons::SHOOT_CREATION_COMPLETED,
        &[T],
        "Gardener finished creating the Shoot",
        Kim,
    ),
    row(
        types::PROVISIONED,
        reasons::PROCESSING,
        &[U, T, F],
        "Shoot update in progress",
        Kim,
    ),
    row(
        types::PROVISIONED,
        "ProcessingCompleted",
        &[T],
        "Shoot update finished",
        Seed,
    ),
    row(
        types::PROVISIONED,
        reasons::CONFIGURATION_COMPLETED,
        &[T],
        "Shoot update finished",
        Kim,
    ),
    row(
        types::PROVISIONED,
        reasons::GARDENER_ERR,
        &[F],
        "Gardener API call failed; retrying",
        Kim,
    ),
    row(
        types::PROVISIONED,
        "SeedNotFound",
        &[F],
        "No seed in the requested region",
        Compat,
    ),
    row(
        types::PROVISIONED,
        reasons::CREATION_ERR,
        &[F],
        "Gardener reports that Shoot creation failed",
        Kim,
    ),
    row(
        types::PROVISIONED,
        reasons::CONVERSION_ERR,
        &[F],
        "The Runtime cannot be converted into a Shoot",
        Kim,
    ),
    row(
        types::PROVISIONED,
        reasons::PROCESSING_ERR,
        &[F],
        "Gardener reports that the Shoot update failed",
        Kim,
    ),
    row(
        types::PROVISIONED,
        reasons::AUDIT_LOG_ERR,
        &[F],
        "Audit log configuration failed",
        Kim,
    ),
    row(
        types::PROVISIONED,
        "CustomAuditLogErr",
        &[F],
        "Custom audit log configuration failed",
        Compat,
    ),
    row(
        types::PROVISIONED,
        "OidcConfigurationErr",
        &[F],
        "OIDC configuration failed",
        Compat,
    ),
    row(
        types::PROVISIONED,
        "RegistryCacheConfigured",
        &[F],
        "Registry cache check failed",
        Compat,
    ),
    // KubeconfigReady
    row(
        types::KUBECONFIG_READY,
        reasons::KUBECONFIG_CREATED,
        &[T],
        "Kubeconfig Secret written",
        Kim,
    ),
    row(
        types::KUBECONFIG_READY,
        "GardenerClusterCRCreated",
        &[U],
        "GardenerCluster created, waiting for the kubeconfig",
        Compat,
    ),
    row(
        types::KUBECONFIG_READY,
        "GardenerClusterCRReady",
        &[T],
        "Kubeconfig Secret ready",
        Compat,
    ),
    row(
        types::KUBECONFIG_READY,
        reasons::KUBERNETES_ERR,
        &[F],
        "Requesting or storing the kubeconfig failed",
        Kim,
    ),
    // Configured
    row(
        types::CONFIGURED,
        "ConfigurationStarted",
        &[U],
        "Administrators' bindings being applied",
        Seed,
    ),
    row(
        types::CONFIGURED,
        reasons::CONFIGURATION_COMPLETED,
        &[T],
        "Administrators configured",
        Seed,
    ),
    row(
        types::CONFIGURED,
        reasons::ADMINISTRATORS_CONFIGURED,
        &[T],
        "Administrators configured",
        Kim,
    ),
    row(
        types::CONFIGURED,
        reasons::CONFIGURATION_ERROR,
        &[F],
        "Applying the administrators' bindings failed",
        Kim,
    ),
    // Deprovisioned
    del(
        types::DEPROVISIONED,
        "GardenerClusterCRDeleted",
        &[U, T],
        "GardenerCluster deleted",
        Compat,
    ),
    del(
        types::DEPROVISIONED,
        "KubeconfigDeleted",
        &[U, T],
        "Kubeconfig Secret deleted",
        Kim,
    ),
    del(
        types::DEPROVISIONED,
        reasons::GARDENER_SHOOT_DELETED,
        &[U, F],
        "Shoot deletion requested",
        Kim,
    ),
    del(
        types::DEPROVISIONED,
        reasons::GARDENER_ERR,
        &[F],
        "Gardener API delete call failed; retrying",
        Kim,
    ),
    del(
        types::DEPROVISIONED,
        "StructuredConfigDeleted",
        &[F],
        "Structured authentication config cleanup failed",
        Compat,
    ),
    // KIM-compatible types that this reconciler does not write.
    row(
        "KymaSystemNSCreated",
        "KymaSystemNSReady",
        &[T],
        "kyma-system namespace created",
        Compat,
    ),
    row(
        "KymaSystemNSCreated",
        "KymaSystemNSError",
        &[F],
        "Creating the kyma-system namespace failed",
        Compat,
    ),
    row(
        "OidcAndConfigMapConfigured",
        "OidcAndConfigMapsConfigured",
        &[T],
        "OIDC and ConfigMaps configured",
        Compat,
    ),
    row(
        "OidcAndConfigMapConfigured",
        "ConfigMapErr",
        &[U],
        "ConfigMap configuration failed",
        Compat,
    ),
    row(
        "OidcAndConfigMapConfigured",
        "OidcConfigurationErr",
        &[U],
        "OIDC configuration failed",
        Compat,
    ),
    row(
        "RuntimeBootstrapperReady",
        "RuntimeBootstrapperConfigured",
        &[T],
        "Runtime bootstrapper configured",
        Compat,
    ),
    row(
        "RuntimeBootstrapperReady",
        "RuntimeBootstrapperConfigurationFailed",
        &[F],
        "Runtime bootstrapper configuration failed",
        Compat,
    ),
    row(
        "RuntimeBootstrapperReady",
        "RuntimeBootstrapperStatusUnknown",
        &[F],
        "Runtime bootstrapper status unknown",
        Compat,
    ),
    row(
        "RuntimeBootstrapperReady",
        "RuntimeBootstrapperInstallationInProgress",
        &[F],
        "Runtime bootstrapper installation in progress",
        Compat,
    ),
    row(
        "RuntimeBootstrapperReady",
        "RuntimeBootstrapperInstallationFailed",
        &[F],
        "Runtime bootstrapper installation failed",
        Compat,
    ),
    row(
        "RuntimeBootstrapperReady",
        "RuntimeBootstrapperUpgradeInProgress",
        &[F],
        "Runtime bootstrapper upgrade in progress",
        Compat,
    ),
    row(
        "RuntimeBootstrapperReady",
        "RuntimeBootstrapperUpgradeFailed",
        &[F],
        "Runtime bootstrapper upgrade failed",
        Compat,
    ),
    row(
        "RegistryCacheConfigured",
        "RegistryCacheConfigured",
        &[T],
        "Registry cache configured",
        Compat,
    ),
    row(
        "RegistryCacheConfigured",
        "RegistryCacheGardenClusterConfigurationFailed",
        &[F],
        "Registry cache configuration in the Garden cluster failed",
        Compat,
    ),
    row(
        "RegistryCacheConfigured",
        "RegistryCacheGardenClusterCleanupFailed",
        &[F],
        "Registry cache cleanup in the Garden cluster failed",
        Compat,
    ),
    row(
        "CustomAuditLogConfigured",
        "CustomAuditLogConfigured",
        &[T, U, F],
        "Custom audit log configured",
        Compat,
    ),
    row(
        "CustomAuditLogConfigured",
        "CustomAuditLogErr",
        &[F],
        "Custom audit log configuration failed",
        Compat,
    ),
    row(
        "AuditLogCredentialsCopied",
        "CredentialsCopied",
        &[T],
        "Audit log credentials copied",
        Compat,
    ),
    row(
        "AuditLogCredentialsCopied",
        "CredentialsCopyErr",
        &[F],
        "Copying the audit log credentials failed",
        Compat,
    ),
    // Behind a switch: current KIM's deletion error path (a state name used as a type).
    ReasonRow {
        switch: Some(CompatSwitch::TerminatingConditionType),
        ..del(
            "Terminating",
            "KubernetesErr",
            &[F],
            "Deleting the runtime failed",
            Origin::Switch,
        )
    },
];

/// The states of the first proposal, which KIM declared until June 2024 (its retired states,
/// `samples/kim/vocabulary-history.tsv`), and what each means in today's model (status model §1, "Meaning of the
/// states"). A stored Runtime in one of them moves on as if it were in its equivalent: a
/// `Deleting` one, like a `Terminating` one, never goes back (deletion is final).
pub(crate) const RETIRED_STATE_EQUIVALENTS: &[(&str, State)] = &[
    ("Creating", State::Pending),
    ("Processing", State::Pending),
    ("Error", State::Failed),
    ("Deleting", State::Terminating),
];

/// One edge of status model §3. `from: None` is ∅ (no status yet).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Edge {
    pub from: Option<State>,
    pub to: State,
    /// Footnote ¹: only while the Runtime is being deleted (`metadata.deletionTimestamp` set).
    pub only_while_deleting: bool,
}

const fn e(from: Option<State>, to: State, only_while_deleting: bool) -> Edge {
    Edge {
        from,
        to,
        only_while_deleting,
    }
}

use State::{Failed as Fd, Pending as Pd, Ready as Rd, Terminating as Tm};

/// The transition table of status model §3. Edges not listed are illegal; no edge leads to ∅
/// (removing the status is never allowed).
pub(crate) const EDGES: &[Edge] = &[
    e(None, Pd, false),
    e(None, Fd, false),
    e(None, Tm, true),
    e(Some(Pd), Pd, false),
    e(Some(Pd), Rd, false),
    e(Some(Pd), Fd, false),
    e(Some(Pd), Tm, true),
    e(Some(Rd), Pd, false),
    e(Some(Rd), Rd, false),
    e(Some(Rd), Fd, false),
    e(Some(Rd), Tm, true),
    e(Some(Fd), Pd, false),
    e(Some(Fd), Rd, false),
    e(Some(Fd), Fd, false),
    e(Some(Fd), Tm, true),
    e(Some(Tm), Tm, true),
    e(Some(Tm), Fd, true),
];

/// Why edges out of a state are restricted, quoted in denial messages (status model §3, footnote ¹).
pub(crate) fn from_note(from: Option<State>) -> Option<&'static str> {
    match from {
        Some(State::Terminating) => Some("deletion is final"),
        _ => None,
    }
}

/// Stable identifiers of the rules a write can break; each names the spec section it enforces.
/// They appear in denial details, `kim check --output json` and audit annotations.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum RuleId {
    /// The object or its status is not shaped as the CRD says (wrong JSON types). Code 400.
    Malformed,
    /// `status` exists but `status.state` is missing (status model §1).
    StateRequired,
    /// `status.state` is not one of the states (status model §1). Code 400.
    StateUnknown,
    /// The state change is not an edge of the transition table (status model §3).
    Transition,
    /// The edge exists only while the Runtime is being deleted (status model §3, footnote ¹).
    TransitionNeedsDeletion,
    /// The status was removed (status model §3, no edge leads to ∅).
    StatusRemoved,
    /// A condition lacks `type`, `status` or `reason`, or has a malformed field. Code 400.
    ConditionShape,
    /// A condition type is not in the table (status model §4.1).
    ConditionTypeUnknown,
    /// Two conditions share a type (status model §4.1).
    ConditionTypeDuplicate,
    /// A reason is not allowed for its condition type (status model §4.2).
    ReasonUnknown,
    /// A (type, reason) pair carries a status it may not carry (status model §4.2).
    ReasonStatus,
    /// `Ready` without `Provisioned`, `KubeconfigReady`, `Configured` all `True` (status model §4.3).
    ReadyRequires,
    /// `Failed` without any `False` condition (status model §4.4).
    FailedRequiresFalse,
    /// `Terminating` without a `Deprovisioned` (or deletion-reason) condition (status model §4.5).
    TerminatingRequiresDeprovisioned,
    /// `provisioningCompleted` went from true to false (status model §4.6).
    ProvisioningCompleted,
    /// `lastTransitionTime` changed without a status change, or moved backwards (status model §4.7).
    LastTransitionTime,
    /// The writer is not an allowed principal (status model §4.8).
    Writer,
}

impl RuleId {
    /// Every rule, in spec order.
    pub const ALL: [RuleId; 17] = [
        RuleId::Malformed,
        RuleId::StateRequired,
        RuleId::StateUnknown,
        RuleId::Transition,
        RuleId::TransitionNeedsDeletion,
        RuleId::StatusRemoved,
        RuleId::ConditionShape,
        RuleId::ConditionTypeUnknown,
        RuleId::ConditionTypeDuplicate,
        RuleId::ReasonUnknown,
        RuleId::ReasonStatus,
        RuleId::ReadyRequires,
        RuleId::FailedRequiresFalse,
        RuleId::TerminatingRequiresDeprovisioned,
        RuleId::ProvisioningCompleted,
        RuleId::LastTransitionTime,
        RuleId::Writer,
    ];

    /// Parses a stable id, e.g. `"transition"`.
    pub fn parse(s: &str) -> Option<RuleId> {
        RuleId::ALL.into_iter().find(|r| r.as_str() == s)
    }

    /// The stable id, e.g. `"transition"`.
    pub const fn as_str(self) -> &'static str {
        match self {
            RuleId::Malformed => "malformed",
            RuleId::StateRequired => "state-required",
            RuleId::StateUnknown => "state-unknown",
            RuleId::Transition => "transition",
            RuleId::TransitionNeedsDeletion => "transition-needs-deletion",
            RuleId::StatusRemoved => "status-removed",
            RuleId::ConditionShape => "condition-shape",
            RuleId::ConditionTypeUnknown => "condition-type-unknown",
            RuleId::ConditionTypeDuplicate => "condition-type-duplicate",
            RuleId::ReasonUnknown => "reason-unknown",
            RuleId::ReasonStatus => "reason-status",
            RuleId::ReadyRequires => "ready-requires",
            RuleId::FailedRequiresFalse => "failed-requires-false",
            RuleId::TerminatingRequiresDeprovisioned => "terminating-requires-deprovisioned",
            RuleId::ProvisioningCompleted => "provisioning-completed",
            RuleId::LastTransitionTime => "last-transition-time",
            RuleId::Writer => "writer",
        }
    }

    /// The spec section the rule enforces (docs/status-model.md).
    pub(crate) const fn spec_section(self) -> &'static str {
        match self {
            RuleId::Malformed | RuleId::StateRequired | RuleId::StateUnknown => "§1",
            RuleId::Transition | RuleId::TransitionNeedsDeletion | RuleId::StatusRemoved => "§3",
            RuleId::ConditionShape
            | RuleId::ConditionTypeUnknown
            | RuleId::ConditionTypeDuplicate => "§4.1",
            RuleId::ReasonUnknown | RuleId::ReasonStatus => "§4.2",
            RuleId::ReadyRequires => "§4.3",
            RuleId::FailedRequiresFalse => "§4.4",
            RuleId::TerminatingRequiresDeprovisioned => "§4.5",
            RuleId::ProvisioningCompleted => "§4.6",
            RuleId::LastTransitionTime => "§4.7",
            RuleId::Writer => "§4.8",
        }
    }

    /// One-line description of the rule, for `kim policy` and the docs.
    pub(crate) const fn description(self) -> &'static str {
        match self {
            RuleId::Malformed => {
                "status, conditions or provisioningCompleted has the wrong JSON type"
            }
            RuleId::StateRequired => "status.state is required once status exists",
            RuleId::StateUnknown => "status.state is one of the states",
            RuleId::Transition => "the state change is an edge of the transition table",
            RuleId::TransitionNeedsDeletion => {
                "edges marked ¹ only while metadata.deletionTimestamp is set"
            }
            RuleId::StatusRemoved => "the status is never removed",
            RuleId::ConditionShape => {
                "each condition has type, status (True/False/Unknown), reason and a valid lastTransitionTime"
            }
            RuleId::ConditionTypeUnknown => "every condition type is known",
            RuleId::ConditionTypeDuplicate => "at most one condition per type",
            RuleId::ReasonUnknown => "every reason is allowed for its type",
            RuleId::ReasonStatus => "a (type, reason) pair carries only its listed statuses",
            RuleId::ReadyRequires => {
                "Ready needs Provisioned, KubeconfigReady and Configured all True"
            }
            RuleId::FailedRequiresFalse => "Failed needs at least one condition with status False",
            RuleId::TerminatingRequiresDeprovisioned => {
                "Terminating needs a Deprovisioned condition (or one with a deletion reason)"
            }
            RuleId::ProvisioningCompleted => "provisioningCompleted never goes from true to false",
            RuleId::LastTransitionTime => {
                "lastTransitionTime changes only with the status, never backwards"
            }
            RuleId::Writer => "only the allowed principals write status",
        }
    }

    /// True for rules about the object's shape rather than the policy: these deny with
    /// HTTP-style code 400 `BadRequest` instead of 403 `Forbidden` (status model §6).
    pub(crate) const fn is_malformed(self) -> bool {
        matches!(
            self,
            RuleId::Malformed | RuleId::StateUnknown | RuleId::ConditionShape
        )
    }
}

impl fmt::Display for RuleId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What a state requires of the conditions (status model §4, invariants 3–5).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Requirement {
    /// Every listed condition type is present with status `True` (invariant 3).
    AllTrue(&'static [&'static str]),
    /// At least one condition has status `False` (invariant 4).
    AnyFalse,
    /// A condition of the given type is present, or any condition whose (type, reason) is a
    /// deletion reason (invariant 5, KIM-compatible form).
    TypeOrDeletionReason(&'static str),
}

/// Per-state requirements (status model §4) and the rule each one enforces.
pub(crate) const STATE_REQUIREMENTS: &[(State, Requirement, RuleId)] = &[
    (
        State::Ready,
        Requirement::AllTrue(&[
            types::PROVISIONED,
            types::KUBECONFIG_READY,
            types::CONFIGURED,
        ]),
        RuleId::ReadyRequires,
    ),
    (
        State::Failed,
        Requirement::AnyFalse,
        RuleId::FailedRequiresFalse,
    ),
    (
        State::Terminating,
        Requirement::TypeOrDeletionReason(types::DEPROVISIONED),
        RuleId::TerminatingRequiresDeprovisioned,
    ),
];

/// Principals allowed to write `runtimes/status` by default (status model §4, invariant 8): the
/// reconciler's service account and the `system:masters` group.
pub(crate) const DEFAULT_WRITER_USERS: &[&str] =
    &["system:serviceaccount:kim-system:kim-controller"];
/// Groups allowed to write `runtimes/status` by default (status model §4, invariant 8).
pub(crate) const DEFAULT_WRITER_GROUPS: &[&str] = &["system:masters"];

/// Most entries accepted in `status.conditions` (the CRD, like KIM's, sets no `maxItems`). The model allows
/// one condition per type and the table has a dozen types; a longer list is denied as malformed
/// before any per-condition work, which keeps evaluation time and denial size bounded.
pub(crate) const MAX_CONDITIONS: usize = 64;

/// Finalizer the reconciler puts on every Runtime (reconciler spec, step 1).
pub const FINALIZER: &str =
    "runtime-controller.infrastructure-manager.kyma-project.io/deletion-hook";
