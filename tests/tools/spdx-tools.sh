#!/usr/bin/env bash
# The SPDX validator (pyspdxtools, from PyPI at the pins of tests/tools/spdx/requirements.txt) in a virtualenv in the
# tools cache, keyed by the pins; installed only when missing. Prints the virtualenv's bin folder on the last line.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
key=$(sha256sum "$here/spdx/requirements.txt" | cut -c1-12)
dir="${CAPI_IPAM_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/capi-ipam-in-cluster}/spdx-bin/spdx-tools-$key"
if [[ ! -x $dir/bin/pyspdxtools ]]; then
  echo "spdx-tools: installing pyspdxtools into $dir" >&2
  rm -rf "$dir.tmp"
  python3 -m venv "$dir.tmp"
  "$dir.tmp/bin/pip" install --quiet --disable-pip-version-check --no-deps -r "$here/spdx/requirements.txt" >&2
  rm -rf "$dir"
  mv "$dir.tmp" "$dir"
  # A virtualenv's scripts name their interpreter by path: point them at the final folder.
  sed -i "1s|$dir.tmp|$dir|" "$dir"/bin/*
fi
echo "$dir/bin"
