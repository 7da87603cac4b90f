//! Prints a CustomResourceDefinition as YAML: `crdgen` (or `crdgen
//! bucketscans`) the BucketScan one, `crdgen bucketscanschedules` the
//! BucketScanSchedule one. `crds/` is this output (`just crds` writes it,
//! `just test` fails when it is stale).

use bucketscan_api::schedule::BucketScanSchedule;
use bucketscan_operator::crd::BucketScan;
use kube::CustomResourceExt;

fn main() -> std::process::ExitCode {
    let crd = match std::env::args().nth(1).as_deref() {
        None | Some("bucketscans") => BucketScan::crd(),
        Some("bucketscanschedules") => BucketScanSchedule::crd(),
        Some(other) => {
            eprintln!("crdgen: unknown CRD {other:?}: bucketscans or bucketscanschedules");
            return std::process::ExitCode::FAILURE;
        }
    };
    // The layout crds/ has always had (and kubectl's): list items indented
    // under their key, strings on one line, quoted where YAML needs it.
    let options = serde_saphyr::ser_options! {
        compact_list_indent: false,
        prefer_block_scalars: false,
    };
    let yaml = serde_saphyr::to_string_with_options(&crd, options).expect("the CRD serializes");
    print!("{yaml}");
    std::process::ExitCode::SUCCESS
}
