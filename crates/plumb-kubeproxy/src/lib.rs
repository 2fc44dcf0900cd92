//! kube-proxy conventions (placeholder).
