//! ruleop's requests and watches share one HTTP/2 connection to the API server, where HTTP/1.1
//! would hold one per watch and per request in flight.

use std::time::Duration;

use crate::support::*;

#[test]
fn every_request_and_watch_of_the_operator_shares_one_connection() {
    let ns = Namespace::new("one-connection");
    install_crds();
    let operator = Operator::start(&root().join("rules"), &templates(), &ns.0);
    for name in ["db-a", "db-b", "db-c"] {
        apply_yaml(&ns.0, &database(name, 1, ""));
    }
    wait_until(Duration::from_secs(60), "the Databases' Services", || {
        ["db-a", "db-b", "db-c"]
            .iter()
            .all(|name| exists(&ns.0, &format!("service/{name}-svc")))
    });
    let server = kubectl_ok(&[
        "config",
        "view",
        "--minify",
        "-o",
        "jsonpath={.clusters[0].cluster.server}",
    ]);
    let port: u16 = server
        .trim()
        .rsplit_once(':')
        .and_then(|(_, port)| port.parse().ok())
        .unwrap_or_else(|| panic!("no port in the server URL {server:?}"));
    // Every rule's watches (parents, children, lookups) are open by now, and three parents'
    // writes went through: over HTTP/1.1 that took a connection per watch at least.
    assert_eq!(
        operator.connections_to(port),
        1,
        "connections to the API server at {server}"
    );
}
