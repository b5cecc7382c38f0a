//! Helpers shared by the testenv integration tests.
#![allow(dead_code)]

use kube::{
    Api, Client,
    api::{ApiResource, DynamicObject, GroupVersionKind},
};
use serde_json::Value;

pub fn runtime_resource() -> ApiResource {
    ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("infrastructuremanager.kyma-project.io", "v1", "Runtime"),
        "runtimes",
    )
}

pub fn shoot_resource() -> ApiResource {
    ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("core.gardener.cloud", "v1beta1", "Shoot"),
        "shoots",
    )
}

pub fn runtimes(client: &Client, ns: &str) -> Api<DynamicObject> {
    Api::namespaced_with(client.clone(), ns, &runtime_resource())
}

pub fn shoots(client: &Client, ns: &str) -> Api<DynamicObject> {
    Api::namespaced_with(client.clone(), ns, &shoot_resource())
}

pub fn runtime(name: &str, ns: &str, data: Value) -> DynamicObject {
    DynamicObject::new(name, &runtime_resource())
        .within(ns)
        .data(data)
}

pub fn shoot(name: &str, ns: &str, data: Value) -> DynamicObject {
    DynamicObject::new(name, &shoot_resource())
        .within(ns)
        .data(data)
}

/// The HTTP code of a `kube::Error::Api`, panicking on any other error.
pub fn code(e: kube::Error) -> u16 {
    match e {
        kube::Error::Api(s) => s.code,
        other => panic!("expected an API error, got {other:?}"),
    }
}

/// The `kube::Error::Api` status, panicking on any other error.
pub fn status(e: kube::Error) -> kube::core::Status {
    match e {
        kube::Error::Api(s) => *s,
        other => panic!("expected an API error, got {other:?}"),
    }
}

/// A Secret `name` with `labels` and nothing else.
pub fn secret(name: &str, labels: &[(&str, &str)]) -> k8s_openapi::api::core::v1::Secret {
    k8s_openapi::api::core::v1::Secret {
        metadata: kube::api::ObjectMeta {
            name: Some(name.into()),
            labels: Some(
                labels
                    .iter()
                    .map(|(k, v)| (k.to_string(), v.to_string()))
                    .collect(),
            ),
            ..Default::default()
        },
        ..Default::default()
    }
}
