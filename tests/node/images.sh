#!/usr/bin/env bash
# Builds the node's images locally (nothing can be pulled here), as OCI archives that
# `ctr -n k8s.io images import` reads (tests/node/node.sh imports them):
#
#   pause.tar     registry.k8s.io/pause:3.10.1  one static Go program (tests/node/pause), the
#                 pod sandbox of every pod (containerd's sandbox_image)
#   postgres.tar  docker.io/library/postgres:16 PostgreSQL from Debian's packages (dpkg -x of
#                 postgresql-15, postgresql-client-15, dash, coreutils, tzdata) plus exactly the
#                 shared libraries their ELF files need (closure over DT_NEEDED, taken from the
#                 Debian library packages they depend on). Debian 12 ships PostgreSQL 15 only, so
#                 the tag the example Database asks for (postgres:16) holds 15; the image's
#                 org.opencontainers.image.version label says which. The entrypoint, like the
#                 official image's, gives $PGDATA to the postgres user (uid 999), initialises it
#                 with $POSTGRES_PASSWORD once, then runs postgres as that user.
#
#   tests/node/images.sh [OUTDIR]   (default target/node-images; skipped when up to date)
#
# Needs go, apt-get (package lists: run `apt-get update` once), jq, readelf, sha256sum.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/../.." && pwd)"
out="$(mkdir -p "${1:-$root/target/node-images}" && cd "${1:-$root/target/node-images}" && pwd)"
PAUSE_REF=registry.k8s.io/pause:3.10.1
POSTGRES_REF=docker.io/library/postgres:16
PG_MAJOR=15

# The archives are rebuilt when this script or the pause program changes.
stamp="$(cat "$here/images.sh" "$here/pause/main.go" "$here/pause/go.mod" | sha256sum | cut -c1-16)"
if [[ -f "$out/pause.tar" && -f "$out/postgres.tar" && "$(cat "$out/stamp" 2>/dev/null)" == "$stamp" ]]; then
  echo "images up to date in $out" >&2
  exit 0
fi

# oci_archive ROOTFS CONFIG_JSON ARCHIVE REF...: packs ROOTFS as one uncompressed layer (sorted,
# mtime 0, numeric owners as they are in ROOTFS) into an OCI image layout with CONFIG_JSON (the
# image config's `config` object) and tars it to ARCHIVE, named REF... for containerd.
oci_archive() {
  local rootfs="$1" config="$2" archive="$3"
  shift 3
  local work
  work="$(mktemp -d "$out/oci.XXXXXX")"
  mkdir -p "$work/blobs/sha256"
  tar --sort=name --format=gnu --numeric-owner --mtime=@0 -C "$rootfs" -cf "$work/layer.tar" .
  local layer_digest layer_size
  layer_digest="$(sha256sum "$work/layer.tar" | cut -d' ' -f1)"
  layer_size="$(stat -c %s "$work/layer.tar")"
  mv "$work/layer.tar" "$work/blobs/sha256/$layer_digest"
  blob() { # JSON on stdin -> blob; prints "digest size"
    local tmp digest
    tmp="$(mktemp "$work/blob.XXXXXX")"
    jq -c . >"$tmp"
    digest="$(sha256sum "$tmp" | cut -d' ' -f1)"
    mv "$tmp" "$work/blobs/sha256/$digest"
    echo "$digest $(stat -c %s "$work/blobs/sha256/$digest")"
  }
  local config_blob manifest_blob
  config_blob="$(jq -n --argjson config "$config" --arg diff "sha256:$layer_digest" \
    '{architecture: "amd64", os: "linux", created: "1970-01-01T00:00:00Z", config: $config,
      rootfs: {type: "layers", diff_ids: [$diff]}}' | blob)"
  manifest_blob="$(jq -n --arg cd "sha256:${config_blob% *}" --argjson cs "${config_blob#* }" \
    --arg ld "sha256:$layer_digest" --argjson ls "$layer_size" \
    '{schemaVersion: 2, mediaType: "application/vnd.oci.image.manifest.v1+json",
      config: {mediaType: "application/vnd.oci.image.config.v1+json", digest: $cd, size: $cs},
      layers: [{mediaType: "application/vnd.oci.image.layer.v1.tar", digest: $ld, size: $ls}]}' | blob)"
  printf '%s\n' "$@" | jq -R . | jq -s --arg d "sha256:${manifest_blob% *}" --argjson s "${manifest_blob#* }" \
    '{schemaVersion: 2, mediaType: "application/vnd.oci.image.index.v1+json",
      manifests: map({mediaType: "application/vnd.oci.image.manifest.v1+json", digest: $d, size: $s,
        annotations: {"io.containerd.image.name": ., "org.opencontainers.image.ref.name": (. | split(":") | last)}})}' \
    >"$work/index.json"
  echo '{"imageLayoutVersion": "1.0.0"}' >"$work/oci-layout"
  tar --sort=name --format=gnu --owner=0 --group=0 --numeric-owner --mtime=@0 -C "$work" \
    -cf "$archive.tmp" index.json oci-layout blobs
  mv "$archive.tmp" "$archive"
  rm -rf "$work"
  echo "$(basename "$archive"): $* ($(($(stat -c %s "$archive") / 1000)) kB)" >&2
}

build_pause() {
  local rootfs="$out/pause-rootfs"
  rm -rf "$rootfs"
  mkdir -p "$rootfs"
  (cd "$here/pause" && CGO_ENABLED=0 go build -trimpath -ldflags="-s -w" -o "$rootfs/pause" .)
  oci_archive "$rootfs" '{"Entrypoint": ["/pause"], "User": "65535:65535"}' "$out/pause.tar" "$PAUSE_REF"
  rm -rf "$rootfs"
}

# needed ELF: the DT_NEEDED sonames of one file (none for scripts and data).
needed() {
  readelf -d "$1" 2>/dev/null | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p'
}

build_postgres() {
  local debs="$out/debs" pool="$out/postgres-pool" rootfs="$out/postgres-rootfs"
  local packages=(postgresql-$PG_MAJOR postgresql-client-$PG_MAJOR libpq5 dash coreutils tzdata util-linux)
  # Library packages these depend on, recursively: where the closure below takes sonames from.
  # libllvm (JIT, off here) and perl (Debian's wrapper scripts, bypassed by PATH) stay out.
  local libs
  mapfile -t libs < <(apt-cache depends --recurse --no-recommends --no-suggests --no-conflicts \
      --no-breaks --no-replaces --no-enhances "${packages[@]}" 2>/dev/null \
    | grep -E '^lib|^zlib' | grep -vE '^lib(llvm|perl|z3)' | sort -u)
  rm -rf "$debs"
  mkdir -p "$debs"
  download() { (cd "$debs" && apt-get download -o APT::Sandbox::User=root "${packages[@]}" "${libs[@]}" >/dev/null); }
  download || { apt-get update >/dev/null && download; }
  rm -rf "$pool" "$rootfs"
  mkdir -p "$pool" "$rootfs"
  local deb
  for deb in "$debs"/*.deb; do
    case "$(basename "$deb")" in
      lib*|zlib*) dpkg -x "$deb" "$pool" ;;
      util-linux_*) # only setpriv, which drops root like the official image's gosu
        dpkg -x "$deb" "$pool/util-linux"
        install -D -m 0755 "$pool/util-linux/usr/bin/setpriv" "$rootfs/usr/bin/setpriv" ;;
      *) dpkg -x "$deb" "$rootfs" ;;
    esac
  done
  # The dynamic loader, then every soname some ELF file in the image needs, until none is missing.
  mkdir -p "$rootfs/lib64" "$rootfs/usr/lib/x86_64-linux-gnu"
  cp -a "$(readlink -f "$pool/lib64/ld-linux-x86-64.so.2")" "$rootfs/usr/lib/x86_64-linux-gnu/"
  ln -sf ../usr/lib/x86_64-linux-gnu/ld-linux-x86-64.so.2 "$rootfs/lib64/ld-linux-x86-64.so.2"
  rm -f "$rootfs"/usr/lib/postgresql/$PG_MAJOR/lib/llvmjit*
  rm -rf "$rootfs"/usr/lib/postgresql/$PG_MAJOR/lib/bitcode "$rootfs"/usr/share/{doc,man,locale}
  local changed=1 file soname found
  while ((changed)); do
    changed=0
    while IFS= read -r file; do
      for soname in $(needed "$file"); do
        [[ -e "$rootfs/usr/lib/x86_64-linux-gnu/$soname" || -e "$rootfs/lib/x86_64-linux-gnu/$soname" \
          || -e "$rootfs/usr/lib/postgresql/$PG_MAJOR/lib/$soname" ]] && continue
        found="$(find "$pool" -name "$soname" \( -type f -o -type l \) | head -1)"
        [[ -n "$found" ]] || { echo "images.sh: $file needs $soname, in no library package" >&2; exit 1; }
        cp -a "$(readlink -f "$found")" "$rootfs/usr/lib/x86_64-linux-gnu/"
        [[ -L "$found" ]] && cp -a "$found" "$rootfs/usr/lib/x86_64-linux-gnu/"
        changed=1
      done
    done < <(find "$rootfs" -type f \( -perm -u+x -o -name '*.so*' \) -exec sh -c 'head -c4 "$1" | grep -q ELF && echo "$1"' _ {} \;)
  done
  # Merged /usr as in a Debian 12 system (dpkg -x leaves that to usrmerge): /bin, /sbin and /lib
  # are links into /usr.
  local dir
  for dir in bin sbin lib; do
    mkdir -p "$rootfs/usr/$dir"
    if [[ -d "$rootfs/$dir" && ! -L "$rootfs/$dir" ]]; then
      cp -a "$rootfs/$dir/." "$rootfs/usr/$dir/"
      rm -rf "${rootfs:?}/$dir"
    fi
    ln -sfn "usr/$dir" "$rootfs/$dir"
  done
  mkdir -p "$rootfs/etc" "$rootfs/tmp" "$rootfs/var/run/postgresql" "$rootfs/var/lib/postgresql/data" "$rootfs/usr/local/bin"
  chmod 1777 "$rootfs/tmp"
  printf 'root:x:0:0:root:/root:/bin/sh\npostgres:x:999:999:PostgreSQL:/var/lib/postgresql:/bin/sh\n' >"$rootfs/etc/passwd"
  printf 'root:x:0:\npostgres:x:999:\n' >"$rootfs/etc/group"
  chown -R 999:999 "$rootfs/var/run/postgresql" "$rootfs/var/lib/postgresql"
  cat >"$rootfs/usr/local/bin/docker-entrypoint.sh" <<'EOF'
#!/bin/sh
# Like the official postgres image: as root, give $PGDATA to the postgres user and run again as
# that user; initialise $PGDATA once (superuser postgres, password from $POSTGRES_PASSWORD, local
# trust, password auth over TCP), then run postgres in the foreground.
set -eu
if [ "$#" -eq 0 ] || [ "$1" = postgres ]; then
  PGDATA="${PGDATA:-/var/lib/postgresql/data}"
  if [ "$(id -u)" = 0 ]; then
    mkdir -p "$PGDATA"
    # The volume is usually mounted at $PGDATA's parent (PGDATA=<mount>/pgdata), and a fresh
    # one belongs to root (the hostPath provisioner makes it 0750).
    parent="$(dirname "$PGDATA")"
    [ "$parent" = / ] || chown postgres:postgres "$parent"
    chown -R postgres:postgres "$PGDATA"
    chmod 700 "$PGDATA"
    exec setpriv --reuid=postgres --regid=postgres --init-groups "$0" "$@"
  fi
  [ "$#" -gt 0 ] && shift
  if [ ! -s "$PGDATA/PG_VERSION" ]; then
    pwfile="$(mktemp)"
    printf '%s\n' "${POSTGRES_PASSWORD:?POSTGRES_PASSWORD must be set}" >"$pwfile"
    initdb -D "$PGDATA" -U postgres --pwfile="$pwfile" --auth-local=trust --auth-host=scram-sha-256
    rm -f "$pwfile"
    echo "host all all all scram-sha-256" >>"$PGDATA/pg_hba.conf"
  fi
  exec postgres -D "$PGDATA" -c listen_addresses='*' -c jit=off "$@"
fi
exec "$@"
EOF
  chmod 0755 "$rootfs/usr/local/bin/docker-entrypoint.sh"
  local version
  version="$(ls "$debs"/postgresql-${PG_MAJOR}_*.deb | sed 's/.*_\(.*\)_.*/\1/')"
  local config
  config="$(jq -n --arg version "$version" '{
    Entrypoint: ["/usr/local/bin/docker-entrypoint.sh"], Cmd: ["postgres"], User: "0:0",
    Env: ["PATH=/usr/lib/postgresql/'$PG_MAJOR'/bin:/usr/local/bin:/usr/bin:/bin", "PGDATA=/var/lib/postgresql/data"],
    ExposedPorts: {"5432/tcp": {}}, WorkingDir: "/",
    Labels: {"org.opencontainers.image.title": "postgres (Debian packages)", "org.opencontainers.image.version": $version}}')"
  oci_archive "$rootfs" "$config" "$out/postgres.tar" "$POSTGRES_REF"
  rm -rf "$pool" "$rootfs"
}

build_pause
build_postgres
echo "$stamp" >"$out/stamp"
