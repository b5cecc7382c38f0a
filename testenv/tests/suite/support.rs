//! Helpers shared by the testenv integration tests.

use kube::{
    Api, Client,
    api::{ApiResource, DynamicObject, GroupVersionKind},
};

/// `core.gardener.cloud/v1beta1` `shoots`.
pub fn shoot_resource() -> ApiResource {
    ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("core.gardener.cloud", "v1beta1", "Shoot"),
        "shoots",
    )
}

/// The Shoots of namespace `ns`.
pub fn shoots(client: &Client, ns: &str) -> Api<DynamicObject> {
    Api::namespaced_with(client.clone(), ns, &shoot_resource())
}

/// The `kube::Error::Api` status, panicking on any other error.
pub fn status(e: kube::Error) -> kube::core::Status {
    match e {
        kube::Error::Api(s) => *s,
        other => panic!("expected an API error, got {other:?}"),
    }
}
