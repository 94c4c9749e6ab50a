//! End to end on the node (containerd, kubelet, scheduler, kube-proxy, CoreDNS): ruleop as a
//! Pod, the Database story, peers' examples that need Pods, Service routing.

mod e2e;
mod node_network;
mod peers_node;
