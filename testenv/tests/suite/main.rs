//! testenv's own tests, one test binary (`cargo test -p testenv --test suite`): the API server
//! over HTTP with kube-rs clients (`api`), watches and a real kube-runtime Controller
//! (`watch`), the journal of committed changes (`journal`), the simulated Gardener
//! (`gardener`), the real gardener-apiserver (`garden`) and the simulated gardenlet on it
//! (`gardenlet`); shared helpers in [`support`].

mod support;

mod api;
mod garden;
mod gardener;
mod gardenlet;
mod journal;
mod watch;
