//! kim's integration tests, one test binary (`cargo test --test suite`): one module per area,
//! each named as the file it lives in (`real_failures::…`, `webhook_tls::…`), the shared
//! helpers in [`support`]. The tests run in one process, side by side on the test harness's
//! threads: process-wide state (the tracing subscriber, the rustls crypto provider) is set up
//! once by `support` and nothing here changes environment variables or the current directory.

mod support;

mod admission;
mod api_samples;
mod audit_faults_ratcheting_and_schema;
mod cli;
mod control_plane;
mod crd;
mod helm_chart;
mod kim_compat;
mod ops_rules;
mod prometheus;
mod properties;
mod real_admission;
mod real_adversarial;
mod real_api_faults;
mod real_audit;
mod real_crd;
mod real_deadlines_and_secrets;
mod real_differential;
mod real_failures;
mod real_faults;
mod real_gardener_failures;
mod real_kubectl;
mod real_lifecycle;
mod real_load;
mod real_manifests;
mod real_map;
mod real_namespaces;
mod real_ops;
mod real_rollout;
mod real_samples;
mod real_shoots;
mod real_takeover;
mod real_vap;
mod samples;
mod simulate_example;
mod status_model;
mod webhook_bad_input;
mod webhook_certs_signals_and_secrets;
mod webhook_process;
mod webhook_reviews;
mod webhook_tls;
