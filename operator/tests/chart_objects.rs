//! What the chart renders, read as objects: the Redis password is on no
//! command line (and the rendered Redis command, run with the real
//! redis-server, does require it), the NetworkPolicy admits exactly the
//! operator and the pods the operator starts for scans (their labels taken
//! from `desired`, not copied), PodDisruptionBudgets never block a drain of
//! a single replica, and `existingSecret` and the image digest are used.
//! Needs `helm` (scripts/install-kube.sh) and `redis-server`; no apiserver.

use bucketscan_operator::crd::{BucketScan, BucketScanSpec, Output, Source};
use bucketscan_operator::desired::{self, Settings};
use bucketscan_operator::validate;
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

/// Whether a LabelSelector (matchLabels, matchExpressions In/NotIn/Exists/DoesNotExist) selects `l`.
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
                "DoesNotExist" => value.is_none(),
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

/// `helm template` with `values`, which must fail: its stderr.
fn refused(values: &[&str]) -> String {
    let out = Command::new("helm")
        .args(["template", "bs", "charts/bucketscan"])
        .args(values)
        .current_dir(repo())
        .output()
        .unwrap();
    assert!(!out.status.success(), "{values:?} rendered");
    String::from_utf8_lossy(&out.stderr).into_owned()
}

fn env_value(container: &Value, name: &str) -> Option<String> {
    container["env"]
        .as_array()?
        .iter()
        .find(|e| e["name"] == name)
        .map(|e| e["value"].as_str().unwrap().to_string())
}

fn pod_spec<'a>(objects: &'a [Value], kind: &str, component: &str) -> &'a Value {
    let o = find(objects, kind, component).unwrap_or_else(|| panic!("a {kind} {component}"));
    if kind == "Pod" {
        &o["spec"]
    } else {
        &o["spec"]["template"]["spec"]
    }
}

fn kinds(objects: &[Value], kind: &str) -> Vec<Value> {
    objects.iter().filter(|o| o["kind"] == kind).cloned().collect()
}

/// The release's pods (operator, Redis, the helm test pod) pull with
/// `imagePullSecrets`; the operator pod takes `podAnnotations`, `podLabels`
/// (under the selector's labels, which win) and `priorityClassName`; none of
/// them is rendered by default.
#[test]
fn release_pods_take_pull_secrets_and_the_operator_pod_its_metadata() {
    let objects = render(&[
        "--set=imagePullSecrets[0].name=regcred",
        "--set=imagePullSecrets[1].name=mirror",
        "--set-string=operator.podAnnotations.prometheus\\.io/scrape=true",
        "--set=operator.podLabels.team=platform",
        "--set=operator.podLabels.app\\.kubernetes\\.io/component=not-the-operator",
        "--set=operator.priorityClassName=cluster-critical-ops",
    ]);
    let secrets = serde_json::json!([{"name": "regcred"}, {"name": "mirror"}]);
    for (kind, component) in [
        ("Deployment", "operator"),
        ("Deployment", "redis"),
        ("Pod", "test"),
    ] {
        assert_eq!(
            pod_spec(&objects, kind, component)["imagePullSecrets"],
            secrets,
            "{component}"
        );
    }
    let operator = find(&objects, "Deployment", "operator").unwrap();
    let template = &operator["spec"]["template"];
    assert_eq!(
        template["metadata"]["annotations"]["prometheus.io/scrape"],
        "true"
    );
    let pod = pod_labels(operator);
    assert_eq!(pod["team"], "platform");
    assert_eq!(pod["app.kubernetes.io/component"], "operator");
    assert!(
        selects(&operator["spec"]["selector"], &pod),
        "the Deployment still selects its pods"
    );
    assert_eq!(template["spec"]["priorityClassName"], "cluster-critical-ops");
    // An annotation the API server would refuse (not a string) is refused by the schema.
    let boolean = refused(&["--set=operator.podAnnotations.sidecar\\.istio\\.io/inject=false"]);
    assert!(boolean.contains("got boolean, want string"), "{boolean}");

    let default = render(&[]);
    for (kind, component) in [
        ("Deployment", "operator"),
        ("Deployment", "redis"),
        ("Pod", "test"),
    ] {
        let spec = pod_spec(&default, kind, component);
        assert!(spec.get("imagePullSecrets").is_none(), "{component}: {spec}");
        assert!(spec.get("priorityClassName").is_none(), "{component}");
    }
    let operator = find(&default, "Deployment", "operator").unwrap();
    assert!(operator["spec"]["template"]["metadata"]
        .get("annotations")
        .is_none());
    assert_eq!(
        pod_labels(operator),
        labels(&operator["spec"]["selector"]["matchLabels"]),
        "by default the pod has the selector's labels only"
    );
}

/// `image.digest` and `worker.image.digest`: REPOSITORY@DIGEST for the
/// operator, the helm test pod and the worker image the operator gives
/// scans (BUCKETSCAN_WORKER_IMAGE); the default allowlist still admits the
/// digest form, and the operator puts it in the worker Deployment as it is.
#[test]
fn digests_pin_the_operator_and_the_scans_images() {
    let operator_digest = format!("sha256:{}", "ab".repeat(32));
    let worker_digest = format!("sha256:{}", "cd".repeat(32));
    let objects = render(&[
        "--set=image.tag=9.9.9",
        &format!("--set=image.digest={operator_digest}"),
        &format!("--set=worker.image.digest={worker_digest}"),
    ]);
    let operator = &pod_spec(&objects, "Deployment", "operator")["containers"][0];
    let pinned = format!("ghcr.io/bucketscan/bucketscan@{operator_digest}");
    assert_eq!(
        operator["image"],
        pinned.as_str(),
        "the tag is ignored with a digest"
    );
    assert_eq!(
        pod_spec(&objects, "Pod", "test")["containers"][0]["image"],
        pinned.as_str()
    );
    let worker_image = env_value(operator, "BUCKETSCAN_WORKER_IMAGE").unwrap();
    assert_eq!(
        worker_image,
        format!("ghcr.io/bucketscan/bucketscan@{worker_digest}")
    );

    let allowed: Vec<String> = env_value(operator, "BUCKETSCAN_ALLOWED_WORKER_IMAGES")
        .unwrap()
        .split(',')
        .map(str::to_string)
        .collect();
    assert_eq!(allowed, [desired::image_repository(&worker_image)]);
    let mut scan = a_scan();
    scan.spec.workers.image = Some(worker_image.clone());
    assert_eq!(
        validate::worker_image(&scan, &allowed),
        Ok(()),
        "a scan naming the digest form"
    );
    scan.spec.workers.image = Some(format!("elsewhere.example/bucketscan@{worker_digest}"));
    assert!(
        validate::worker_image(&scan, &allowed).is_err(),
        "another repository's digest"
    );
    let settings = Settings {
        worker_image: worker_image.clone(),
        ..Settings::default()
    };
    let workers = desired::worker_deployment(&a_scan(), &settings, 1, false);
    let container = &workers.spec.unwrap().template.spec.unwrap().containers[0];
    assert_eq!(container.image.as_deref(), Some(worker_image.as_str()));

    let default = render(&[]);
    let operator = &pod_spec(&default, "Deployment", "operator")["containers"][0];
    assert_eq!(operator["image"], desired::DEFAULT_IMAGE);
    assert_eq!(
        env_value(operator, "BUCKETSCAN_WORKER_IMAGE").as_deref(),
        Some(desired::DEFAULT_IMAGE)
    );
}

/// `fullnameOverride` names every object; `nameOverride` replaces the
/// chart's name in the prefix; neither touches labels or selectors, and the
/// names that point at objects (ServiceAccount, Redis address, bindings)
/// follow.
#[test]
fn name_overrides_rename_every_object_and_keep_the_labels() {
    let names = |objects: &[Value]| -> Vec<String> {
        objects
            .iter()
            .filter(|o| o["kind"] != "CustomResourceDefinition")
            .map(|o| o["metadata"]["name"].as_str().unwrap().to_string())
            .collect()
    };
    let default = render(&[]);
    assert!(
        names(&default).iter().all(|n| n.starts_with("bs-bucketscan")),
        "{:?}",
        names(&default)
    );

    let renamed = render(&["--set=fullnameOverride=scanner"]);
    let renamed_names = names(&renamed);
    assert!(
        renamed_names.iter().all(|n| n.starts_with("scanner")),
        "{renamed_names:?}"
    );
    assert_eq!(renamed_names.len(), names(&default).len());
    let operator = find(&renamed, "Deployment", "operator").unwrap();
    let spec = &operator["spec"]["template"]["spec"];
    assert_eq!(spec["serviceAccountName"], "scanner");
    let redis_url = env_value(&spec["containers"][0], "BUCKETSCAN_REDIS_URL").unwrap();
    assert!(
        redis_url.ends_with("@scanner-redis.scans.svc:6379"),
        "{redis_url}"
    );
    assert_eq!(pod_labels(operator)["app.kubernetes.io/name"], "bucketscan");
    for binding in kinds(&renamed, "ClusterRoleBinding")
        .iter()
        .chain(&kinds(&renamed, "RoleBinding"))
    {
        let subject = &binding["subjects"][0];
        if subject["kind"] == "ServiceAccount" {
            assert!(
                subject["name"].as_str().unwrap().starts_with("scanner"),
                "{binding}"
            );
        }
    }

    let short = render(&["--set=nameOverride=scan"]);
    assert!(
        names(&short).iter().all(|n| n.starts_with("bs-scan")),
        "{:?}",
        names(&short)
    );
}

/// `metrics.podMonitor`: a PodMonitor that selects the operator's pods and
/// scrapes their metrics port; not together with the ServiceMonitor.
#[test]
fn a_pod_monitor_scrapes_the_operator_pods() {
    assert!(kinds(&render(&[]), "PodMonitor").is_empty(), "none by default");
    let objects = render(&[
        "--set=metrics.podMonitor.enabled=true",
        "--set=metrics.podMonitor.interval=15s",
        "--set=metrics.podMonitor.labels.release=prom",
    ]);
    let [monitor] = &kinds(&objects, "PodMonitor")[..] else {
        panic!("one PodMonitor")
    };
    assert_eq!(monitor["metadata"]["labels"]["release"], "prom");
    let operator = find(&objects, "Deployment", "operator").unwrap();
    assert!(selects(&monitor["spec"]["selector"], &pod_labels(operator)));
    let redis = find(&objects, "Deployment", "redis").unwrap();
    assert!(!selects(&monitor["spec"]["selector"], &pod_labels(redis)));
    let endpoint = &monitor["spec"]["podMetricsEndpoints"][0];
    assert_eq!(endpoint["interval"], "15s");
    assert_eq!(endpoint["path"], "/metrics");
    let port = &operator["spec"]["template"]["spec"]["containers"][0]["ports"][0];
    assert_eq!(endpoint["port"], port["name"]);

    let both = refused(&[
        "--set=metrics.podMonitor.enabled=true",
        "--set=metrics.serviceMonitor.enabled=true",
    ]);
    assert!(both.contains("choose one"), "{both}");
}

/// Ports of a NetworkPolicy rule, as (protocol, port).
fn rule_ports(rule: &Value) -> Vec<(String, i64)> {
    rule["ports"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| {
            (
                p["protocol"].as_str().unwrap_or("TCP").to_string(),
                p["port"].as_i64().unwrap(),
            )
        })
        .collect()
}

/// `operator.networkPolicy`: off by default; on, the operator pod admits
/// only its metrics port (from `metricsFrom` and the helm test pod) and
/// reaches only DNS, the API server, Redis and S3, on their ports, at the
/// addresses given.
#[test]
fn the_operator_network_policy_opens_only_what_the_operator_uses() {
    let operator_policy = |objects: &[Value]| {
        kinds(objects, "NetworkPolicy")
            .into_iter()
            .find(|p| p["metadata"]["labels"]["app.kubernetes.io/component"] == "operator")
    };
    assert!(operator_policy(&render(&[])).is_none(), "off by default");

    let objects = render(&[
        "--set=operator.networkPolicy.enabled=true",
        "--set=metrics.port=9090",
        "--set=operator.networkPolicy.metricsFrom[0].namespaceSelector.matchLabels.kubernetes\\.io/metadata\\.name=monitoring",
        "--set=operator.networkPolicy.kubeApiServerCidrs={172.18.0.2/32}",
        "--set=operator.networkPolicy.s3Cidrs={10.20.0.0/16,fd00::/8}",
        "--set=operator.networkPolicy.s3Ports={443,9000}",
    ]);
    let policy = operator_policy(&objects).expect("the operator's NetworkPolicy");
    let operator = find(&objects, "Deployment", "operator").unwrap();
    let redis = find(&objects, "Deployment", "redis").unwrap();
    assert!(selects(&policy["spec"]["podSelector"], &pod_labels(operator)));
    assert!(!selects(&policy["spec"]["podSelector"], &pod_labels(redis)));
    assert_eq!(
        policy["spec"]["policyTypes"],
        serde_json::json!(["Ingress", "Egress"])
    );

    let [ingress] = &policy["spec"]["ingress"].as_array().unwrap()[..] else {
        panic!("one ingress rule")
    };
    assert_eq!(rule_ports(ingress), [("TCP".to_string(), 9090)]);
    let from = ingress["from"].as_array().unwrap();
    assert_eq!(
        from[0]["namespaceSelector"]["matchLabels"]["kubernetes.io/metadata.name"],
        "monitoring"
    );
    let test_pod = labels(&find(&objects, "Pod", "test").unwrap()["metadata"]["labels"]);
    assert!(
        from.iter()
            .any(|p| p.get("namespaceSelector").is_none() && selects(&p["podSelector"], &test_pod)),
        "the helm test pod reaches /readyz"
    );

    let egress = policy["spec"]["egress"].as_array().unwrap();
    let rule_with = |port: i64| {
        egress
            .iter()
            .find(|r| rule_ports(r).iter().any(|(_, p)| *p == port))
            .unwrap_or_else(|| panic!("an egress rule for port {port}"))
    };
    let dns = rule_with(53);
    assert_eq!(
        rule_ports(dns),
        [("UDP".to_string(), 53), ("TCP".to_string(), 53)]
    );
    assert_eq!(dns["to"][0]["podSelector"]["matchLabels"]["k8s-app"], "kube-dns");
    let api = rule_with(6443);
    assert_eq!(
        api["to"],
        serde_json::json!([{"ipBlock": {"cidr": "172.18.0.2/32"}}])
    );
    let to_redis = rule_with(6379);
    assert!(selects(&to_redis["to"][0]["podSelector"], &pod_labels(redis)));
    let s3 = rule_with(9000);
    assert_eq!(
        s3["to"],
        serde_json::json!([{"ipBlock": {"cidr": "10.20.0.0/16"}}, {"ipBlock": {"cidr": "fd00::/8"}}])
    );
    assert_eq!(egress.len(), 4, "DNS, API server, Redis, S3: {egress:?}");

    // Defaults when on: any source may scrape; those ports at any address;
    // an external Redis on its ports.
    let open = render(&[
        "--set=operator.networkPolicy.enabled=true",
        "--set=redis.bundled=false",
        "--set=redis.external.url=redis://redis.example:6379",
    ]);
    let policy = operator_policy(&open).unwrap();
    assert!(policy["spec"]["ingress"][0].get("from").is_none());
    let egress = policy["spec"]["egress"].as_array().unwrap();
    let ports: Vec<Vec<(String, i64)>> = egress.iter().map(rule_ports).collect();
    assert!(
        ports.contains(&vec![("TCP".into(), 443), ("TCP".into(), 6443)]),
        "{ports:?}"
    );
    assert!(
        ports.contains(&vec![("TCP".into(), 6379), ("TCP".into(), 26379)]),
        "{ports:?}"
    );
    assert!(ports.contains(&vec![("TCP".into(), 443)]), "{ports:?}");
    assert!(egress[1..].iter().all(|r| r.get("to").is_none()), "{egress:?}");
}

/// `operator.scanNamespaceSelector`: the operator gets the selector (and no
/// list), the scan-namespace rules are bound cluster-wide with list and
/// watch on Namespaces added (a RoleBinding cannot wait for a namespace
/// labelled later), and Redis admits scan pods from the same namespaces.
/// Without it nothing of this is rendered.
#[test]
fn a_namespace_selector_reaches_the_operator_rbac_and_redis() {
    let objects = render(&[
        "--set-string=operator.scanNamespaceSelector.matchLabels.bucketscan\\.dev/scans=true",
        "--set=operator.scanNamespaceSelector.matchExpressions[0].key=team",
        "--set=operator.scanNamespaceSelector.matchExpressions[0].operator=In",
        "--set=operator.scanNamespaceSelector.matchExpressions[0].values={a,b}",
        "--set=operator.scanNamespaceSelector.matchExpressions[1].key=frozen",
        "--set=operator.scanNamespaceSelector.matchExpressions[1].operator=DoesNotExist",
    ]);
    let operator = &pod_spec(&objects, "Deployment", "operator")["containers"][0];
    assert_eq!(
        env_value(operator, "BUCKETSCAN_SCAN_NAMESPACE_SELECTOR").as_deref(),
        Some("bucketscan.dev/scans=true,team in (a,b),!frozen")
    );
    assert_eq!(
        env_value(operator, "BUCKETSCAN_SCAN_NAMESPACES"),
        None,
        "not both"
    );
    let namespaces_rule = |objects: &[Value]| {
        kinds(objects, "ClusterRole")
            .iter()
            .filter(|r| r["metadata"]["name"] == "bs-bucketscan")
            .flat_map(|r| r["rules"].as_array().unwrap().clone())
            .find(|rule| rule["resources"] == serde_json::json!(["namespaces"]))
    };
    assert_eq!(
        namespaces_rule(&objects).expect("list and watch on Namespaces")["verbs"],
        serde_json::json!(["list", "watch"])
    );
    let bindings = kinds(&objects, "ClusterRoleBinding");
    assert!(
        bindings
            .iter()
            .any(|b| b["roleRef"]["name"] == "bs-bucketscan-scan-namespace"),
        "the scan-namespace rules cluster-wide"
    );
    assert!(
        kinds(&objects, "RoleBinding")
            .iter()
            .all(|b| b["roleRef"]["name"] != "bs-bucketscan-scan-namespace"),
        "no RoleBinding per namespace"
    );
    let redis_policy = find(&objects, "NetworkPolicy", "redis").unwrap();
    let peer = &redis_policy["spec"]["ingress"][0]["from"][1];
    let ns = |pairs: &[(&str, &str)]| -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    };
    let selector = &peer["namespaceSelector"];
    assert!(selects(
        selector,
        &ns(&[("bucketscan.dev/scans", "true"), ("team", "a")])
    ));
    assert!(!selects(
        selector,
        &ns(&[("bucketscan.dev/scans", "true"), ("team", "c")])
    ));
    assert!(!selects(selector, &ns(&[("team", "a")])));
    assert!(!selects(
        selector,
        &ns(&[("bucketscan.dev/scans", "true"), ("team", "a"), ("frozen", "")])
    ));

    let default = render(&[]);
    assert!(namespaces_rule(&default).is_none(), "no Namespaces by default");
    let operator = &pod_spec(&default, "Deployment", "operator")["containers"][0];
    assert_eq!(env_value(operator, "BUCKETSCAN_SCAN_NAMESPACE_SELECTOR"), None);
    assert_eq!(
        env_value(operator, "BUCKETSCAN_SCAN_NAMESPACES").as_deref(),
        Some("default")
    );
    assert!(kinds(&default, "ClusterRoleBinding")
        .iter()
        .all(|b| b["roleRef"]["name"] != "bs-bucketscan-scan-namespace"));

    // A namespaced install ignores the selector, as it ignores the list.
    let own = render(&[
        "--set=operator.watchOwnNamespace=true",
        "--set=operator.scanNamespaceSelector.matchLabels.scans=on",
    ]);
    let operator = &pod_spec(&own, "Deployment", "operator")["containers"][0];
    assert_eq!(env_value(operator, "BUCKETSCAN_SCAN_NAMESPACE_SELECTOR"), None);
    assert!(kinds(&own, "ClusterRoleBinding").is_empty());
}

/// Chart.yaml: where the project is, who keeps it, the Kubernetes the
/// tests run (docs/testing.md), and Artifact Hub's annotations, each valid
/// YAML naming what the chart holds (the CRDs of crds/, an example of
/// each, the images the chart runs by default).
#[test]
fn chart_metadata_names_the_project_the_tested_kubernetes_and_artifact_hub_facts() {
    let chart: Value = serde_saphyr::from_str(
        &std::fs::read_to_string(repo().join("charts/bucketscan/Chart.yaml")).unwrap(),
    )
    .unwrap();
    assert_eq!(chart["home"], "https://github.com/bucketscan/bucketscan");
    assert!(chart["sources"].as_array().unwrap().contains(&chart["home"]));
    assert!(chart["maintainers"][0]["name"]
        .as_str()
        .is_some_and(|n| !n.is_empty()));
    let testing = std::fs::read_to_string(repo().join("docs/testing.md")).unwrap();
    let tested = testing
        .lines()
        .find_map(|l| l.strip_prefix("Kubernetes: "))
        .and_then(|l| l.split_whitespace().next())
        .expect("docs/testing.md names the Kubernetes the tests run");
    let minor = tested.rsplit_once('.').unwrap().0;
    assert_eq!(chart["kubeVersion"], format!(">={minor}.0-0"), "tested: {tested}");

    let annotation = |key: &str| -> Value {
        let text = chart["annotations"][key]
            .as_str()
            .unwrap_or_else(|| panic!("{key}"));
        serde_saphyr::from_str(text).unwrap_or_else(|e| panic!("{key}: {e}"))
    };
    assert_eq!(chart["annotations"]["artifacthub.io/license"], "Apache-2.0");
    for link in annotation("artifacthub.io/links").as_array().unwrap() {
        assert!(link["url"].as_str().unwrap().starts_with("https://"), "{link}");
    }
    let crds: Vec<Value> = std::fs::read_dir(repo().join("crds"))
        .unwrap()
        .map(|e| serde_saphyr::from_str(&std::fs::read_to_string(e.unwrap().path()).unwrap()).unwrap())
        .collect();
    let listed = annotation("artifacthub.io/crds");
    let examples = annotation("artifacthub.io/crdsExamples");
    for crd in &crds {
        let kind = &crd["spec"]["names"]["kind"];
        let entry = listed
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["kind"] == *kind)
            .unwrap_or_else(|| panic!("artifacthub.io/crds lists {kind}"));
        assert_eq!(entry["name"], crd["metadata"]["name"]);
        let versions: Vec<&Value> = crd["spec"]["versions"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| &v["name"])
            .collect();
        assert!(versions.contains(&&entry["version"]), "{entry}");
        assert!(
            examples.as_array().unwrap().iter().any(|e| e["kind"] == *kind),
            "an example {kind} in artifacthub.io/crdsExamples"
        );
    }
    let example: BucketScan =
        serde_json::from_value(examples[0].clone()).expect("the example is a BucketScan");
    assert!(bucketscan_operator::validate::validate(&example).is_ok());
    for change in annotation("artifacthub.io/changes").as_array().unwrap() {
        assert!(["added", "changed", "deprecated", "removed", "fixed", "security"]
            .contains(&change["kind"].as_str().unwrap()));
    }
    let images: Vec<String> = annotation("artifacthub.io/images")
        .as_array()
        .unwrap()
        .iter()
        .map(|i| i["image"].as_str().unwrap().to_string())
        .collect();
    let rendered: Vec<String> = render(&[])
        .iter()
        .filter(|o| o["kind"] == "Deployment")
        .map(|o| {
            o["spec"]["template"]["spec"]["containers"][0]["image"]
                .as_str()
                .unwrap()
                .to_string()
        })
        .collect();
    let mut rendered = rendered;
    rendered.sort();
    let mut images = images;
    images.sort();
    assert_eq!(
        images, rendered,
        "artifacthub.io/images is what the chart runs by default"
    );
}

/// Every row of the generated values table has a description: a value
/// without a `# --` comment would show an empty cell.
#[test]
fn every_chart_value_has_a_description() {
    let readme = std::fs::read_to_string(repo().join("charts/bucketscan/README.md")).unwrap();
    let rows: Vec<&str> = readme.lines().filter(|l| l.starts_with("| `")).collect();
    assert!(rows.len() > 80, "{}", rows.len());
    let bare: Vec<&&str> = rows
        .iter()
        .filter(|r| r.split('|').nth(4).is_none_or(|d| d.trim().is_empty()))
        .collect();
    assert!(
        bare.is_empty(),
        "values without a description in values.yaml: {bare:?}"
    );
}

/// Every option of the operator can be set through the chart: each long flag
/// of `bucketscan-operator --help` is among the operator container's args or
/// its env var among the container's env, in the default rendering or in one
/// that turns the optional ones on (own namespace, endpoints, an external
/// Redis with a CA; a namespace selector). A flag added without a chart value fails here; those
/// the chart sets for itself are listed with the reason.
#[test]
fn every_operator_flag_is_set_through_the_chart() {
    let help = Command::new(env!("CARGO_BIN_EXE_bucketscan-operator"))
        .arg("--help")
        .output()
        .unwrap();
    assert!(help.status.success());
    let help = String::from_utf8(help.stdout).unwrap();
    // `      --flag <VALUE>` lines, each followed by its text and `[env: NAME=]`.
    let mut flags: Vec<(String, Option<String>)> = Vec::new();
    for line in help.lines() {
        if let Some(rest) = line.trim_start().strip_prefix("--") {
            let name = rest.split([' ', '=']).next().unwrap().to_string();
            flags.push((name, None));
        } else if let (Some(at), Some(last)) = (line.find("[env: "), flags.last_mut()) {
            let env = line[at + 6..].split(['=', ']']).next().unwrap().to_string();
            last.1 = Some(env);
        }
    }
    assert!(flags.len() > 20, "the help lists the flags: {help}");
    let mut args = std::collections::BTreeSet::new();
    let mut envs = std::collections::BTreeSet::new();
    for values in [
        &[][..],
        &[
            "--set=operator.watchOwnNamespace=true",
            "--set=operator.allowedEndpoints={minio.example}",
            "--set=redis.bundled=false",
            "--set=redis.external.url=redis://redis.example:6379",
            "--set=redis.external.caSecret=redis-ca",
        ][..],
        &["--set-string=operator.scanNamespaceSelector.matchLabels.bucketscan\\.dev/scans=true"][..],
    ] {
        let objects = render(values);
        let operator = &pod_spec(&objects, "Deployment", "operator")["containers"][0];
        for arg in operator["args"].as_array().unwrap() {
            let arg = arg.as_str().unwrap();
            args.insert(
                arg.trim_start_matches("--")
                    .split('=')
                    .next()
                    .unwrap()
                    .to_string(),
            );
        }
        for env in operator["env"].as_array().unwrap() {
            envs.insert(env["name"].as_str().unwrap().to_string());
        }
    }
    // Set by the chart for itself, not a value: what the process needs, not
    // a choice.
    let own = [("help", "not an option"), ("version", "not an option")];
    let missing: Vec<&String> = flags
        .iter()
        .filter(|(name, env)| {
            !args.contains(name)
                && !env.as_ref().is_some_and(|e| envs.contains(e))
                && !own.iter().any(|(o, _)| o == name)
        })
        .map(|(name, _)| name)
        .collect();
    assert!(
        missing.is_empty(),
        "operator flags no chart value sets: {missing:?} (args {args:?}, env {envs:?})"
    );
    // The new values reach the flags.
    let objects = render(&[
        "--set=operator.redisPatienceSeconds=45",
        "--set=operator.planning.listBudget=20000",
        "--set=operator.planning.deadlineSeconds=600",
    ]);
    let operator = &pod_spec(&objects, "Deployment", "operator")["containers"][0];
    let rendered: Vec<&str> = operator["args"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a.as_str().unwrap())
        .collect();
    for want in [
        "--redis-patience-secs=45",
        "--plan-list-budget=20000",
        "--planning-deadline-seconds=600",
    ] {
        assert!(rendered.contains(&want), "{want} in {rendered:?}");
    }
    assert!(refused(&["--set=operator.planning.listBudget=0"]).contains("listBudget"));
}
