#!/usr/bin/env bash
# Builds Debian's own Abseil -- the source of exactly the installed libabsl
# version, with Debian's patches -- under ThreadSanitizer, as shared
# libraries with Debian's sonames, into DIR/lib.
#
# Why: absl::Mutex and absl::CondVar (ours and gRPC's, which uses them for
# its own locks) live in libabsl_synchronization.so. Debian's build is not
# instrumented, so TSan cannot see those locks and reports every access they
# guard as a race. Running TSan binaries with LD_LIBRARY_PATH=DIR/lib swaps
# in an instrumented build of the same code and ABI (same patches, inline
# namespace and options), and TSan sees every lock. Every Abseil library is
# rebuilt, not only synchronization: templates such as CallOnceImpl are
# instantiated in many of them and the dynamic linker binds each to the first
# copy it finds, so one uninstrumented library would hide a call_once or a
# Status reference count from TSan.
#
# The source package comes from Debian's mirror through apt-get, with a
# private source list and state under DIR (the system's apt configuration is
# not touched). Reruns are no-ops while DIR/lib matches the installed version.
#
# Usage: scripts/tsan_abseil.sh DIR
set -euo pipefail
if [ $# -ne 1 ]; then
  sed -n '2,18p' "$0" >&2
  exit 2
fi
mkdir -p "$1"
DIR=$(cd "$1" && pwd)
ABSL_VERSION=$(dpkg-query -W -f='${Version}' libabsl-dev)
if [ -f "$DIR/lib/VERSION" ] && [ "$(cat "$DIR/lib/VERSION")" = "$ABSL_VERSION" ]; then
  echo "tsan_abseil: instrumented Abseil $ABSL_VERSION already in $DIR/lib"
  exit 0
fi

CODENAME=$(sed -n 's/^VERSION_CODENAME=//p' /etc/os-release)
APT="$DIR/apt"
rm -rf "$APT" "$DIR/src" "$DIR/build" "$DIR/lib"
mkdir -p "$APT/lists/partial" "$APT/cache/archives/partial"
cat >"$APT/sources.list" <<SOURCES
deb-src http://deb.debian.org/debian $CODENAME main
deb-src http://deb.debian.org/debian $CODENAME-updates main
deb-src http://deb.debian.org/debian-security $CODENAME-security main
SOURCES
apt_options=(-q -o "Dir::Etc::SourceList=$APT/sources.list" -o "Dir::Etc::SourceParts=/dev/null"
             -o "Dir::State::Lists=$APT/lists" -o "Dir::Cache=$APT/cache"
             -o "APT::Sandbox::User=root")
echo "tsan_abseil: fetching Debian's abseil $ABSL_VERSION source"
apt-get "${apt_options[@]}" update >/dev/null
(cd "$APT" && apt-get "${apt_options[@]}" source --download-only "abseil=$ABSL_VERSION" >/dev/null)
# apt-get checked the files against the signed archive index; dpkg-source
# would look for the uploader's key, which no package installs.
dpkg-source --no-check -x "$APT"/abseil_*.dsc "$DIR/src" >/dev/null

echo "tsan_abseil: building Abseil's libraries with -fsanitize=thread"
# Build type None (no -DNDEBUG), as Debian builds it.
cmake -S "$DIR/src" -B "$DIR/build" -G Ninja -DCMAKE_BUILD_TYPE=None \
    -DCMAKE_CXX_COMPILER=clang++ -DCMAKE_CXX_STANDARD=17 -DBUILD_SHARED_LIBS=ON \
    -DABSL_PROPAGATE_CXX_STD=ON \
    "-DCMAKE_CXX_FLAGS=-O1 -gline-tables-only -fsanitize=thread" \
    -DCMAKE_SHARED_LINKER_FLAGS=-fsanitize=thread >/dev/null
cmake --build "$DIR/build" -j "$(nproc)" >/dev/null
mkdir -p "$DIR/lib"
find "$DIR/build" -name 'libabsl_*.so.*' -exec cp -P {} "$DIR/lib/" \;
echo "$ABSL_VERSION" >"$DIR/lib/VERSION"
echo "tsan_abseil: $(find "$DIR/lib" -name 'libabsl_*.so.*.*' | wc -l) libraries in $DIR/lib"
