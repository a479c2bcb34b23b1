#!/usr/bin/env bash
# Builds the libFuzzer targets of tests/fuzz with clang (ASan + UBSan) into build-fuzz/ and runs each over
# its seed corpus (tests/fuzz/corpus/<name>) plus what earlier runs found (build-fuzz/corpus/<name>).
#   tools/fuzz.sh                                     # every target, 30 s each (what the tests run)
#   AUTOUVM_FUZZ_SECONDS=3600 tools/fuzz.sh request   # one target for an hour
# A crash, a leak or undefined behaviour stops the target and fails the script; the input that did it is
# written to build-fuzz/crash-* (replay: build-fuzz/<name>_fuzzer build-fuzz/crash-...).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${FUZZ_BUILD_DIR:-$root/build-fuzz}
seconds=${AUTOUVM_FUZZ_SECONDS:-30}
cmake -S "$root/tests/fuzz" -B "$build" -G Ninja -DCMAKE_CXX_COMPILER=clang++ >/dev/null
cmake --build "$build" -j "${JOBS:-2}"
targets=("$@")
[ ${#targets[@]} -gt 0 ] || targets=(request config profile tokenizer checkpoint chat_template openai_request weight_codec)
for t in "${targets[@]}"; do
  mkdir -p "$build/corpus/$t"
  echo "== ${t}_fuzzer, ${seconds} s"
  "$build/${t}_fuzzer" -max_total_time="$seconds" -rss_limit_mb=2048 -max_len=16384 -print_final_stats=1 \
    -artifact_prefix="$build/" "$build/corpus/$t" "$root/tests/fuzz/corpus/$t" > "$build/$t.log" 2>&1 ||
    { tail -n 60 "$build/$t.log"; echo "${t}_fuzzer failed (log: $build/$t.log)"; exit 1; }
  grep -E '^(Done|stat::number_of_executed_units|stat::peak_rss_mb)' "$build/$t.log" || tail -n 3 "$build/$t.log"
done
