//! Prints the BucketScan CustomResourceDefinition as YAML: `crds/` is this
//! output (`just crds` writes it, `just test` fails when it is stale).

use bucketscan_operator::crd::BucketScan;
use kube::CustomResourceExt;

fn main() {
    let yaml = serde_saphyr::to_string(&BucketScan::crd()).expect("the CRD serializes");
    print!("{yaml}");
}
