#!/bin/sh
# debversion.sh VERSION prints the Debian package version of a build
# version (git describe's): v1.2.3 -> 1.2.3; v1.2.3-4-gabcdef -> 1.2.3+4.gabcdef;
# a bare commit (no tag yet) -> 0.0.0~git.<commit> (below any release);
# -dirty -> +dirty. Debian versions start with a digit and take no "-"
# outside the revision.
set -e
v=${1:?usage: debversion.sh VERSION}
v=${v#v}
if ! printf '%s' "$v" | grep -Eq '^[0-9]+\.'; then
	v="0.0.0~git.$v"
fi
printf '%s\n' "$v" | sed -e 's/-dirty$/+dirty/' -e 's/-/+/' -e 's/-/./g'
