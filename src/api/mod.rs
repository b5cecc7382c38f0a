//! Kubernetes API types: the `Runtime` custom resource.
