#!/usr/bin/env bash
# Builds the Dockerfile's image and runs what it runs, on a machine with no Docker engine and no image registry:
# buildah with chroot isolation (no OCI runtime needed), and the Debian base made by debootstrap from Debian's
# package archive when the registry's cannot be pulled. Then, as the image's own user: `postwire serve` on
# its /data, GET /healthz, the image's HEALTHCHECK command, no write to /app, and a SIGTERM that ends it with
# "Stopped". Slow (the first build installs Debian's Node.js and npm): run by hand, as root, not in CI.
#   packaging/check-image.sh
set -euo pipefail
cd "$(dirname "$0")/.."

base="localhost/postwire-base:trixie-slim"
image="localhost/postwire:check"
port="${CHECK_PORT:-3999}"
work="$(mktemp -d)"
container=""
cleanup() {
  [ -n "$container" ] && buildah rm "$container" >/dev/null 2>&1 || true
  rm -rf "$work"
}
trap cleanup EXIT

for tool in buildah debootstrap curl python3; do
  command -v "$tool" >/dev/null || { echo "needs $tool (apt-get install buildah debootstrap curl python3)"; exit 2; }
done

if ! buildah inspect --type image "$base" >/dev/null 2>&1; then
  if buildah pull docker.io/library/debian:trixie-slim >/dev/null 2>&1; then
    buildah tag docker.io/library/debian:trixie-slim "$base"
  else
    echo "The registry's debian:trixie-slim cannot be pulled; making it with debootstrap"
    debootstrap --variant=minbase trixie "$work/rootfs" http://deb.debian.org/debian >"$work/debootstrap.log"
    rm -rf "$work"/rootfs/var/cache/apt/archives/*.deb "$work"/rootfs/var/lib/apt/lists/*
    scratch=$(buildah from scratch)
    buildah copy "$scratch" "$work/rootfs/" / >/dev/null
    buildah commit --rm "$scratch" "$base" >/dev/null
    rm -rf "$work/rootfs"
  fi
fi

# Where TLS to the npm registry passes a proxy with its own CA (NODE_EXTRA_CA_CERTS), the build's npm needs it
# too: the file is mounted for the RUN steps, and the Dockerfile's build stage takes its path as a build argument.
ca_args=()
if [ -n "${NODE_EXTRA_CA_CERTS:-}" ] && [ -f "$NODE_EXTRA_CA_CERTS" ]; then
  ca_args=(-v "$NODE_EXTRA_CA_CERTS:/run/extra-ca.pem:ro" --build-arg NODE_EXTRA_CA_CERTS=/run/extra-ca.pem)
fi
started=$(date +%s)
buildah build --format docker --layers --isolation chroot --build-arg DEBIAN_IMAGE="$base" "${ca_args[@]}" \
  -t "$image" . >"$work/build.log" 2>&1 || { tail -30 "$work/build.log"; exit 1; }
echo "built $image in $(($(date +%s) - started)) s"

config() { buildah inspect --type image "$image" | python3 -c "import json, sys; $1"; }
# The HEALTHCHECK's command, one argument a line ("CMD" dropped), and the user the image runs as.
mapfile -t check < <(config 'print("\n".join(json.load(sys.stdin)["Docker"]["config"]["Healthcheck"]["Test"][1:]))')
user=$(config 'print(json.load(sys.stdin)["Docker"]["config"]["User"])')
echo "HEALTHCHECK: ${check[*]}"
echo "user: $user"
container=$(buildah from "$image")
run() { buildah run --isolation chroot --network host --user "$user" -e PORT="$port" "$container" -- "$@"; }

run sh -c 'id; if touch /app/written 2>/dev/null; then echo "/app is writable"; exit 1; fi; touch /data/written'
run postwire serve >"$work/serve.log" 2>&1 &
for _ in $(seq 1 120); do
  grep -q '"msg":"Postwire is listening' "$work/serve.log" && break
  sleep 0.5
done
grep -q '"msg":"Postwire is listening' "$work/serve.log" || { cat "$work/serve.log"; exit 1; }
curl -fsS "http://127.0.0.1:$port/healthz" && echo
# The HEALTHCHECK's own command, run as the container would.
healthy=0
if run "${check[@]}"; then
  echo "HEALTHCHECK passes"
else
  healthy=$?
  echo "HEALTHCHECK fails (exit $healthy; GET /readyz answers $(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$port/readyz"))"
fi
pid=$(grep -o '"pid":[0-9]*' "$work/serve.log" | head -1 | cut -d: -f2)
kill -TERM "$pid"
wait || true
grep -q '"msg":"Stopped"' "$work/serve.log" || { cat "$work/serve.log"; exit 1; }
echo "stopped cleanly on SIGTERM"
exit "$healthy"
