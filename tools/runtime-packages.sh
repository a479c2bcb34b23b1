#!/usr/bin/env bash
# The Debian packages an installed autouvmd tree needs at run time: those that own the shared libraries
# its programs and libraries load (ldd, through symlinks and alternatives), plus curl for the images'
# HEALTHCHECK — not the toolchain or the -dev packages tools/debian-packages.txt installs to build it.
# The CPU image's build stage writes the list, its runtime stage installs exactly that.
# Usage: runtime-packages.sh PREFIX      (prints one package per line, sorted)
set -euo pipefail
prefix=$1
fail() { echo "runtime-packages: $*" >&2; exit 1; }
[ -d "$prefix/bin" ] || fail "$prefix/bin is not an installed tree"
mapfile -t objects < <(find "$prefix/bin" "$prefix/lib" -type f \( -perm -u+x -o -name '*.so*' \) 2>/dev/null)
[ ${#objects[@]} -gt 0 ] || fail "nothing to inspect under $prefix"
declare -A libs=()
for o in "${objects[@]}"; do
  [ "$(od -An -N4 -tx1 "$o" | tr -d ' ')" = 7f454c46 ] || continue # ELF objects only
  out=$(LD_LIBRARY_PATH="$prefix/lib/autouvm${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" ldd "$o") \
    || fail "ldd $o failed"
  if grep -q 'not found' <<< "$out"; then fail "$o: $(grep 'not found' <<< "$out" | head -3 | tr -s ' \n' ' ')"; fi
  while read -r path; do
    case "$path" in "$prefix"/*) continue ;; esac
    libs[$path]=1
  done < <(awk '$2 == "=>" && $3 ~ /^\// {print $3} $1 ~ /^\// {print $1}' <<< "$out")
done
# Every path a library may be known to dpkg by: as ldd found it and resolved, each with and without /usr
# (/lib is /usr/lib on merged-/usr Debian 12), asked of dpkg in one call.
declare -A aliases=()
for lib in "${!libs[@]}"; do
  for candidate in "$lib" "$(readlink -f "$lib")"; do
    for path in "$candidate" "${candidate#/usr}" "/usr${candidate#/usr}"; do aliases[$path]=$lib; done
  done
done
declare -A owner=()
while IFS= read -r line; do
  pkg=${line%%: *}
  path=${line#*: }
  [ -n "${aliases[$path]:-}" ] && owner[${aliases[$path]}]=${pkg%%:*}
done < <(dpkg-query -S "${!aliases[@]}" 2>/dev/null || true)
declare -A pkgs=([curl]=1)
for lib in "${!libs[@]}"; do
  [ -n "${owner[$lib]:-}" ] || fail "no Debian package owns $lib"
  pkgs[${owner[$lib]}]=1
done
printf '%s\n' "${!pkgs[@]}" | sort
