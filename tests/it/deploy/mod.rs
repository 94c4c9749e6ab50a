//! What ships: the kustomize deployment against the control plane, and the container image.

mod image;
mod kustomize;
