//! testenv's own tests, one test binary (`cargo test -p testenv --test suite`): the real
//! gardener-apiserver (`garden`) and the simulated gardenlet on it (`gardenlet`); shared helpers
//! in [`support`].

mod support;

mod garden;
mod gardenlet;
