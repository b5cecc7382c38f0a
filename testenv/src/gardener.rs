//! A simulated Gardener: advances Shoot `status.lastOperation` on a clock the test controls.
//!
//! [`GardenerSim`] looks at the Shoots (`core.gardener.cloud/v1beta1`) stored in a
//! [`ServerHandle`] every time the test calls [`GardenerSim::step`] (or [`GardenerSim::advance`]),
//! and moves each one forward by one step — there is no sleeping and no background task unless
//! the test asks for one with [`GardenerSim::run_every`]:
//!
//! - a new Shoot (no `lastOperation`) → `{type: Create, state: Processing, progress: 0}`;
//! - each further step raises `progress`; after `steps` steps the operation ends with the next
//!   [`Outcome`] of the Shoot's [`ShootScript`] (default: `Succeeded`);
//! - `Failed` is terminal until the spec changes (`metadata.generation >
//!   status.observedGeneration`) or the Shoot is annotated `gardener.cloud/operation: retry`;
//!   `Error` is retried automatically at the next step (as Gardener retries errors);
//! - a spec change after an operation ended → `Reconcile` (or `Create` again if the Shoot was
//!   never created successfully);
//! - `deletionTimestamp` set → `Delete` Processing → on success the finalizer `gardener` is
//!   removed, so the Shoot disappears (DELETED event).
//!
//! Every change sets `status.observedGeneration`, `lastOperation.lastUpdateTime` (from the
//! simulated clock, advanced by `step_duration` per step) and `progress`; failures set
//! `status.lastErrors[] {description, codes, lastUpdateTime}`.
//!
//! Creating the simulator installs two admission plugins on the server (see
//! [`install_admission`]): Shoot creation adds the finalizer `gardener`, and deleting a Shoot
//! without the annotation `confirmation.gardener.cloud/deletion: "true"` is rejected with 403,
//! as Gardener's `ShootDeletionConfirmation` admission plugin does.
//!
//! ```no_run
//! # async fn demo() -> std::io::Result<()> {
//! use testenv::{ServerConfig, gardener::{GardenerConfig, GardenerSim, Outcome, ShootScript}};
//! let garden = testenv::start(ServerConfig::default()).await?;
//! let sim = GardenerSim::new(&garden, GardenerConfig::default());
//! sim.set_script("broken", ShootScript::create_fails(&["ERR_INFRA_UNAUTHORIZED"]));
//! // ... the code under test creates Shoots through garden.client() ...
//! sim.advance(4); // Create Processing 0 → 33 → 66 → Succeeded (with the default 3 steps)
//! # Ok(()) }
//! ```

use std::{
    collections::{HashMap, VecDeque},
    sync::{Arc, Mutex},
    time::Duration,
};

use chrono::{DateTime, Utc};
use serde_json::{Value, json};

use crate::{
    hooks::{AdmissionDecision, AdmissionRequest, Verb},
    resource::Gvr,
    server::{ServerHandle, lock},
    store::{self, finalizers, is_deleting, meta_str},
};

/// Finalizer Gardener puts on every Shoot.
pub const SHOOT_FINALIZER: &str = "gardener";
/// Annotation that must be `"true"` before a Shoot may be deleted.
pub const CONFIRM_DELETION: &str = "confirmation.gardener.cloud/deletion";
/// Annotation `gardener.cloud/operation`; value `retry` restarts a failed operation.
pub const OPERATION_ANNOTATION: &str = "gardener.cloud/operation";

/// How a simulated operation ends.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// `state: Succeeded`, `progress: 100`, `lastErrors` cleared.
    Succeeded,
    /// `state: Failed` with `lastErrors[].codes` (terminal until spec change or retry annotation).
    Failed {
        /// Gardener error codes, e.g. `ERR_INFRA_UNAUTHORIZED`, `ERR_INFRA_QUOTA_EXCEEDED`.
        codes: Vec<String>,
        /// `lastErrors[].description` and `lastOperation.description`.
        description: String,
    },
    /// `state: Error` with `lastErrors[].codes`; the operation is retried at the next step.
    Error {
        /// Gardener error codes.
        codes: Vec<String>,
        /// Description.
        description: String,
    },
}

impl Outcome {
    /// `Failed` with these codes and a generic description.
    pub fn failed(codes: &[&str]) -> Self {
        Outcome::Failed {
            codes: codes.iter().map(|c| c.to_string()).collect(),
            description: format!("simulated failure: {}", codes.join(", ")),
        }
    }

    /// `Error` (retried automatically) with these codes.
    pub fn error(codes: &[&str]) -> Self {
        Outcome::Error {
            codes: codes.iter().map(|c| c.to_string()).collect(),
            description: format!("simulated error: {}", codes.join(", ")),
        }
    }
}

/// Outcomes per operation type, consumed in order; when a list is exhausted operations succeed.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ShootScript {
    /// Outcomes of successive `Create` operations (first attempt, retries…).
    pub create: VecDeque<Outcome>,
    /// Outcomes of successive `Reconcile` operations.
    pub reconcile: VecDeque<Outcome>,
    /// Outcomes of successive `Delete` operations.
    pub delete: VecDeque<Outcome>,
}

impl ShootScript {
    /// Every operation succeeds.
    pub fn succeed() -> Self {
        Self::default()
    }

    /// The first `Create` fails (terminally) with these codes.
    pub fn create_fails(codes: &[&str]) -> Self {
        Self {
            create: VecDeque::from([Outcome::failed(codes)]),
            ..Self::default()
        }
    }

    /// Appends a `Create` outcome.
    #[must_use]
    pub fn then_create(mut self, o: Outcome) -> Self {
        self.create.push_back(o);
        self
    }

    /// Appends a `Reconcile` outcome.
    #[must_use]
    pub fn then_reconcile(mut self, o: Outcome) -> Self {
        self.reconcile.push_back(o);
        self
    }

    /// Appends a `Delete` outcome.
    #[must_use]
    pub fn then_delete(mut self, o: Outcome) -> Self {
        self.delete.push_back(o);
        self
    }
}

/// Simulator settings.
#[derive(Clone, Debug)]
pub struct GardenerConfig {
    /// Steps an operation takes from `Processing 0` to its outcome (default 3).
    pub steps: u32,
    /// Simulated time per step (default 30 s), used for `lastUpdateTime`.
    pub step_duration: Duration,
    /// Script for Shoots without their own (default: everything succeeds).
    pub default_script: ShootScript,
    /// Scripts per Shoot name.
    pub scripts: HashMap<String, ShootScript>,
}

impl Default for GardenerConfig {
    fn default() -> Self {
        Self {
            steps: 3,
            step_duration: Duration::from_secs(30),
            default_script: ShootScript::default(),
            scripts: HashMap::new(),
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Op {
    Create,
    Reconcile,
    Delete,
}

impl Op {
    fn as_str(self) -> &'static str {
        match self {
            Op::Create => "Create",
            Op::Reconcile => "Reconcile",
            Op::Delete => "Delete",
        }
    }

    fn parse(s: &str) -> Self {
        match s {
            "Create" => Op::Create,
            "Delete" => Op::Delete,
            _ => Op::Reconcile,
        }
    }
}

struct Track {
    script: ShootScript,
    steps: u32,
}

struct SimState {
    config: GardenerConfig,
    clock: DateTime<Utc>,
    tracks: HashMap<String, Track>,
    total_steps: u64,
}

/// The simulated Gardener. Cheap to clone (shared state).
#[derive(Clone)]
pub struct GardenerSim {
    server: ServerHandle,
    state: Arc<Mutex<SimState>>,
}

impl std::fmt::Debug for GardenerSim {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GardenerSim")
            .field("server", &self.server.url())
            .finish()
    }
}

/// Installs Gardener's admission behaviour on a server: Shoot creation adds the finalizer
/// [`SHOOT_FINALIZER`]; deleting a Shoot without `confirmation.gardener.cloud/deletion: "true"`
/// is denied with 403 (`... is forbidden: must have a "confirmation.gardener.cloud/deletion"
/// annotation to delete`).
pub fn install_admission(server: &ServerHandle) {
    server.add_admission_plugin(
        "gardener-shoot-finalizer",
        Arc::new(|req: AdmissionRequest| {
            let decision = if req.gvr == Gvr::shoots()
                && req.subresource.is_none()
                && req.old_object.is_none()
                && let Some(mut obj) = req.object.clone()
                && !finalizers(&obj).iter().any(|f| f == SHOOT_FINALIZER)
            {
                let mut list = finalizers(&obj);
                list.push(SHOOT_FINALIZER.to_string());
                store::meta_mut(&mut obj).insert("finalizers".into(), json!(list));
                AdmissionDecision::Mutate(obj)
            } else {
                AdmissionDecision::Allow
            };
            Box::pin(async move { decision })
        }),
    );
    server.add_admission_plugin(
        "ShootDeletionConfirmation",
        Arc::new(|req: AdmissionRequest| {
            let decision = if req.gvr == Gvr::shoots() && req.verb == Verb::Delete {
                let confirmed = req
                    .old_object
                    .as_ref()
                    .and_then(|o| o.pointer("/metadata/annotations"))
                    .and_then(|a| a.get(CONFIRM_DELETION))
                    .and_then(Value::as_str)
                    == Some("true");
                if confirmed {
                    AdmissionDecision::Allow
                } else {
                    AdmissionDecision::Deny {
                        code: 403,
                        message: format!(
                            "shoots.core.gardener.cloud \"{}\" is forbidden: must have a \"{CONFIRM_DELETION}\" annotation to delete",
                            req.name
                        ),
                    }
                }
            } else {
                AdmissionDecision::Allow
            };
            Box::pin(async move { decision })
        }),
    );
}

enum Next {
    Start(Op),
    Advance(Op),
    Nothing,
}

impl GardenerSim {
    /// Attaches a simulator to the (Gardener cluster's) server and installs
    /// [`install_admission`].
    pub fn new(server: &ServerHandle, config: GardenerConfig) -> Self {
        install_admission(server);
        Self {
            server: server.clone(),
            state: Arc::new(Mutex::new(SimState {
                config,
                clock: Utc::now(),
                tracks: HashMap::new(),
                total_steps: 0,
            })),
        }
    }

    /// Sets the script of the Shoot with this name (takes effect for operations not yet
    /// finished; a Shoot already seen keeps its remaining script unless it is recreated).
    pub fn set_script(&self, shoot_name: &str, script: ShootScript) {
        let mut st = lock(&self.state);
        st.config
            .scripts
            .insert(shoot_name.to_string(), script.clone());
        let uids: Vec<String> = self
            .server
            .list(&Gvr::shoots(), None)
            .iter()
            .filter(|s| meta_str(s, "name") == Some(shoot_name))
            .filter_map(|s| meta_str(s, "uid").map(String::from))
            .collect();
        for uid in uids {
            if let Some(t) = st.tracks.get_mut(&uid) {
                t.script = script.clone();
            }
        }
    }

    /// Sets the script for Shoots without their own.
    pub fn set_default_script(&self, script: ShootScript) {
        lock(&self.state).config.default_script = script;
    }

    /// The simulated clock.
    pub fn now(&self) -> DateTime<Utc> {
        lock(&self.state).clock
    }

    /// Steps taken so far.
    pub fn steps_taken(&self) -> u64 {
        lock(&self.state).total_steps
    }

    /// Advances the clock by one step and moves every Shoot forward by one step. Returns how
    /// many Shoots changed.
    pub fn step(&self) -> usize {
        let shoots = self.server.list(&Gvr::shoots(), None);
        let mut st = lock(&self.state);
        st.total_steps += 1;
        let step_duration = st.config.step_duration;
        st.clock += chrono::Duration::from_std(step_duration).unwrap_or_default();
        let live: std::collections::HashSet<&str> =
            shoots.iter().filter_map(|s| meta_str(s, "uid")).collect();
        st.tracks.retain(|uid, _| live.contains(uid.as_str()));
        let mut changed = 0;
        for shoot in &shoots {
            if self.step_shoot(&mut st, shoot) {
                changed += 1;
            }
        }
        changed
    }

    /// Calls [`Self::step`] `n` times; returns the total number of Shoot changes.
    pub fn advance(&self, n: usize) -> usize {
        (0..n).map(|_| self.step()).sum()
    }

    /// Steps until a step changes nothing (or `max_steps` were taken); returns the steps taken.
    pub fn settle(&self, max_steps: usize) -> usize {
        for i in 0..max_steps {
            if self.step() == 0 {
                return i + 1;
            }
        }
        max_steps
    }

    /// Steps every `interval` of real time in a background task (for demos and end-to-end
    /// runs; tests should prefer explicit [`Self::step`]). Abort the handle to stop.
    pub fn run_every(&self, interval: Duration) -> tokio::task::JoinHandle<()> {
        let sim = self.clone();
        tokio::spawn(async move {
            let mut ticker = tokio::time::interval(interval);
            ticker.tick().await;
            loop {
                ticker.tick().await;
                sim.step();
            }
        })
    }

    fn step_shoot(&self, st: &mut SimState, shoot: &Value) -> bool {
        let (Some(uid), Some(name)) = (meta_str(shoot, "uid"), meta_str(shoot, "name")) else {
            return false;
        };
        let ns = meta_str(shoot, "namespace").map(String::from);
        let generation = shoot
            .pointer("/metadata/generation")
            .and_then(Value::as_i64)
            .unwrap_or(1);
        let status = shoot.get("status").cloned().unwrap_or_else(|| json!({}));
        let lo_type = status
            .pointer("/lastOperation/type")
            .and_then(Value::as_str)
            .map(Op::parse);
        let lo_state = status
            .pointer("/lastOperation/state")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_string();
        let observed = status
            .get("observedGeneration")
            .and_then(Value::as_i64)
            .unwrap_or(0);
        let retry = shoot
            .pointer("/metadata/annotations")
            .and_then(|a| a.get(OPERATION_ANNOTATION))
            .and_then(Value::as_str)
            == Some("retry");
        let deleting = is_deleting(shoot);

        let next = if deleting {
            match (lo_type, lo_state.as_str()) {
                (Some(Op::Delete), "Processing") => Next::Advance(Op::Delete),
                (Some(Op::Delete), "Error") => Next::Start(Op::Delete),
                (Some(Op::Delete), "Failed") if retry => Next::Start(Op::Delete),
                (Some(Op::Delete), _) => Next::Nothing,
                _ => Next::Start(Op::Delete),
            }
        } else {
            match (lo_type, lo_state.as_str()) {
                (None, _) => Next::Start(Op::Create),
                (Some(op), "Processing" | "Pending") => Next::Advance(op),
                (Some(op), "Error") => Next::Start(op),
                (Some(op), s) if generation > observed || retry => {
                    if op == Op::Create && s != "Succeeded" {
                        Next::Start(Op::Create)
                    } else {
                        Next::Start(Op::Reconcile)
                    }
                }
                _ => Next::Nothing,
            }
        };

        let default_script = st
            .config
            .scripts
            .get(name)
            .cloned()
            .unwrap_or_else(|| st.config.default_script.clone());
        let steps_needed = st.config.steps.max(1);
        let clock = store::timestamp(st.clock);
        let track = st.tracks.entry(uid.to_string()).or_insert_with(|| Track {
            script: default_script,
            steps: 0,
        });

        let mut new_status = status.clone();
        if !new_status.is_object() {
            new_status = json!({});
        }
        let mut remove_finalizer = false;
        match next {
            Next::Nothing => return false,
            Next::Start(op) => {
                track.steps = 0;
                new_status["lastOperation"] = json!({
                    "type": op.as_str(), "state": "Processing", "progress": 0,
                    "description": format!("{} of Shoot cluster in progress", op.as_str()),
                    "lastUpdateTime": clock,
                });
                new_status["observedGeneration"] = json!(generation);
                new_status["technicalID"] = json!(format!(
                    "shoot--{}--{name}",
                    ns.as_deref()
                        .unwrap_or("")
                        .strip_prefix("garden-")
                        .unwrap_or("")
                ));
                new_status["uid"] = json!(uid);
            }
            Next::Advance(op) => {
                track.steps += 1;
                if track.steps < steps_needed {
                    let progress = track.steps * 100 / steps_needed;
                    new_status["lastOperation"]["progress"] = json!(progress);
                    new_status["lastOperation"]["state"] = json!("Processing");
                    new_status["lastOperation"]["lastUpdateTime"] = json!(clock);
                } else {
                    let list = match op {
                        Op::Create => &mut track.script.create,
                        Op::Reconcile => &mut track.script.reconcile,
                        Op::Delete => &mut track.script.delete,
                    };
                    let outcome = list.pop_front().unwrap_or(Outcome::Succeeded);
                    match outcome {
                        Outcome::Succeeded => {
                            new_status["lastOperation"] = json!({
                                "type": op.as_str(), "state": "Succeeded", "progress": 100,
                                "description": match op {
                                    Op::Delete => "Shoot cluster has been successfully deleted.".to_string(),
                                    _ => "Shoot cluster has been successfully reconciled.".to_string(),
                                },
                                "lastUpdateTime": clock,
                            });
                            if let Some(m) = new_status.as_object_mut() {
                                m.remove("lastErrors");
                            }
                            remove_finalizer = op == Op::Delete;
                        }
                        Outcome::Failed { codes, description } => {
                            set_failure(&mut new_status, "Failed", &codes, &description, &clock);
                        }
                        Outcome::Error { codes, description } => {
                            set_failure(&mut new_status, "Error", &codes, &description, &clock);
                        }
                    }
                }
            }
        }
        let gvr = Gvr::shoots();
        let result = self.server.modify(&gvr, ns.as_deref(), name, |obj| {
            obj["status"] = new_status;
            if retry
                && let Some(a) = obj
                    .pointer_mut("/metadata/annotations")
                    .and_then(Value::as_object_mut)
            {
                a.remove(OPERATION_ANNOTATION);
            }
            if remove_finalizer {
                let list: Vec<String> = finalizers(obj)
                    .into_iter()
                    .filter(|f| f != SHOOT_FINALIZER)
                    .collect();
                store::meta_mut(obj).insert("finalizers".into(), json!(list));
            }
        });
        result.is_ok()
    }
}

fn set_failure(status: &mut Value, state: &str, codes: &[String], description: &str, clock: &str) {
    status["lastOperation"]["state"] = json!(state);
    status["lastOperation"]["description"] = json!(description);
    status["lastOperation"]["lastUpdateTime"] = json!(clock);
    status["lastErrors"] = json!([{
        "description": description, "codes": codes, "lastUpdateTime": clock,
    }]);
}
