#!/usr/bin/env bash
# `make image`: the container image without a container engine or daemon.
#
#   1. a statically linked release binary (glibc, `+crt-static`: no dynamic loader, no libc,
#      no libgcc_s needed at run time), profile `dist` (release, stripped);
#   2. one layer holding only /ruleop, packed reproducibly (sorted, owner 0:0, mtime of the commit);
#   3. crane (github.com/google/go-containerregistry, `go install` at a pinned version into
#      target/tools) appends the layer to an empty OCI base and sets the config (user 65532,
#      entrypoint /ruleop, OCI labels), through a registry it serves in memory on 127.0.0.1;
#   4. the image is saved as an OCI image layout and tarred: target/ruleop-image.tar (an OCI
#      archive: `ctr images import`, `skopeo copy oci-archive:...`, `crane push` of the
#      unpacked layout at target/image/oci).
#
# The tag is `<version>-<12 digits of the commit>` (`-dirty` with uncommitted changes), printed
# and written to target/ruleop-image.tag. The same commit gives the same tag and config.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

CRANE_VERSION="${CRANE_VERSION:-v0.22.1}"
TARGET="${RULEOP_IMAGE_TARGET:-x86_64-unknown-linux-gnu}"
out=target/image
archive=target/ruleop-image.tar
crane=target/tools/crane

version=$(sed -n 's/^version = "\(.*\)"/\1/p' Cargo.toml | head -1)
if revision=$(git rev-parse HEAD 2>/dev/null); then
    epoch=$(git log -1 --format=%ct)
    created=$(git log -1 --format=%cI)
    # Untracked files do not go into the binary; modified tracked files do.
    dirty=$(git diff --quiet HEAD -- . 2>/dev/null || echo -dirty)
else
    revision=unknown epoch=0 created=1970-01-01T00:00:00Z dirty=""
fi
tag="${version}-${revision:0:12}${dirty}"
source_url="${RULEOP_IMAGE_SOURCE:-https://github.com/ruleop/ruleop}"

echo "== static release binary ($TARGET, profile dist)" >&2
# RUSTFLAGS with --target apply to the target only, so build scripts and proc macros stay dynamic.
RUSTFLAGS="-C target-feature=+crt-static" cargo build --locked --profile dist --target "$TARGET" --bin ruleop >&2
binary="target/$TARGET/dist/ruleop"
if readelf -l "$binary" 2>/dev/null | grep -q 'Requesting program interpreter'; then
    echo "error: $binary is dynamically linked" >&2
    exit 1
fi

if [ ! -x "$crane" ] || [ "$("$crane" version 2>/dev/null)" != "$CRANE_VERSION" ]; then
    echo "== crane $CRANE_VERSION (go install into target/tools)" >&2
    GOBIN="$PWD/target/tools" go install "github.com/google/go-containerregistry/cmd/crane@$CRANE_VERSION"
fi

echo "== layer and image $tag" >&2
rm -rf "$out"
mkdir -p "$out/rootfs"
install -m 0755 "$binary" "$out/rootfs/ruleop"
touch -d "@$epoch" "$out/rootfs/ruleop"
tar --sort=name --format=gnu --owner=0 --group=0 --numeric-owner --mtime="@$epoch" \
    -C "$out/rootfs" -cf "$out/layer.tar" ruleop

# crane edits images only through a registry: serve one in memory on loopback for this run.
"$crane" registry serve --address 127.0.0.1:0 2>"$out/registry.log" &
registry_pid=$!
trap 'kill "$registry_pid" 2>/dev/null || true' EXIT
port=""
for _ in $(seq 1 100); do
    port=$(sed -n 's/.*serving on port \([0-9]*\).*/\1/p' "$out/registry.log")
    [ -n "$port" ] && break
    sleep 0.1
done
[ -n "$port" ] || { echo "error: crane's registry did not start: $(cat "$out/registry.log")" >&2; exit 1; }
ref="127.0.0.1:$port/ruleop:$tag"

"$crane" append --oci-empty-base -f "$out/layer.tar" -t "$ref" >/dev/null 2>>"$out/registry.log"
"$crane" mutate "$ref" -t "$ref" \
    --set-platform linux/amd64 \
    --entrypoint /ruleop \
    --user 65532:65532 \
    --workdir / \
    --exposed-ports 8080/tcp \
    --label "org.opencontainers.image.title=ruleop" \
    --label "org.opencontainers.image.description=A Kubernetes operator that is a declarative rules engine" \
    --label "org.opencontainers.image.source=$source_url" \
    --label "org.opencontainers.image.revision=$revision" \
    --label "org.opencontainers.image.version=$version" \
    --label "org.opencontainers.image.created=$created" \
    --label "org.opencontainers.image.licenses=Apache-2.0" \
    >/dev/null 2>>"$out/registry.log"
"$crane" pull --format=oci "$ref" "$out/oci" 2>>"$out/registry.log"

# Name the image in the index as OCI tools (ref.name: the tag) and containerd (full name) read
# it: once by the exact tag, once by the version, which the chart (and the install rendered from
# it, deploy/base) refers to.
jq --arg tag "$tag" --arg version "$version" '
    .manifests[0] as $m
    | .manifests = [$tag, $version] | .manifests |= map(. as $t | $m | .annotations = {
        "org.opencontainers.image.ref.name": $t, "io.containerd.image.name": ("docker.io/library/ruleop:" + $t)})' \
    "$out/oci/index.json" >"$out/index.json"
mv "$out/index.json" "$out/oci/index.json"
find "$out/oci" -exec touch -h -d "@$epoch" {} +
tar --sort=name --format=gnu --owner=0 --group=0 --numeric-owner --mtime="@$epoch" \
    -C "$out/oci" -cf "$archive" .
echo "$tag" >target/ruleop-image.tag

binary_size=$(stat -c %s "$binary")
layer_size=$(jq '[.layers[].size] | add' "$out/oci/blobs/sha256/$(jq -r '.manifests[0].digest' "$out/oci/index.json" | cut -d: -f2)")
archive_size=$(stat -c %s "$archive")
digest=$(jq -r '.manifests[0].digest' "$out/oci/index.json")
mb() { awk -v b="$1" 'BEGIN { printf "%.1f MB", b / 1000000 }'; }
echo "image ruleop:$tag ($digest)"
echo "  archive $archive: $(mb "$archive_size"); compressed layer $(mb "$layer_size"); binary $(mb "$binary_size")"
