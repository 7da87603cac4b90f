//! What the chart renders, read as objects: the Redis password is on no
//! command line (and the rendered Redis command, run with the real
//! redis-server, does require it), the NetworkPolicy admits exactly the
//! operator and the pods the operator starts for scans (their labels taken
//! from `desired`, not copied), PodDisruptionBudgets never block a drain of
//! a single replica, and `existingSecret` and the image digest are used.
//! Needs `helm` (scripts/install-kube.sh) and `redis-server`; no apiserver.

use bucketscan_operator::crd::{BucketScan, BucketScanSpec, Output, Source};
use bucketscan_operator::desired::{self, Settings};
use serde_json::Value;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .to_path_buf()
}

/// `helm template` with `values`, as JSON objects.
fn render(values: &[&str]) -> Vec<Value> {
    let out = Command::new("helm")
        .args(["template", "bs", "charts/bucketscan", "--namespace", "scans"])
        .args(values)
        .current_dir(repo())
        .output()
        .unwrap_or_else(|e| panic!("helm: {e} (scripts/install-kube.sh installs it)"));
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(
        out.status.success(),
        "helm template failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    text.split("\n---")
        .filter_map(|doc| serde_saphyr::from_str::<Value>(doc).ok())
        .filter(|v| v.is_object())
        .collect()
}

fn find<'a>(objects: &'a [Value], kind: &str, component: &str) -> Option<&'a Value> {
    objects
        .iter()
        .find(|o| o["kind"] == kind && o["metadata"]["labels"]["app.kubernetes.io/component"] == component)
}

fn labels(v: &Value) -> BTreeMap<String, String> {
    serde_json::from_value(v.clone()).unwrap_or_default()
}

/// Whether a LabelSelector (matchLabels, matchExpressions In/NotIn/Exists) selects `l`.
fn selects(selector: &Value, l: &BTreeMap<String, String>) -> bool {
    let by_label = labels(&selector["matchLabels"])
        .iter()
        .all(|(k, v)| l.get(k) == Some(v));
    let by_expr = selector["matchExpressions"]
        .as_array()
        .into_iter()
        .flatten()
        .all(|e| {
            let value = l.get(e["key"].as_str().unwrap());
            let listed = |v: &String| e["values"].as_array().unwrap().iter().any(|x| x == v.as_str());
            match e["operator"].as_str().unwrap() {
                "In" => value.is_some_and(listed),
                "NotIn" => !value.is_some_and(listed),
                "Exists" => value.is_some(),
                other => panic!("operator {other} not handled"),
            }
        });
    by_label && by_expr
}

fn a_scan() -> BucketScan {
    let mut scan = BucketScan::new(
        "photos",
        BucketScanSpec {
            source: Source {
                bucket: "photos".into(),
                region: "us-east-1".into(),
                ..Source::default()
            },
            output: Output {
                bucket: "results".into(),
                ..Output::default()
            },
            ..Default::default()
        },
    );
    scan.metadata.namespace = Some("team-a".into());
    scan.metadata.uid = Some("0f1e2d3c".into());
    scan
}

/// Labels of the pods that reach Redis: the worker Deployment's, the plan
/// Job's (a scan on its pods' identity plans in its own pod) and the merge
/// Job's.
fn scan_pod_labels() -> Vec<BTreeMap<String, String>> {
    let scan = a_scan();
    let settings = Settings::default();
    let d = desired::worker_deployment(&scan, &settings, 1, false);
    let jobs = [
        desired::plan_job(&scan, &settings, false, false),
        desired::plan_job(&scan, &settings, false, true),
        desired::merge_job(&scan, &settings, false),
    ];
    let mut labels = vec![d.spec.unwrap().template.metadata.unwrap().labels.unwrap()];
    for j in jobs {
        labels.push(j.spec.unwrap().template.metadata.unwrap().labels.unwrap());
    }
    labels
}

fn pod_labels(o: &Value) -> BTreeMap<String, String> {
    labels(&o["spec"]["template"]["metadata"]["labels"])
}

#[test]
fn only_the_operator_and_scan_pods_may_reach_redis() {
    for (values, cluster_wide) in [
        (&[][..], true),
        (&["--set=operator.watchOwnNamespace=true"][..], false),
    ] {
        let objects = render(values);
        let policy = find(&objects, "NetworkPolicy", "redis").expect("a NetworkPolicy for Redis");
        let redis = find(&objects, "Deployment", "redis").unwrap();
        let operator = find(&objects, "Deployment", "operator").unwrap();
        assert!(selects(&policy["spec"]["podSelector"], &pod_labels(redis)));
        assert!(!selects(&policy["spec"]["podSelector"], &pod_labels(operator)));
        assert_eq!(policy["spec"]["policyTypes"], serde_json::json!(["Ingress"]));
        let rules = policy["spec"]["ingress"].as_array().unwrap();
        assert_eq!(rules.len(), 1, "{rules:?}");
        let peers = rules[0]["from"].as_array().unwrap();
        let admitted = |l: &BTreeMap<String, String>, ns_selected: bool| {
            peers.iter().any(|p| {
                let same_ns = p.get("namespaceSelector").is_none();
                selects(&p["podSelector"], l) && (same_ns || ns_selected)
            })
        };
        assert!(admitted(&pod_labels(operator), false), "the operator");
        for l in scan_pod_labels() {
            assert!(admitted(&l, true), "scan pod {l:?}");
            // In its own namespace only when the install is namespaced.
            assert_eq!(admitted(&l, false), !cluster_wide, "{l:?}");
        }
        let mut stranger = scan_pod_labels()[0].clone();
        stranger.insert("app.kubernetes.io/component".into(), "redis-credentials".into());
        assert!(
            !admitted(&stranger, true),
            "a pod that is neither worker, plan nor merge"
        );
        let cleanup = desired::cleanup_job(&a_scan(), &Settings::default());
        let cleanup = cleanup.spec.unwrap().template.metadata.unwrap().labels.unwrap();
        assert!(!admitted(&cleanup, true), "delete-parts needs no Redis");
        assert!(!admitted(&BTreeMap::from([("app".into(), "x".into())]), true));
    }
}

/// The scan pods' peer of the Redis NetworkPolicy, and whether its
/// namespaceSelector selects the namespace `ns`.
fn redis_admits_scan_pods_in(objects: &[Value], ns: &str) -> bool {
    let policy = find(objects, "NetworkPolicy", "redis").expect("a NetworkPolicy for Redis");
    let peers = policy["spec"]["ingress"][0]["from"].as_array().unwrap();
    let namespace = BTreeMap::from([("kubernetes.io/metadata.name".to_string(), ns.to_string())]);
    let worker = &scan_pod_labels()[0];
    peers
        .iter()
        .filter(|p| selects(&p["podSelector"], worker))
        .any(|p| selects(&p["namespaceSelector"], &namespace))
}

#[test]
fn scan_pods_reach_redis_from_the_namespaces_that_may_run_scans() {
    let default = render(&[]);
    assert!(redis_admits_scan_pods_in(&default, "default"));
    assert!(
        !redis_admits_scan_pods_in(&default, "team-b"),
        "not a scan namespace"
    );
    let teams = render(&["--set=operator.scanNamespaces={team-a,team-b}"]);
    assert!(redis_admits_scan_pods_in(&teams, "team-b"));
    assert!(!redis_admits_scan_pods_in(&teams, "default"));
    let everywhere = render(&["--set=operator.scanNamespaces={*}"]);
    assert!(redis_admits_scan_pods_in(&everywhere, "anything"));
    let chosen = render(&[
        "--set=operator.scanNamespaces={*}",
        "--set=redis.networkPolicy.scanNamespaceSelector.matchLabels.scans=allowed",
    ]);
    assert!(
        !redis_admits_scan_pods_in(&chosen, "anything"),
        "the explicit selector wins"
    );
}

#[test]
fn pod_disruption_budgets_never_block_a_drain_of_one_replica() {
    let pdb = |objects: &[Value], component: &str| {
        find(objects, "PodDisruptionBudget", component).cloned().unwrap()
    };
    let objects = render(&[]);
    let redis = pdb(&objects, "redis");
    assert_eq!(redis["spec"]["maxUnavailable"], 1);
    assert!(selects(
        &redis["spec"]["selector"],
        &pod_labels(find(&objects, "Deployment", "redis").unwrap())
    ));
    let operator = pdb(&objects, "operator");
    assert_eq!(operator["spec"]["maxUnavailable"], 1, "one replica: evictable");
    assert!(selects(
        &operator["spec"]["selector"],
        &pod_labels(find(&objects, "Deployment", "operator").unwrap())
    ));
    let two = render(&["--set=operator.replicas=2"]);
    assert_eq!(
        pdb(&two, "operator")["spec"]["minAvailable"],
        1,
        "two replicas: one stays"
    );
    let none = render(&[
        "--set=operator.podDisruptionBudget.enabled=false",
        "--set=redis.podDisruptionBudget.enabled=false",
        "--set=redis.networkPolicy.enabled=false",
    ]);
    assert!(none
        .iter()
        .all(|o| o["kind"] != "PodDisruptionBudget" && o["kind"] != "NetworkPolicy"));
}

#[test]
fn an_existing_secret_and_a_digest_are_used() {
    let digest = format!("sha256:{}", "ab".repeat(32));
    let objects = render(&[
        "--set=redis.auth.existingSecret=redis-auth",
        "--set=redis.auth.existingSecretKey=pw",
        &format!("--set=redis.image.digest={digest}"),
    ]);
    assert!(
        objects.iter().all(|o| o["kind"] != "Secret"),
        "no generated Secret"
    );
    for component in ["redis", "operator"] {
        let pod = &find(&objects, "Deployment", component).unwrap()["spec"]["template"]["spec"];
        let env = pod["containers"][0]["env"].as_array().unwrap();
        let password = env.iter().find(|e| e["name"] == "REDIS_PASSWORD").unwrap();
        assert_eq!(
            password["valueFrom"]["secretKeyRef"],
            serde_json::json!({"name": "redis-auth", "key": "pw"}),
            "{component}"
        );
    }
    let redis = &find(&objects, "Deployment", "redis").unwrap()["spec"]["template"]["spec"];
    assert_eq!(
        redis["containers"][0]["image"],
        format!("redis:7.2.11-alpine@{digest}")
    );
    let default = render(&[]);
    let image =
        &find(&default, "Deployment", "redis").unwrap()["spec"]["template"]["spec"]["containers"][0]["image"];
    let tag = image.as_str().unwrap().rsplit(':').next().unwrap();
    assert!(
        tag.chars().next().unwrap().is_ascii_digit() && tag.matches('.').count() == 2,
        "pinned to a patch release: {image}"
    );
}

/// The generated password appears in the Secret only (not in any argument
/// or plain env value), and the Redis container's command, run as it is
/// (paths moved to a scratch directory) with the real redis-server, starts a
/// Redis that refuses clients without the password, with a password full of
/// quotes, backslashes and spaces on no command line nor in its environment.
#[tokio::test]
async fn the_redis_password_is_on_no_command_line() {
    let objects = render(&[]);
    let secret = objects.iter().find(|o| o["kind"] == "Secret").unwrap();
    let generated = secret["stringData"]["password"].as_str().unwrap();
    assert_eq!(generated.len(), 32);
    let elsewhere: Vec<_> = objects
        .iter()
        .filter(|o| o["kind"] != "Secret")
        .filter(|o| o.to_string().contains(generated))
        .collect();
    assert!(elsewhere.is_empty(), "the password leaks into {elsewhere:?}");

    let redis = &find(&objects, "Deployment", "redis").unwrap()["spec"]["template"]["spec"]["containers"][0];
    let command: Vec<String> = serde_json::from_value(redis["command"].clone()).unwrap();
    let mut args: Vec<String> = serde_json::from_value(redis["args"].clone()).unwrap();
    assert_eq!(command, ["/bin/sh", "-c"]);
    assert!(!args.join(" ").contains("--requirepass"), "{args:?}");
    let dir = std::env::temp_dir().join(format!("bucketscan-chart-redis-{}", std::process::id()));
    std::fs::create_dir_all(dir.join("run")).unwrap();
    std::fs::create_dir_all(dir.join("data")).unwrap();
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let script = args[0]
        .replace("/run/redis", dir.join("run").to_str().unwrap())
        .replace(
            "--dir /data",
            &format!(
                "--port {port} --bind 127.0.0.1 --dir {}",
                dir.join("data").display()
            ),
        );
    assert_ne!(
        script, args[0],
        "the script no longer has the paths this test moves"
    );
    args[0] = script;
    let password = r#"pa ss"wo\rd'$x"#;
    let mut child = Command::new(&command[0])
        .args(&command[1..])
        .args(&args)
        .env("REDIS_PASSWORD", password)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let url = |auth: &str| format!("redis://{auth}127.0.0.1:{port}");
    let encoded: String = password.bytes().map(|b| format!("%{b:02X}")).collect();
    let mut connected = None;
    for _ in 0..100 {
        let client = redis::Client::open(url(&format!(":{encoded}@"))).unwrap();
        if let Ok(c) = client.get_multiplexed_async_connection().await {
            connected = Some(c);
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let mut con = connected.expect("redis-server started with the chart's command accepts the password");
    let pong: String = redis::cmd("PING").query_async(&mut con).await.unwrap();
    assert_eq!(pong, "PONG");
    let anonymous = redis::Client::open(url("")).unwrap();
    let mut anon = anonymous.get_multiplexed_async_connection().await.unwrap();
    let refused = redis::cmd("GET")
        .arg("k")
        .query_async::<Option<String>>(&mut anon)
        .await;
    assert!(
        refused.unwrap_err().to_string().contains("NOAUTH"),
        "no password, no access"
    );
    // exec: the container's process is redis-server itself.
    let pid = child.id();
    let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap();
    let environ = std::fs::read(format!("/proc/{pid}/environ")).unwrap();
    let argv0 = String::from_utf8_lossy(cmdline.split(|b| *b == 0).next().unwrap()).into_owned();
    assert!(
        argv0.contains("redis-server") && !argv0.contains("sh"),
        "not exec'd: {argv0}"
    );
    for (what, bytes) in [("command line", &cmdline), ("environment", &environ)] {
        assert!(
            !String::from_utf8_lossy(bytes).contains("wo\\rd"),
            "the password is in redis-server's {what}"
        );
    }
    let _ = child.kill();
    let _ = child.wait();
    let _ = std::fs::remove_dir_all(&dir);
}

/// One default image: the chart's operator and worker images and the
/// operator binary's own default are the same name and version.
#[test]
fn operator_workers_and_merge_default_to_one_image() {
    let chart = std::fs::read_to_string(repo().join("charts/bucketscan/Chart.yaml")).unwrap();
    let app_version = chart
        .lines()
        .find_map(|l| l.strip_prefix("appVersion:"))
        .unwrap()
        .trim()
        .trim_matches('"');
    assert_eq!(app_version, env!("CARGO_PKG_VERSION"));
    let objects = render(&[]);
    let operator =
        &find(&objects, "Deployment", "operator").unwrap()["spec"]["template"]["spec"]["containers"][0];
    assert_eq!(operator["image"], desired::DEFAULT_IMAGE);
    let env = operator["env"].as_array().unwrap();
    let value = |name: &str| {
        env.iter()
            .find(|e| e["name"] == name)
            .map(|e| e["value"].as_str().unwrap().to_string())
    };
    assert_eq!(
        value("BUCKETSCAN_WORKER_IMAGE").as_deref(),
        Some(desired::DEFAULT_IMAGE)
    );
    assert_eq!(Settings::default().worker_image, desired::DEFAULT_IMAGE);
    // The chart's worker resources reach the operator as the default it applies.
    let resources: k8s_openapi::api::core::v1::ResourceRequirements =
        serde_json::from_str(&value("BUCKETSCAN_WORKER_RESOURCES").unwrap()).unwrap();
    assert_eq!(resources, desired::default_worker_resources());
    assert_eq!(
        value("BUCKETSCAN_ALLOWED_WORKER_IMAGES").as_deref(),
        Some("ghcr.io/bucketscan/bucketscan"),
        "by default the chart's own worker image only"
    );
    let allowed_with = |values: &[&str]| {
        let objects = render(values);
        let operator =
            &find(&objects, "Deployment", "operator").unwrap()["spec"]["template"]["spec"]["containers"][0];
        let env = operator["env"].as_array().unwrap().clone();
        let allowed = env
            .into_iter()
            .find(|e| e["name"] == "BUCKETSCAN_ALLOWED_WORKER_IMAGES");
        allowed.unwrap()["value"].as_str().unwrap().to_string()
    };
    assert_eq!(
        allowed_with(&["--set=worker.image.repository=reg.example/mirror/bucketscan"]),
        "reg.example/mirror/bucketscan"
    );
    assert_eq!(
        allowed_with(&["--set=worker.allowedImages={reg.example/bucketscan,mirror.example/team/}"]),
        "reg.example/bucketscan,mirror.example/team/"
    );
    assert_eq!(allowed_with(&["--set=worker.allowedImages={*}"]), "*");
}

/// The chart's CRDs (templates/crds.yaml: BucketScan's and
/// BucketScanSchedule's) are the generated ones, with the chart's labels;
/// `crds.keep` adds the annotation that makes `helm uninstall` leave them,
/// and `crds.install=false` renders none.
#[test]
fn the_crd_is_the_generated_one_and_follows_the_crds_values() {
    let crds = |objects: Vec<Value>| -> Vec<Value> {
        objects
            .into_iter()
            .filter(|o| o["kind"] == "CustomResourceDefinition")
            .collect()
    };
    let kept = crds(render(&[]));
    assert_eq!(kept.len(), 2, "the two CRDs by default");
    for (rendered, file) in kept.iter().zip(["bucketscans", "bucketscanschedules"]) {
        let generated: Value = serde_saphyr::from_str(
            &std::fs::read_to_string(repo().join(format!("crds/{file}.bucketscan.dev.yaml"))).unwrap(),
        )
        .unwrap();
        let mut crd = rendered.clone();
        assert_eq!(crd["metadata"]["annotations"]["helm.sh/resource-policy"], "keep");
        assert_eq!(crd["metadata"]["labels"]["app.kubernetes.io/name"], "bucketscan");
        let metadata = crd["metadata"].as_object_mut().unwrap();
        metadata.remove("labels");
        metadata.remove("annotations");
        // YAML through Helm's fromYaml/toYaml writes `minimum: 0.0` as `0`: the
        // same JSON number, so numbers compare as numbers.
        assert!(
            same_numbers(&crd) == same_numbers(&generated),
            "the rendered CRD {file} differs from crds/ (run `just crds`)"
        );
    }

    let dropped = crds(render(&["--set=crds.keep=false"]));
    assert_eq!(dropped.len(), 2);
    for crd in &dropped {
        assert!(
            crd["metadata"].get("annotations").is_none(),
            "{}",
            crd["metadata"]
        );
    }

    assert!(crds(render(&["--set=crds.install=false"])).is_empty());
}

/// The `helm test` pod runs `bucketscan-operator check` against the metrics
/// Service's /readyz, as a ServiceAccount that may only list BucketScans in
/// the release namespace, with the restricted security context.
#[test]
fn helm_test_checks_readiness_and_the_crd_with_least_rights() {
    let objects = render(&[]);
    let hook = |kind: &str| {
        objects
            .iter()
            .find(|o| o["kind"] == kind && o["metadata"]["annotations"]["helm.sh/hook"] == "test")
            .unwrap_or_else(|| panic!("a test hook {kind}"))
    };
    let pod = hook("Pod");
    let container = &pod["spec"]["containers"][0];
    assert_eq!(
        container["command"],
        serde_json::json!(["bucketscan-operator", "check"])
    );
    let service = objects
        .iter()
        .find(|o| o["kind"] == "Service" && o["metadata"]["name"] == "bs-bucketscan-metrics")
        .expect("the metrics Service");
    let port = &service["spec"]["ports"][0]["port"];
    let readyz = format!("--readyz=http://bs-bucketscan-metrics.scans.svc:{port}/readyz");
    assert_eq!(
        container["args"],
        serde_json::json!(["--namespace=scans", readyz]),
        "the readyz URL is the metrics Service's"
    );
    assert_eq!(pod["spec"]["securityContext"]["runAsNonRoot"], true);
    assert_eq!(container["securityContext"]["allowPrivilegeEscalation"], false);
    assert_eq!(
        pod["spec"]["serviceAccountName"],
        hook("ServiceAccount")["metadata"]["name"]
    );
    assert_eq!(
        hook("Role")["rules"],
        serde_json::json!([{"apiGroups": ["bucketscan.dev"], "resources": ["bucketscans"], "verbs": ["list"]}])
    );
    assert_eq!(
        hook("RoleBinding")["subjects"][0]["name"],
        pod["spec"]["serviceAccountName"]
    );

    let without_metrics = render(&["--set=metrics.enabled=false"]);
    let pod = without_metrics
        .iter()
        .find(|o| o["kind"] == "Pod")
        .expect("the test pod");
    assert_eq!(
        pod["spec"]["containers"][0]["args"],
        serde_json::json!(["--namespace=scans"])
    );
}

/// `v` with every number as a float.
fn same_numbers(v: &Value) -> Value {
    match v {
        Value::Number(n) => serde_json::json!(n.as_f64().unwrap()),
        Value::Array(a) => Value::Array(a.iter().map(same_numbers).collect()),
        Value::Object(o) => Value::Object(o.iter().map(|(k, v)| (k.clone(), same_numbers(v))).collect()),
        other => other.clone(),
    }
}

/// Dotted paths of the leaves of a values tree (a map is a branch; a list,
/// scalar or empty map is a leaf).
fn leaf_paths(v: &Value, prefix: &str, out: &mut Vec<String>) {
    match v.as_object() {
        Some(map) if !map.is_empty() => {
            for (k, child) in map {
                let path = if prefix.is_empty() {
                    k.clone()
                } else {
                    format!("{prefix}.{k}")
                };
                leaf_paths(child, &path, out);
            }
        }
        _ => out.push(prefix.to_string()),
    }
}

/// Whether the first cell of a row of the README's values table documents
/// `path`: it names the path, or a branch of it (whole or as `branch.*`),
/// either whole or after a sibling that names the parent whole
/// (`operator.concurrency`, `logFormat`; `metrics.enabled`, `serviceMonitor.*`).
fn row_documents(cell: &str, path: &str) -> bool {
    let segments: Vec<&str> = path.split('.').collect();
    (0..segments.len()).any(|i| {
        let head = segments[..i].join(".");
        (i == 0 || cell.contains(&format!("`{head}.")))
            && (i + 1..=segments.len()).any(|j| {
                let named = segments[i..j].join(".");
                cell.contains(&format!("`{named}`")) || cell.contains(&format!("`{named}.*`"))
            })
    })
}

#[test]
fn every_chart_value_is_in_the_readme() {
    let values: Value = serde_saphyr::from_str(
        &std::fs::read_to_string(repo().join("charts/bucketscan/values.yaml")).unwrap(),
    )
    .unwrap();
    let readme = std::fs::read_to_string(repo().join("charts/bucketscan/README.md")).unwrap();
    let rows: Vec<&str> = readme
        .lines()
        .filter(|l| l.starts_with("| `"))
        .filter_map(|l| l.split('|').nth(1))
        .collect();
    let mut paths = Vec::new();
    leaf_paths(&values, "", &mut paths);
    assert!(paths.len() > 40, "{paths:?}");
    let missing: Vec<_> = paths
        .iter()
        .filter(|p| !rows.iter().any(|r| row_documents(r, p)))
        .collect();
    assert!(
        missing.is_empty(),
        "values missing from charts/bucketscan/README.md: {missing:?}"
    );
    // The check itself: a value no row names is found.
    for absent in [
        "operator.noSuchValue",
        "redis.auth.noSuchValue",
        "image.noSuchValue",
    ] {
        assert!(!rows.iter().any(|r| row_documents(r, absent)), "{absent}");
    }
}

/// The bundled Redis bounds its clients' buffers (maxmemory-clients) as
/// well as its data, and the chart refuses the two together at or over the
/// container's limit (the kernel would kill Redis before Redis refuses a
/// write); the operator gets the per-scan Redis budget.
#[test]
fn redis_memory_and_client_buffers_fit_its_limit_and_scans_have_a_budget() {
    let objects = render(&[]);
    let text = serde_json::to_string(&objects).unwrap();
    assert!(
        text.contains("--maxmemory-clients \\\"64mb\\\""),
        "maxmemory-clients set"
    );
    assert!(text.contains("--max-redis-bytes-per-scan=67108864"));
    let out = Command::new("helm")
        .args([
            "template",
            "bs",
            "charts/bucketscan",
            "--set",
            "redis.maxmemoryClients=200mb",
        ])
        .current_dir(repo())
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "384mb + 200mb over 512Mi is refused");
    assert!(
        err.contains("must stay below redis.resources.limits.memory"),
        "{err}"
    );
}

/// BucketScanSchedules in the chart's roles: the operator watches them,
/// writes their status and creates and deletes their runs; the aggregated
/// edit role writes them, view reads them.
#[test]
fn the_roles_grant_bucketscanschedules() {
    let objects = render(&[]);
    let grants = |role: &str, resource: &str, verb: &str| {
        let role = objects
            .iter()
            .find(|o| o["kind"] == "ClusterRole" && o["metadata"]["name"] == role)
            .unwrap_or_else(|| panic!("no ClusterRole {role}"));
        role["rules"].as_array().unwrap().iter().any(|r| {
            r["resources"].as_array().unwrap().iter().any(|x| x == resource)
                && r["verbs"].as_array().unwrap().iter().any(|v| v == verb)
        })
    };
    let operator = "bs-bucketscan";
    for verb in ["get", "list", "watch"] {
        assert!(grants(operator, "bucketscanschedules", verb), "{verb}");
        assert!(
            grants("bs-bucketscan-view", "bucketscanschedules", verb),
            "{verb}"
        );
    }
    assert!(grants(operator, "bucketscanschedules/status", "patch"));
    assert!(grants(operator, "bucketscanschedules/finalizers", "update"));
    assert!(
        !grants(operator, "bucketscanschedules", "update"),
        "the operator never writes a schedule's spec"
    );
    for verb in ["create", "delete"] {
        assert!(grants(operator, "bucketscans", verb), "a schedule's runs: {verb}");
        assert!(
            grants("bs-bucketscan-edit", "bucketscanschedules", verb),
            "{verb}"
        );
    }
    assert!(!grants("bs-bucketscan-view", "bucketscanschedules", "create"));
}
