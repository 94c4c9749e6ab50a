//! The container image from `make image` (target/ruleop-image.tar, an OCI archive): its config
//! says what the Dockerfile says (user, entrypoint, labels), and its one binary runs with no
//! library at all: statically linked, and (as root) inside a chroot of the image's own files.

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::support::root;
use serde_json::Value;

/// Builds the image when the archive is missing (`make test` builds it before the tests).
fn archive() -> PathBuf {
    let archive = root().join("target/ruleop-image.tar");
    if !archive.exists() {
        let status = Command::new(root().join("scripts/image.sh"))
            .status()
            .expect("scripts/image.sh runs");
        assert!(status.success(), "make image failed");
    }
    archive
}

fn untar(archive: &Path, into: &Path) {
    let status = Command::new("tar")
        .arg("-xf")
        .arg(archive)
        .arg("-C")
        .arg(into)
        .status()
        .expect("tar runs");
    assert!(status.success(), "unpacking {}", archive.display());
}

fn blob(layout: &Path, digest: &str) -> PathBuf {
    layout.join("blobs/sha256").join(digest.trim_start_matches("sha256:"))
}

fn json(path: &Path) -> Value {
    serde_json::from_slice(&std::fs::read(path).expect("read")).expect("json")
}

/// Whether an ELF file asks for a dynamic loader (has a PT_INTERP program header).
fn has_interpreter(elf: &[u8]) -> bool {
    assert_eq!(&elf[..4], b"\x7fELF", "not an ELF file");
    assert_eq!(elf[4], 2, "64-bit");
    let u16_at = |at: usize| usize::from(u16::from_le_bytes([elf[at], elf[at + 1]]));
    let phoff = usize::try_from(u64::from_le_bytes(elf[0x20..0x28].try_into().expect("8 bytes"))).expect("offset");
    let (entry_size, entries) = (u16_at(0x36), u16_at(0x38));
    (0..entries).any(|i| {
        let at = phoff + i * entry_size;
        u32::from_le_bytes(elf[at..at + 4].try_into().expect("4 bytes")) == 3
    })
}

#[test]
fn the_image_archive_has_the_config_and_a_binary_that_needs_no_library() {
    let archive = archive();
    let layout = tempfile::tempdir().expect("tempdir");
    untar(&archive, layout.path());
    assert!(layout.path().join("oci-layout").exists(), "an OCI image layout");

    let index = json(&layout.path().join("index.json"));
    let entry = &index["manifests"][0];
    let tag = std::fs::read_to_string(root().join("target/ruleop-image.tag")).expect("tag file");
    assert_eq!(entry["annotations"]["org.opencontainers.image.ref.name"], tag.trim());
    assert_eq!(entry["mediaType"], "application/vnd.oci.image.manifest.v1+json");
    let manifest = json(&blob(layout.path(), entry["digest"].as_str().expect("digest")));
    let config = json(&blob(
        layout.path(),
        manifest["config"]["digest"].as_str().expect("config"),
    ));
    assert_eq!(config["os"], "linux");
    assert_eq!(config["architecture"], "amd64");
    assert_eq!(config["config"]["User"], "65532:65532");
    assert_eq!(config["config"]["Entrypoint"], serde_json::json!(["/ruleop"]));
    let labels = &config["config"]["Labels"];
    let version = env!("CARGO_PKG_VERSION");
    assert_eq!(labels["org.opencontainers.image.version"], version);
    assert!(tag.starts_with(&format!("{version}-")), "{tag}");
    let revision = labels["org.opencontainers.image.revision"].as_str().expect("revision");
    assert!(
        tag.contains(&revision[..12]),
        "the tag names the revision: {tag} {revision}"
    );
    assert!(
        labels["org.opencontainers.image.source"]
            .as_str()
            .is_some_and(|s| s.starts_with("https://"))
    );

    let layers = manifest["layers"].as_array().expect("layers");
    assert_eq!(layers.len(), 1, "one layer: the binary");
    let size = layers[0]["size"].as_u64().expect("size");
    println!(
        "image {}: compressed layer {:.1} MB, archive {:.1} MB",
        tag.trim(),
        size as f64 / 1e6,
        std::fs::metadata(&archive).expect("archive").len() as f64 / 1e6
    );
    assert!(size < 25_000_000, "the image is {size} bytes, over 25 MB");

    let rootfs = tempfile::tempdir().expect("tempdir");
    untar(
        &blob(layout.path(), layers[0]["digest"].as_str().expect("digest")),
        rootfs.path(),
    );
    let files: Vec<_> = std::fs::read_dir(rootfs.path())
        .expect("rootfs")
        .flatten()
        .map(|e| e.file_name())
        .collect();
    assert_eq!(files, ["ruleop"], "only the binary");
    let binary = rootfs.path().join("ruleop");
    assert!(
        !has_interpreter(&std::fs::read(&binary).expect("binary")),
        "statically linked"
    );

    // As root (CI), run it where nothing but the image's files exist; else with no environment.
    let as_root = Command::new("id")
        .arg("-u")
        .output()
        .is_ok_and(|o| String::from_utf8_lossy(&o.stdout).trim() == "0");
    let output = if as_root {
        // No library, loader or anything else exists in there.
        Command::new("chroot")
            .arg(rootfs.path())
            .args(["/ruleop", "--version"])
            .output()
    } else {
        Command::new(&binary).arg("--version").env_clear().output()
    }
    .expect("the binary runs");
    assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
    assert_eq!(String::from_utf8_lossy(&output.stdout), format!("ruleop {version}\n"));
}
