#!/usr/bin/env bash
# Builds the CPU image (deploy/Dockerfile.cpu) and runs it for real, without a Docker daemon:
#   1. installs buildah and debootstrap (Debian's packages) when they are missing;
#   2. makes the base image the Dockerfile names, debian:12, with debootstrap from Debian's packages
#      (cached as a tarball; imported into buildah's storage once);
#   3. builds the image with buildah (chroot isolation, no pulls, layers cached between runs);
#   4. starts the image's entrypoint as the image's user with `buildah run` (it shares the host's
#      network, so the daemon listens on 127.0.0.1, on ports it picks itself) on empty /models and /state
#      volumes, and waits for /readyz: the daemon generates its default model, tiny-llama, into /models;
#   5. generates text from it with autouvm-cli (the host's build/clients/autouvm-cli when built, else the
#      image's own);
#   6. reads /metrics (the request counted) and checks what the daemon wrote in the volumes;
#   7. sends the daemon SIGTERM and checks that it exits 0;
# then prints each phase's time and each Dockerfile step's. The first run on a 2-core machine takes ~15
# minutes, most of it the C++ build (docs/deployment.md): it is not one of the tests.
# Usage (as root): tools/image-test.sh
# Environment: AUTOUVM_IMAGE_CACHE (default /var/tmp/autouvm-image): where the base tarball and the logs
#   go; AUTOUVM_IMAGE_SRC (default: this repository): the build context; AUTOUVM_IMAGE_TAG (autouvmd:cpu);
#   AUTOUVM_CLI: the client to use; AUTOUVM_IMAGE_WAIT (600): seconds to wait for /readyz.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
src=$(cd "${AUTOUVM_IMAGE_SRC:-$root}" && pwd)
cache=${AUTOUVM_IMAGE_CACHE:-/var/tmp/autouvm-image}
tag=${AUTOUVM_IMAGE_TAG:-autouvmd:cpu}
wait_s=${AUTOUVM_IMAGE_WAIT:-600}
base_name=docker.io/library/debian:12 # what `FROM debian:12` resolves to
mkdir -p "$cache"
work=$(mktemp -d "$cache/run.XXXXXX")
start_all=$SECONDS
summary=()
phase_name=""
phase_start=0
begin() { phase_name=$1; phase_start=$SECONDS; echo "== $phase_name"; }
end() {
  summary+=("$(printf '%-48s %6d s  %s' "$phase_name" $((SECONDS - phase_start)) "${1:-ok}")")
  echo "   $((SECONDS - phase_start)) s: ${1:-ok}"
}
reported=0
report() {
  reported=1
  echo
  echo "image test of $tag from $src ($(date -u +%FT%TZ), $(nproc) cores):"
  printf '  %s\n' "${summary[@]}"
  printf '  %-48s %6d s\n' total $((SECONDS - start_all))
}
fail() {
  summary+=("$(printf '%-48s %6d s  FAILED: %s' "$phase_name" $((SECONDS - phase_start)) "$*")")
  report
  echo "image test FAILED: $*; logs in $work" >&2
  exit 1
}
ctr=""
run_pid=0
dpid=""
cleanup() { # the daemon first: killing buildah run alone would leave it running
  local rc=$?
  if [ "$rc" -ne 0 ] && [ "$reported" = 0 ]; then # a command failed outside fail()
    summary+=("$(printf '%-48s %6d s  FAILED: exit %d' "$phase_name" $((SECONDS - phase_start)) "$rc")")
    report
  fi
  [ -n "$dpid" ] || [ "$run_pid" -eq 0 ] || dpid=$(find_daemon)
  if [ -n "$dpid" ] && kill -TERM "$dpid" 2>/dev/null; then
    for _ in $(seq 50); do kill -0 "$dpid" 2>/dev/null || break; sleep 0.1; done
    kill -KILL "$dpid" 2>/dev/null
  fi
  [ "$run_pid" -gt 0 ] && kill -KILL "$run_pid" 2>/dev/null
  [ -n "$ctr" ] && buildah rm "$ctr" >/dev/null 2>&1
  return 0
}
# With chroot isolation the daemon is a process of this host: the one below buildah run named autouvmd.
descendants() { local c; for c in $(ps -o pid= --ppid "$1" || true); do echo "$c"; descendants "$c"; done; }
find_daemon() {
  local p
  for p in $(descendants "$run_pid"); do
    if [ "$(cat "/proc/$p/comm" 2>/dev/null)" = autouvmd ]; then echo "$p"; break; fi
  done
  return 0
}
trap cleanup EXIT
[ "$(id -u)" -eq 0 ] || { echo "image-test: run it as root (debootstrap, buildah)" >&2; exit 1; }

begin "tools: buildah, debootstrap, curl"
missing=()
for p in buildah debootstrap curl; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq && apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null \
    || fail "apt-get could not install ${missing[*]}"
  end "installed ${missing[*]}"
else
  end "already installed"
fi

begin "base image debian:12 (debootstrap)"
tarball=$cache/debian-12.tar
if [ -s "$tarball" ]; then
  note="cached $tarball"
else
  # The host's Debian mirror, as its apt sources name it (debootstrap's default where none is found).
  mirror=$(sed -n 's/^URIs: *\([^ ]*\/debian\)\/*$/\1/p' /etc/apt/sources.list.d/debian.sources 2>/dev/null | head -1)
  [ -n "$mirror" ] || mirror=$(awk '$1 == "deb" && $3 == "bookworm" {print $2; exit}' /etc/apt/sources.list 2>/dev/null)
  rootfs=$cache/rootfs.tmp
  rm -rf "$rootfs"
  nice -n 19 debootstrap --variant=minbase bookworm "$rootfs" ${mirror:+"$mirror"} > "$work/debootstrap.log" 2>&1 \
    || { tail -n 20 "$work/debootstrap.log"; fail "debootstrap failed (log: $work/debootstrap.log)"; }
  # Apt inside the image as on the host (the updates and security suites too), as Debian's image has it.
  if [ -f /etc/apt/sources.list.d/debian.sources ]; then
    cp /etc/apt/sources.list.d/debian.sources "$rootfs/etc/apt/sources.list.d/debian.sources"
    rm -f "$rootfs/etc/apt/sources.list"
  fi
  rm -rf "$rootfs"/var/lib/apt/lists/* "$rootfs"/var/cache/apt/archives/*.deb
  tar -C "$rootfs" --numeric-owner -cf "$tarball.tmp" . && mv "$tarball.tmp" "$tarball"
  rm -rf "$rootfs"
  note="made $tarball ($(du -m "$tarball" | cut -f1) MiB)"
fi
if ! buildah inspect --type image "$base_name" >/dev/null 2>&1; then
  base=$(buildah from scratch)
  buildah add "$base" "$tarball" / >/dev/null || fail "buildah could not add $tarball"
  buildah config --env PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin --cmd bash "$base"
  buildah commit --quiet --rm "$base" "$base_name" >/dev/null || fail "buildah could not commit $base_name"
  note="$note, imported as $base_name"
else
  note="$note, $base_name already in buildah's storage"
fi
end "$note"

begin "image build (buildah bud deploy/Dockerfile.cpu)"
echo "log: $cache/build.log"
# Docker's format keeps the HEALTHCHECK (OCI's has none); --layers reuses unchanged steps' layers.
# Each line of the log starts with the seconds since the build began, for the steps' times below.
stamp() { local t0=$SECONDS line; while IFS= read -r line; do printf '%5d %s\n' $((SECONDS - t0)) "$line"; done; }
set +e
nice -n 19 buildah bud --isolation chroot --pull=never --layers --format docker \
  -f "$src/deploy/Dockerfile.cpu" -t "$tag" "$src" 2>&1 | stamp | tee "$cache/build.log"
rc=${PIPESTATUS[0]}
set -e
[ "$rc" -eq 0 ] || fail "buildah bud exited $rc (log: $cache/build.log)"
size=$(buildah images --format '{{.Size}}' "$tag" | head -1)
end "$tag, $size"
# The Dockerfile's steps that took a second or more (a step cached from an earlier run takes none).
while IFS= read -r line; do summary+=("$line"); done < <(awk '
  function flush(t) { if (name != "" && t - at >= 1) printf "  %-46.46s %6d s\n", name, t - at }
  $2 ~ /^\[[0-9]+\/[0-9]+\]$/ && $3 == "STEP" {
    flush($1); at = $1; name = $2 " " substr($0, index($0, ": ") + 2); next
  }
  $2 ~ /^\[[0-9]+\/[0-9]+\]$/ && $3 == "COMMIT" { flush($1); name = "" }
  { last = $1 } END { flush(last) }' "$cache/build.log")

begin "start the entrypoint, wait for /readyz"
ctr=$(buildah from --pull=never "$tag")
inspect() { buildah inspect --type container --format "$1" "$ctr" | sed '/^$/d'; }
mapfile -t entrypoint < <(inspect '{{range .OCIv1.Config.Entrypoint}}{{println .}}{{end}}')
user=$(inspect '{{.OCIv1.Config.User}}')
health=$(inspect '{{if .Docker.Config.Healthcheck}}{{.Docker.Config.Healthcheck.Test}}{{end}}')
[ ${#entrypoint[@]} -gt 0 ] || fail "the image has no entrypoint"
case "${user%%:*}" in ""|0|root) fail "the image runs as '${user:-root}'" ;; esac
[[ "$health" == *readyz* ]] || fail "the image has no HEALTHCHECK on /readyz: '$health'"
volumes=$(inspect '{{range $k, $v := .OCIv1.Config.Volumes}}{{println $k}}{{end}}' | sort | tr '\n' ' ')
[ "$volumes" = "/models /state " ] || fail "the image's volumes are '$volumes', not /models and /state"
# What a fresh named volume starts from: the image's own directories, which must be the user's.
mnt=$(buildah mount "$ctr")
owners=$(stat -c %u:%g "$mnt/models" "$mnt/state" | sort -u | tr '\n' ' ')
buildah umount "$ctr" >/dev/null
[ "$owners" = "$user " ] || fail "the image's /models and /state belong to $owners, not to $user"
# Empty volumes owned by the image's user, as `docker run -v models:/models` gives them: directories of
# the host, so that what the daemon writes there can be checked. buildah run would mount volumes of its
# own over them for the image's VOLUMEs, so those go from this working container's config (not the image's).
mkdir -p "$work/models" "$work/state"
chown "$user" "$work/models" "$work/state"
buildah config --volume /models- --volume /state- "$ctr"
# The container config's addresses (0.0.0.0:50051, 0.0.0.0:9090) would clash with whatever the host runs:
# the daemon's flags move them to 127.0.0.1 ports it picks and reports.
buildah run --isolation chroot --user "$user" -v "$work/models:/models" -v "$work/state:/state" "$ctr" -- \
  "${entrypoint[@]}" --listen 127.0.0.1:0 --metrics-listen 127.0.0.1:0 --port-file /state/grpc.port \
  > "$work/daemon.log" 2>&1 &
run_pid=$!
metrics=""
port=""
deadline=$((SECONDS + wait_s))
while [ $SECONDS -lt $deadline ]; do
  kill -0 "$run_pid" 2>/dev/null || fail "the daemon exited: $(tail -n 20 "$work/daemon.log")"
  [ -n "$dpid" ] || dpid=$(find_daemon)
  [ -n "$metrics" ] || metrics=$(sed -n 's|^autouvmd: metrics on http://\([^/]*\)/metrics$|\1|p' "$work/daemon.log")
  [ -n "$port" ] || port=$(cat "$work/state/grpc.port" 2>/dev/null || true)
  if [ -n "$metrics" ] && [ -n "$port" ] && curl -fsS -o /dev/null "http://$metrics/readyz" 2>/dev/null; then break; fi
  sleep 0.2
done
curl -fsS -o /dev/null "http://$metrics/readyz" 2>/dev/null || fail "no /readyz 200 within $wait_s s: $(tail -n 20 "$work/daemon.log")"
end "gRPC 127.0.0.1:$port, metrics $metrics, user $user"

begin "generate (autouvm-cli, tiny-llama, 8 tokens)"
cli=${AUTOUVM_CLI:-$root/build/clients/autouvm-cli}
args=(generate --addr "127.0.0.1:$port" --model tiny-llama --prompt Hello --max-tokens 8)
if [ -x "$cli" ]; then
  which="the host's $cli"
  "$cli" "${args[@]}" > "$work/generate.out" 2>&1 || fail "generate failed: $(cat "$work/generate.out")"
else
  which="the image's /opt/autouvmd/bin/autouvm-cli (no host client at $cli)"
  buildah run --isolation chroot --user "$user" "$ctr" -- /opt/autouvmd/bin/autouvm-cli "${args[@]}" \
    > "$work/generate.out" 2>&1 || fail "generate failed: $(cat "$work/generate.out")"
fi
[ -s "$work/generate.out" ] || fail "generate printed nothing"
sed 's/^/  | /' "$work/generate.out"
end "$which"

begin "/metrics and the volumes"
curl -fsS "http://$metrics/metrics" > "$work/metrics.txt" || fail "/metrics did not answer"
ok=$(awk '/^autouvm_requests_total\{/ && /code="OK"/ && /model="tiny-llama"/ {s += $NF} END {print s + 0}' "$work/metrics.txt")
[ "$ok" -ge 1 ] || fail "/metrics counts no OK request of tiny-llama: $(grep '^autouvm_requests_total' "$work/metrics.txt")"
tokens=$(awk '/^autouvm_generation_tokens_total\{/ && /model="tiny-llama"/ {s += $NF} END {print s + 0}' "$work/metrics.txt")
[ "$tokens" -ge 1 ] || fail "/metrics counts no generated token of tiny-llama"
[ -d "$work/models/tiny-llama" ] || fail "the daemon generated no /models/tiny-llama"
uid=${user%%:*}
gid=${user#*:}
others=$(find "$work/models" "$work/state" \( ! -uid "$uid" -o ! -gid "$gid" \) | head -3)
[ -z "$others" ] || fail "files in the volumes not owned by $user: $others"
files=$(find "$work/models/tiny-llama" -type f | wc -l)
end "$ok OK request(s), $tokens tokens; /models/tiny-llama: $files files, all of $user"

begin "SIGTERM, exit status"
[ -n "$dpid" ] || dpid=$(find_daemon)
[ -n "$dpid" ] || fail "no autouvmd process under buildah run ($run_pid)"
kill -TERM "$dpid"
set +e
wait "$run_pid"
rc=$?
set -e
run_pid=0
dpid=""
[ "$rc" -eq 0 ] || fail "the daemon exited $rc on SIGTERM: $(tail -n 20 "$work/daemon.log")"
end "exit 0"

report
rm -rf "$work/models" "$work/state" # the generated model: 11 MiB a run
echo "image test passed; logs in $work"
