//! The Runtime CustomResourceDefinition, generated from the types and the status table.
