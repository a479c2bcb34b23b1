#!/usr/bin/env bash
# Installs Debian 12 packages (as root, or through sudo):
#   tools/install-deps.sh          # building and running: tools/debian-packages.txt
#   tools/install-deps.sh --test   # that and what the tests need: tools/debian-packages-test.txt
# Used by tools/build.sh (so tools/run.sh and tools/test.sh, CI's command) and the Dockerfiles. Prints
# what it installs, or one line saying that everything is there.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
lists=("$here/debian-packages.txt")
case "${1:-}" in
  "") ;;
  --test) lists+=("$here/debian-packages-test.txt") ;;
  *) echo "usage: $0 [--test]" >&2; exit 2 ;;
esac
names=$(printf '%s\n' "${lists[@]##*/}" | paste -sd+ -)
mapfile -t pkgs < <(grep -h -v -E '^\s*(#|$)' "${lists[@]}")
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
  echo "Debian packages: all ${#pkgs[@]} of $names installed"
  exit 0
fi
sudo=""
[ "$(id -u)" -eq 0 ] || sudo="sudo"
echo "Debian packages: installing ${#missing[@]} of $names: ${missing[*]}"
start=$SECONDS
export DEBIAN_FRONTEND=noninteractive
$sudo apt-get update -qq
$sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
echo "Debian packages: installed ${#missing[@]} (with their dependencies) in $((SECONDS - start)) s"
