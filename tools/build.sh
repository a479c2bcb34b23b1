#!/usr/bin/env bash
# Installs the Debian packages (tools/install-deps.sh) and builds into ./build.
#   tools/build.sh                    # the build packages; every target of the build dir
#   tools/build.sh TARGET...          # only those targets and what they need (tools/run.sh: daemon, CLI)
#   tools/build.sh --installed        # what `cmake --install` installs (the container images)
#   tools/build.sh --test [TARGET...] # the test packages too, the tests configured in (tools/test.sh)
# A new build dir is configured without the tests (AUTOUVM_BUILD_TESTS=OFF: GoogleTest is a test package)
# unless --test is given; an existing one keeps its setting unless --test turns the tests on.
# Environment: BUILD_DIR (default ./build), BUILD_TYPE (RelWithDebInfo), JOBS (parallel compile jobs),
# CMAKE_ARGS (more configure arguments, split on spaces), AUTOUVM_SKIP_DEPS=1 (the packages come another
# way: the GPU image unpacks Debian's .debs beside its own system).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build_dir=${BUILD_DIR:-$root/build}
# What CMakeLists.txt's install() lines install; keep the two lists in step.
installed=(autouvmd autouvm-cli autouvm-mkmodel autouvm-convert autouvm-sim autouvm_sentencepiece)
test_mode=0
targets=()
for a in "$@"; do
  case "$a" in
    --test) test_mode=1 ;;
    --installed) targets+=("${installed[@]}") ;;
    -*) echo "usage: $0 [--test] [--installed] [TARGET...]" >&2; exit 2 ;;
    *) targets+=("$a") ;;
  esac
done
if [ "${AUTOUVM_SKIP_DEPS:-0}" != 1 ]; then
  if [ $test_mode = 1 ]; then "$root/tools/install-deps.sh" --test; else "$root/tools/install-deps.sh"; fi
fi
jobs=$(( $(nproc) < 2 ? 1 : 2 ))  # libtorch translation units need ~1.5 GB each
[ "$(nproc)" -gt 8 ] && jobs=$(( $(nproc) / 2 ))
jobs=${JOBS:-$jobs}
configure=(-DCMAKE_BUILD_TYPE="${BUILD_TYPE:-RelWithDebInfo}")
if [ $test_mode = 1 ]; then
  configure+=(-DAUTOUVM_BUILD_TESTS=ON)
elif [ ! -f "$build_dir/CMakeCache.txt" ]; then
  configure+=(-DAUTOUVM_BUILD_TESTS=OFF)
fi
read -r -a extra <<< "${CMAKE_ARGS:-}"
mkdir -p "$build_dir"
log=$build_dir/configure.log
echo "configuring $build_dir (${configure[*]}${extra[*]:+ ${extra[*]}}), log: $log"
cmake -S "$root" -B "$build_dir" -G Ninja "${configure[@]}" "${extra[@]}" > "$log" 2>&1 \
  || { cat "$log"; echo "cmake could not configure $build_dir" >&2; exit 1; }
grep -E '^-- autouvmd:' "$log" || true
echo "building ${targets[*]:-every target} in $build_dir with $jobs jobs"
start=$SECONDS
if [ ${#targets[@]} -gt 0 ]; then
  cmake --build "$build_dir" -j "$jobs" --target "${targets[@]}"
else
  cmake --build "$build_dir" -j "$jobs"
fi
echo "built in $((SECONDS - start)) s"
