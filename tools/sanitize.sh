#!/usr/bin/env bash
# Builds the daemon, its tools and the tests that drive it with hostile input — in-process and through
# the real daemon — with AddressSanitizer and UBSan (gcc) into build-asan/, and runs them. Any report
# fails the run. libtorch and the other Debian libraries are not instrumented; what runs of ours is.
#   tools/sanitize.sh                 # what the tests run (tools/test.sh)
#   tools/sanitize.sh config_test     # some of them
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${ASAN_BUILD_DIR:-$root/build-asan}
flags="-fsanitize=address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer"
cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_CXX_FLAGS="$flags" \
  -DCMAKE_C_FLAGS="$flags" -DCMAKE_EXE_LINKER_FLAGS="-fsanitize=address,undefined" \
  -DCMAKE_SHARED_LINKER_FLAGS="-fsanitize=address,undefined" >/dev/null
tests=("$@")
if [ ${#tests[@]} -eq 0 ]; then
  tests=(lenient_parse_test request_validation_test config_test model_config_test tokenizer_test bpe_tokenizer_test
         safetensors_test text_stream_test
         sampler_test bad_input_e2e_test bad_files_e2e_test generation_e2e_test)
fi
cmake --build "$build" -j "${JOBS:-2}" --target autouvmd autouvm-cli autouvm-mkmodel "${tests[@]}"
# Leaks are not checked: gRPC's and libtorch's process-lifetime allocations would be all that is found.
export ASAN_OPTIONS=detect_leaks=0:abort_on_error=0:halt_on_error=1:print_summary=1
export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
for t in "${tests[@]}"; do
  bin=$(find "$build/tests" -maxdepth 1 -name "$t" -type f | head -1)
  echo "== $t (ASan + UBSan)"
  "$bin" > "$build/$t.log" 2>&1 || { tail -n 80 "$build/$t.log"; echo "$t failed (log: $build/$t.log)"; exit 1; }
  # The daemons the e2e tests start write their reports to their own stderr, which the tests keep in
  # their temporary directories; a sanitizer that stopped a daemon fails the test that started it.
  if grep -E -q 'ERROR: AddressSanitizer|runtime error:' "$build/$t.log"; then
    grep -E -B2 -A30 'ERROR: AddressSanitizer|runtime error:' "$build/$t.log" | head -n 80
    echo "$t: sanitizer report (log: $build/$t.log)"
    exit 1
  fi
  grep -E '^\[  PASSED  \]|^\[  FAILED  \]' "$build/$t.log" || true
done
