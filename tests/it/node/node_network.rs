//! Service routing and cluster DNS on the test cluster's node (tests/node): pods reach a
//! Service by its DNS name and by its ClusterIP through the node's kube-proxy and CoreDNS, a
//! Service with no endpoints is refused at once on this machine, the Service CIDR is blackholed
//! on the host and pods have no default route. The server and the clients are the node's
//! PostgreSQL 16 images (tests/node/images.sh), which must say 16 inside; a data directory of
//! the older minor image is served by the newer. Driven by kubectl; every packet goes to pods on
//! the node's bridge or to the host.

use crate::support::node::ms;
use crate::support::{Namespace, get, kubectl, wait_until};
use std::process::Output;
use std::time::{Duration, Instant};

const POD_READY: Duration = Duration::from_secs(180);
/// How long a connection may try in the pod (psql's `connect_timeout`): a refusal must come well
/// before it.
const CONNECT_TIMEOUT_S: u64 = 10;
const PASSWORD: &str = "net-secret";

/// The API server's --service-cluster-ip-range (tests/apiserver/apiserver.go), blackholed on the
/// host by tests/node/node.sh.
const SERVICE_CIDR: &str = "10.0.0.0/16";

/// A namespace with a PostgreSQL server pod (`server`, image `postgres:16`) behind the Service
/// `db`, a Service `empty` whose selector matches no pod, and a client pod (`client`, image
/// `postgres:16.13`, only sleeping) to run psql in; waits until both pods run.
fn setup(prefix: &str) -> Namespace {
    crate::support::node_control_plane();
    let ns = Namespace::new(prefix);
    crate::support::apply_yaml(
        &ns.0,
        &format!(
            "apiVersion: v1\nkind: Pod\nmetadata: {{name: server, labels: {{app: server}}}}\n\
             spec:\n  containers:\n    - name: postgres\n      image: postgres:16\n      imagePullPolicy: Never\n\
             \x20     env: [{{name: POSTGRES_PASSWORD, value: {PASSWORD}}}]\n      ports: [{{containerPort: 5432}}]\n---\n\
             apiVersion: v1\nkind: Service\nmetadata: {{name: db}}\n\
             spec: {{selector: {{app: server}}, ports: [{{port: 5432, targetPort: 5432}}]}}\n---\n\
             apiVersion: v1\nkind: Service\nmetadata: {{name: empty}}\n\
             spec: {{selector: {{app: nothing-has-this-label}}, ports: [{{port: 5432}}]}}\n---\n\
             apiVersion: v1\nkind: Pod\nmetadata: {{name: client}}\n\
             spec:\n  terminationGracePeriodSeconds: 1\n  containers:\n    - name: client\n      image: postgres:16.13\n\
             \x20     imagePullPolicy: Never\n      command: [sleep, \"3600\"]\n"
        ),
    );
    wait_until(POD_READY, "pods server and client Running", || {
        ["server", "client"]
            .iter()
            .all(|pod| get(&ns.0, &format!("pod/{pod}"), "{.status.phase}") == "Running")
    });
    ns
}

/// `kubectl exec` of `command` in pod `pod`.
fn exec(ns: &Namespace, pod: &str, command: &[&str]) -> Output {
    let mut args = vec!["exec", "-n", &ns.0, pod, "--"];
    args.extend_from_slice(command);
    kubectl(&args)
}

/// psql in the client pod against `host`: `select version()` over TCP with the server's password.
fn psql_version(ns: &Namespace, host: &str) -> Output {
    let conninfo =
        format!("host={host} port=5432 user=postgres password={PASSWORD} connect_timeout={CONNECT_TIMEOUT_S}");
    exec(ns, "client", &["psql", &conninfo, "-Atc", "select version()"])
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).trim().to_owned()
}

#[test]
fn a_pod_reaches_a_service_by_its_dns_name_and_its_cluster_ip_and_postgres_there_is_16() {
    let ns = setup("net-svc");
    let name = format!("db.{}.svc.cluster.local", ns.0);
    let start = Instant::now();
    let mut last = String::new();
    wait_until(POD_READY, &format!("psql in the client reaching {name}"), || {
        let out = psql_version(&ns, &name);
        last = format!("{} {}", text(&out.stdout), text(&out.stderr));
        out.status.success()
    });
    eprintln!(
        "{name} answered from the client pod {} ms after both pods ran",
        ms(start)
    );
    assert!(
        last.starts_with("PostgreSQL 16.15 "),
        "select version() over {name}: {last}"
    );

    // By ClusterIP, and by the short name through the pod's search path.
    let cluster_ip = get(&ns.0, "service/db", "{.spec.clusterIP}");
    assert!(
        cluster_ip.starts_with("10.0."),
        "ClusterIP {cluster_ip:?} in {SERVICE_CIDR}"
    );
    // Polled like the full name above: on a loaded machine one lookup through the search path
    // (A and AAAA per domain) can outlast the resolver's timeout (EAI_AGAIN, seen once in a full
    // `make test`); how many tries it took is printed.
    for host in [cluster_ip.as_str(), "db"] {
        let (mut tries, mut answer) = (0, String::new());
        wait_until(Duration::from_secs(60), &format!("psql to {host}"), || {
            tries += 1;
            let out = psql_version(&ns, host);
            answer = format!("{} {}", text(&out.stdout), text(&out.stderr));
            out.status.success()
        });
        eprintln!("psql to {host} answered at try {tries}");
        assert!(answer.starts_with("PostgreSQL 16.15 "), "over {host}: {answer}");
    }
    // The pod resolves through the cluster DNS on the node's bridge address.
    let resolv = text(&exec(&ns, "client", &["cat", "/etc/resolv.conf"]).stdout);
    assert!(resolv.contains("nameserver 10.244.0.1"), "{resolv}");
    assert!(
        resolv.contains(&format!("search {}.svc.cluster.local", ns.0)),
        "{resolv}"
    );

    // In the server, psql finds the socket where this build looks (/tmp) and where the official
    // image has it.
    for socket in ["/tmp", "/var/run/postgresql"] {
        let out = exec(
            &ns,
            "server",
            &["psql", "-h", socket, "-U", "postgres", "-Atc", "select 1"],
        );
        assert_eq!(text(&out.stdout), "1", "psql over {socket}: {}", text(&out.stderr));
    }

    // Both images hold what their tags say.
    let server = text(&exec(&ns, "server", &["postgres", "--version"]).stdout);
    assert_eq!(server, "postgres (PostgreSQL) 16.15");
    let client = text(&exec(&ns, "client", &["postgres", "--version"]).stdout);
    assert_eq!(client, "postgres (PostgreSQL) 16.13");
}

#[test]
fn a_service_without_endpoints_is_refused_on_this_machine_at_once() {
    let ns = setup("net-empty");
    let cluster_ip = get(&ns.0, "service/empty", "{.spec.clusterIP}");
    assert!(cluster_ip.starts_with("10.0."), "ClusterIP {cluster_ip:?}");
    // The name resolves (CoreDNS has the Service), so what follows is about routing only.
    let name = format!("empty.{}.svc.cluster.local", ns.0);
    let mut last = String::new();
    wait_until(POD_READY, &format!("{name} refused in the client"), || {
        let out = psql_version(&ns, &name);
        last = text(&out.stderr);
        last.contains("Connection refused")
    });
    assert!(last.contains(&cluster_ip), "refused at the ClusterIP: {last}");
    for host in [name.as_str(), cluster_ip.as_str()] {
        // A lookup that times out on a loaded machine (EAI_AGAIN, seen in CI) says nothing about
        // routing: it is retried, counted and printed; the timed try is the one that resolved.
        let mut lookups_failed = 0;
        let (out, took) = loop {
            let start = Instant::now();
            let out = psql_version(&ns, host);
            let took = start.elapsed();
            if text(&out.stderr).contains("could not translate host name") && lookups_failed < 5 {
                lookups_failed += 1;
                eprintln!("{host}: lookup failed ({lookups_failed}): {}", text(&out.stderr));
                continue;
            }
            break (out, took);
        };
        assert!(!out.status.success(), "psql to {host} succeeded");
        let stderr = text(&out.stderr);
        assert!(stderr.contains("Connection refused"), "psql to {host}: {stderr}");
        eprintln!("{host}: refused in {} ms (kubectl exec included)", took.as_millis());
        assert!(
            took < Duration::from_secs(CONNECT_TIMEOUT_S / 2),
            "refused only after {took:?} (connect_timeout {CONNECT_TIMEOUT_S} s): {stderr}"
        );
    }
    // A Service gaining an endpoint is reached at the same address.
    crate::support::merge_patch(&ns.0, "service/empty", r#"{"spec":{"selector":{"app":"server"}}}"#);
    wait_until(
        POD_READY,
        &format!("{cluster_ip} answering once it has an endpoint"),
        || psql_version(&ns, &cluster_ip).status.success(),
    );
}

#[test]
fn the_service_cidr_is_blackholed_and_guarded_on_the_host_and_pods_have_no_default_route() {
    let ns = setup("net-route");
    let out = std::process::Command::new("ip")
        .args(["route", "show", "type", "blackhole", SERVICE_CIDR])
        .output()
        .expect("ip route");
    assert!(out.status.success(), "ip route: {}", text(&out.stderr));
    assert_eq!(
        text(&out.stdout),
        format!("blackhole {SERVICE_CIDR}"),
        "the host's route for the Service CIDR"
    );

    // Forwarding is on for what comes in on the bridge only, and the guard drops whatever would
    // leave the bridge for another interface.
    let forwarding = |key: &str| {
        std::fs::read_to_string(format!("/proc/sys/net/ipv4/{key}"))
            .unwrap_or_else(|e| panic!("{key}: {e}"))
            .trim()
            .to_owned()
    };
    assert_eq!(forwarding("ip_forward"), "0", "the host's ip_forward is left alone");
    assert_eq!(forwarding("conf/ruleop0/forwarding"), "1");
    let guard = std::process::Command::new("iptables")
        .args(["-w", "-t", "mangle", "-S", "FORWARD"])
        .output()
        .expect("iptables");
    assert!(
        text(&guard.stdout)
            .lines()
            .next()
            .is_some_and(|first| first == "-P FORWARD ACCEPT"),
        "{}",
        text(&guard.stdout)
    );
    assert_eq!(
        text(&guard.stdout).lines().nth(1),
        Some("-A FORWARD -j RULEOP-NODE-GUARD"),
        "the guard is the first rule of mangle FORWARD"
    );
    let chain = std::process::Command::new("iptables")
        .args(["-w", "-t", "mangle", "-S", "RULEOP-NODE-GUARD"])
        .output()
        .expect("iptables");
    assert!(
        text(&chain.stdout).contains("-A RULEOP-NODE-GUARD -i ruleop0 ! -o ruleop0 -j DROP"),
        "{}",
        text(&chain.stdout)
    );

    // /proc/net/route in each pod: destination, gateway and mask in little-endian hex.
    for pod in ["server", "client"] {
        let routes = text(&exec(&ns, pod, &["cat", "/proc/net/route"]).stdout);
        let entries: Vec<(String, String, String)> = routes
            .lines()
            .skip(1)
            .filter_map(|line| {
                let fields: Vec<&str> = line.split_whitespace().collect();
                Some((
                    (*fields.get(1)?).to_owned(),
                    (*fields.get(2)?).to_owned(),
                    (*fields.get(7)?).to_owned(),
                ))
            })
            .collect();
        assert!(
            !entries
                .iter()
                .any(|(destination, _, mask)| destination == "00000000" && mask == "00000000"),
            "{pod} has a default route:\n{routes}"
        );
        // 10.0.0.0/16 via 10.244.0.1 (the bridge), the pods' subnet on-link: nothing else.
        let mut expected = vec![
            ("0000000A".to_owned(), "0100F40A".to_owned(), "0000FFFF".to_owned()),
            ("0000F40A".to_owned(), "00000000".to_owned(), "00FFFFFF".to_owned()),
        ];
        let mut entries = entries;
        entries.sort();
        expected.sort();
        assert_eq!(entries, expected, "{pod}'s routes:\n{routes}");
    }
}

/// A pod of `image` running the entrypoint on the claim `data` (PGDATA below its mount, as the
/// Database's StatefulSet has it).
fn postgres_on_claim(ns: &Namespace, pod: &str, image: &str) {
    crate::support::apply_yaml(
        &ns.0,
        &format!(
            "apiVersion: v1\nkind: Pod\nmetadata: {{name: {pod}}}\n\
             spec:\n  containers:\n    - name: postgres\n      image: \"{image}\"\n      imagePullPolicy: Never\n\
             \x20     env: [{{name: POSTGRES_PASSWORD, value: {PASSWORD}}}, {{name: PGDATA, value: /var/lib/postgresql/data/pgdata}}]\n\
             \x20     volumeMounts: [{{name: data, mountPath: /var/lib/postgresql/data}}]\n\
             \x20 volumes: [{{name: data, persistentVolumeClaim: {{claimName: data}}}}]\n"
        ),
    );
}

/// `psql -Atc SQL` in `pod` over its Unix socket, once it answers.
fn psql_when_up(ns: &Namespace, pod: &str, sql: &str) -> String {
    let mut answer = String::new();
    wait_until(POD_READY, &format!("postgres in {pod} answering {sql:?}"), || {
        let out = exec(ns, pod, &["psql", "-U", "postgres", "-Atc", sql]);
        answer = text(&out.stdout);
        out.status.success()
    });
    answer
}

#[test]
fn a_data_directory_that_postgres_16_13_made_is_served_by_16_15() {
    crate::support::node_control_plane();
    let ns = Namespace::new("net-minor");
    crate::support::apply_yaml(
        &ns.0,
        "apiVersion: v1\nkind: PersistentVolumeClaim\nmetadata: {name: data}\n\
         spec: {accessModes: [ReadWriteOnce], resources: {requests: {storage: 1Gi}}}\n",
    );
    postgres_on_claim(&ns, "old", "postgres:16.13");
    psql_when_up(&ns, "old", "create table t as select generate_series(1, 1000) as i");
    assert_eq!(psql_when_up(&ns, "old", "select count(*) from t"), "1000");
    assert!(psql_when_up(&ns, "old", "select version()").starts_with("PostgreSQL 16.13 "));
    crate::support::kubectl_ok(&["delete", "pod", "-n", &ns.0, "old", "--wait=true"]);

    postgres_on_claim(&ns, "new", "postgres:16.15");
    assert!(psql_when_up(&ns, "new", "select version()").starts_with("PostgreSQL 16.15 "));
    assert_eq!(psql_when_up(&ns, "new", "select count(*) from t"), "1000");
}
