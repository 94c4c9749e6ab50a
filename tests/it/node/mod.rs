//! End to end on the node (containerd, kubelet, scheduler, kube-proxy, CoreDNS): ruleop as a
//! Pod, the Database story, peers' examples that need Pods, Service routing, and the Helm chart
//! installed and upgraded there, and a staged rollout halted by an image that cannot be pulled.

mod e2e;
mod helm_node;
mod node_network;
mod peers_node;
mod rollout_node;
