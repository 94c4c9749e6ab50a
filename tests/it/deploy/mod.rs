//! What ships: the kustomize deployment and the Helm chart against the control plane, and the
//! container image.

mod helm;
mod image;
mod kustomize;
