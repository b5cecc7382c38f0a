// Internals that several of kim's integration tests and benches reach; each stays defined
// (and documented) where it lives.

pub mod model;

/// Runtime → Shoot conversion (the CRD and sample tests).
pub mod gardener {
    pub use crate::gardener::convert::{ConversionError, runtime_to_shoot};
}

/// The reconciler's parts below its entry point ([`crate::reconciler::run_with`]).
pub mod reconciler {
    pub use crate::reconciler::admins::{SyncReport, binding_name, runtime_client, sync};
    pub use crate::reconciler::context::Ctx;
    pub use crate::reconciler::controller::fill_caches;
    pub use crate::reconciler::deadline::RequestTimeoutLayer;
    pub use crate::reconciler::error::Error;
    pub use crate::reconciler::kubeconfig::SECRET_KEY;
    pub use crate::reconciler::reconcile::reconcile;
    pub use crate::reconciler::status_update::{Cond, Update, next_status};
}

/// The API-server-like CRD schema check of `kim check` and `kim review`.
pub mod schema {
    pub use crate::schema::{FieldError, Report, check, is_k8s_byte, is_k8s_date_time, is_runtime};
}

/// The webhook's TLS material and metric buckets.
pub mod webhook {
    pub use crate::webhook::metrics::LATENCY_BUCKETS;

    /// TLS configuration and certificate loading.
    pub mod certs {
        pub use crate::webhook::certs::{
            CertPair, Loaded, install_default_provider, load_dir, provider,
        };
    }

    /// Self-signed development certificates.
    pub mod devcerts {
        pub use crate::webhook::devcerts::{DevCerts, ensure, generate};
    }
}
