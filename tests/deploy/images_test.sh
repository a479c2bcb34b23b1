#!/usr/bin/env bash
# What can be checked of the container images without a container engine (none runs here):
# - both Dockerfiles are multi-stage, run the daemon as a non-root user with the models and the state as
#   volumes, the config as a file the entrypoint names, and a HEALTHCHECK on /readyz;
# - every file they COPY from the repository exists;
# - the CPU image installs and builds with the scripts CI runs (tools/install-deps.sh, tools/build.sh), and
#   its runtime stage installs only what tools/runtime-packages.sh finds the installed programs load;
# - `cmake --install`, the images' install step, lays out what they expect, and the installed daemon
#   serves on the container config (paths moved to a temporary directory).
# Usage: images_test.sh SOURCE_DIR BUILD_DIR
set -euo pipefail
src=$1
build=$2
fail() { echo "FAIL: $*" >&2; exit 1; }

for df in "$src/Dockerfile" "$src/deploy/Dockerfile.cpu"; do
  name=${df#"$src/"}
  [ -f "$df" ] || fail "$name is missing"
  [ "$(grep -c '^FROM ' "$df")" -ge 2 ] || fail "$name is not multi-stage"
  user=$(grep '^USER ' "$df" | tail -1 | awk '{print $2}')
  [ -n "$user" ] || fail "$name sets no USER"
  case "${user%%:*}" in root|0) fail "$name runs as root" ;; esac
  grep -q '^VOLUME .*"/models"' "$df" || fail "$name has no /models volume"
  grep -q '^VOLUME .*"/state"' "$df" || fail "$name has no /state volume"
  grep -q '^HEALTHCHECK .*' "$df" || fail "$name has no HEALTHCHECK"
  grep -A1 '^HEALTHCHECK' "$df" | grep -q '/readyz' || fail "$name's HEALTHCHECK does not read /readyz"
  grep -q '^ENTRYPOINT \["/opt/autouvmd/bin/autouvmd", "--config", "/etc/autouvmd/autouvmd.yaml"\]' "$df" \
    || fail "$name's ENTRYPOINT is not the daemon with /etc/autouvmd/autouvmd.yaml"
  # COPY sources from the build context (not --from=stage) must exist.
  while read -r -a words; do
    [ ${#words[@]} -gt 0 ] && [ "${words[0]}" = COPY ] || continue
    [[ "${words[1]}" == --from=* ]] && continue
    n=${#words[@]}
    for ((i = 1; i < n - 1; i++)); do
      [ "${words[i]}" = . ] && continue
      [ -e "$src/${words[i]}" ] || fail "$name copies ${words[i]}, which is not in the repository"
    done
  done < "$df"
  # The config the entrypoint reads comes from the installed tree.
  grep -q 'etc/autouvmd/autouvmd.container.yaml /etc/autouvmd/autouvmd.yaml' "$df" \
    || fail "$name does not put the container config where the entrypoint reads it"
done
grep -q 'tools/install-deps.sh' "$src/deploy/Dockerfile.cpu" || fail "Dockerfile.cpu does not use tools/install-deps.sh"
grep -q 'tools/build.sh' "$src/deploy/Dockerfile.cpu" || fail "Dockerfile.cpu does not use tools/build.sh"
grep -q 'tools/install-deps.sh' "$src/tools/build.sh" || fail "tools/build.sh no longer installs through install-deps.sh"
# The CPU image's runtime stage installs the build stage's runtime-packages.txt, not the build's list.
runtime_stage=$(awk '/^FROM /{n++} n==2' "$src/deploy/Dockerfile.cpu")
grep -q 'runtime-packages.txt' <<< "$runtime_stage" || fail "Dockerfile.cpu's runtime stage does not install runtime-packages.txt"
grep -q 'install-deps.sh' <<< "$runtime_stage" && fail "Dockerfile.cpu's runtime stage installs the build's packages"
grep -q 'tools/runtime-packages.sh /opt/autouvmd' "$src/deploy/Dockerfile.cpu" \
  || fail "Dockerfile.cpu's build stage does not list the runtime packages"
grep -q 'tools/test.sh' "$src/.ci/run" || fail ".ci/run no longer runs tools/test.sh"

# The install step.
tmp=$(mktemp -d)
trap '[ "$pid" -gt 0 ] && kill "$pid" 2>/dev/null; rm -rf "$tmp"' EXIT
pid=0
cmake --install "$build" --prefix "$tmp/opt" >/dev/null
for f in bin/autouvmd bin/autouvm-cli bin/autouvm-mkmodel bin/autouvm-convert bin/autouvm-sim lib/autouvm/libautouvm_sentencepiece.so \
         etc/autouvmd/autouvmd.yaml etc/autouvmd/autouvmd.container.yaml; do
  [ -e "$tmp/opt/$f" ] || fail "cmake --install did not install $f"
done

# What the CPU image's runtime stage would install for this tree: the owners of what it loads, no
# toolchain, headers or test tools, and the libraries of what it is built on.
pkgs=$("$src/tools/runtime-packages.sh" "$tmp/opt") || fail "tools/runtime-packages.sh failed: $pkgs"
for p in curl libstdc++6; do grep -qx "$p" <<< "$pkgs" || fail "runtime packages lack $p"; done
for p in 'libtorch[0-9.]*' 'librocksdb[0-9.]*' 'libgrpc++[0-9.]*' 'libprotobuf[0-9]*' 'libsentencepiece[0-9]*'; do
  grep -qxE "$p" <<< "$pkgs" || fail "runtime packages lack one matching $p"
done
bad=$(grep -E -- '-dev$|^(build-essential|cmake|ninja-build|ccache|clang-format|prometheus|golang-go|python3-.*|protobuf-compiler.*)$' \
  <<< "$pkgs" || true)
[ -z "$bad" ] || fail "runtime packages include build or test packages: $(tr '\n' ' ' <<< "$bad")"
while read -r p; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || fail "$p is not a package here"
done <<< "$pkgs"

# The installed daemon on the container config, its paths and ports moved into the temporary directory.
sed -e "s|0.0.0.0:50051|127.0.0.1:0|" -e "s|0.0.0.0:9090|127.0.0.1:0|" -e "s|0.0.0.0:8000|127.0.0.1:0|" -e "s|path: /models|path: $tmp/models|" \
    -e "s|state_dir: /state|state_dir: $tmp/state|" "$tmp/opt/etc/autouvmd/autouvmd.container.yaml" > "$tmp/autouvmd.yaml"
"$tmp/opt/bin/autouvmd" --config "$tmp/autouvmd.yaml" --threads 2 > "$tmp/log" 2>&1 &
pid=$!
for _ in $(seq 600); do
  grep -q 'serving (health SERVING)' "$tmp/log" && break
  kill -0 "$pid" 2>/dev/null || fail "the installed daemon exited: $(cat "$tmp/log")"
  sleep 0.1
done
grep -q 'serving (health SERVING)' "$tmp/log" || fail "the installed daemon did not serve: $(cat "$tmp/log")"
metrics=$(sed -n 's|^.*autouvmd: metrics on http://\([^/]*\)/metrics$|\1|p' "$tmp/log")
[ -n "$metrics" ] || fail "no metrics address in the log"
curl -fsS "http://$metrics/readyz" >/dev/null || fail "/readyz of the installed daemon did not answer 200"
kill -TERM "$pid"
wait "$pid" || fail "the installed daemon did not exit 0 on SIGTERM: $(cat "$tmp/log")"
pid=0
echo "images: both Dockerfiles and the install step check out"
