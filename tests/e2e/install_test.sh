#!/usr/bin/env bash
# install_test.sh: `meson install` into a temporary root, then build examples/minimal.c against
# the installed pkg-config file (shared and static), run both and the installed CLI, and check
# only the public header was installed.
# Usage: install_test.sh MESON BUILD_DIR SOURCE_DIR CC SANITIZE PREFIX LIBDIR MODEL CLI
# CLI is the build tree's CLI: the installed one must report its version. In a cross build the
# programs run through MESON_EXE_WRAPPER, which meson sets because CLI is a built program.
set -euo pipefail
meson=$1 build=$2 src=$3 cc=$4 sanitize=$5 prefix=$6 libdir=$7 model=$8 cli=$9
read -r -a wrapper <<<"${MESON_EXE_WRAPPER:-}"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
root=$tmp/root
fail() { echo "install_test: $*" >&2; exit 1; }

# Without --no-rebuild: `meson test` builds only what tests use, install needs every target.
"$meson" install -C "$build" --destdir "$root" >"$tmp/install.log" 2>&1 ||
  { cat "$tmp/install.log" >&2; fail "meson install failed"; }

lib=$root$prefix/$libdir
[ -f "$root$prefix/include/edgespec.h" ] || fail "edgespec.h not installed"
extra=$(find "$root$prefix/include" -type f ! -name edgespec.h)
[ -z "$extra" ] || fail "internal headers installed: $extra"
[ -f "$lib/libedgespec.a" ] || fail "static library not installed"
ls "$lib"/libedgespec.so.* >/dev/null 2>&1 || fail "shared library not installed"
# The soname policy of edgespec.h: libedgespec.so.MAJOR, with the development link pointing to it.
major=$(sed -n 's/^#define ES_VERSION_MAJOR \([0-9]*\)$/\1/p' "$root$prefix/include/edgespec.h")
[ -n "$major" ] || fail "no ES_VERSION_MAJOR in the installed edgespec.h"
[ -L "$lib/libedgespec.so.$major" ] && [ -L "$lib/libedgespec.so" ] ||
  fail "soname links libedgespec.so and libedgespec.so.$major not installed"
[ "$(readlink -f "$lib/libedgespec.so")" = "$(readlink -f "$lib/libedgespec.so.$major")" ] ||
  fail "libedgespec.so and libedgespec.so.$major are different libraries"
soname=$(readelf -d "$lib/libedgespec.so.$major" | sed -n 's/.*Library soname: \[\(.*\)\]/\1/p')
[ "$soname" = "libedgespec.so.$major" ] || fail "soname is '$soname', not libedgespec.so.$major"
# The Vulkan loader is opened at run time: neither the library nor its pkg-config file names it.
if readelf -d "$lib/libedgespec.so.$major" | grep NEEDED | grep -q vulkan; then fail "libedgespec NEEDs libvulkan"; fi
if grep -q vulkan "$lib/pkgconfig/edgespec.pc"; then fail "edgespec.pc names vulkan"; fi
[ -x "$root$prefix/bin/edgespec" ] || fail "CLI not installed"

export PKG_CONFIG_LIBDIR=$lib/pkgconfig PKG_CONFIG_SYSROOT_DIR=$root
cflags=$(pkg-config --cflags edgespec) || fail "pkg-config cannot find edgespec.pc in $lib/pkgconfig"
san=()
[ "$sanitize" = none ] || san=(-fsanitize="$sanitize")
"$cc" -std=c11 -Wall -Wextra -Werror "${san[@]}" $cflags "$src/examples/minimal.c" \
  $(pkg-config --libs edgespec) -o "$tmp/minimal_shared"
other_libs=$(pkg-config --static --libs-only-l edgespec | sed 's/-ledgespec//')
"$cc" -std=c11 -Wall -Wextra -Werror "${san[@]}" $cflags "$src/examples/minimal.c" \
  $(pkg-config --libs-only-L edgespec) -Wl,-Bstatic -ledgespec -Wl,-Bdynamic $other_libs -o "$tmp/minimal_static"
# readelf, not ldd: it reads a cross build's binaries too
if readelf -d "$tmp/minimal_static" | grep -q 'NEEDED.*libedgespec'; then fail "the static build links libedgespec.so"; fi

LD_LIBRARY_PATH=$lib "${wrapper[@]}" "$tmp/minimal_shared" "$model" "Hello there" 12 >"$tmp/shared.txt" 2>"$tmp/shared.err" ||
  { cat "$tmp/shared.err" >&2; fail "minimal (shared) failed"; }
"${wrapper[@]}" "$tmp/minimal_static" "$model" "Hello there" 12 >"$tmp/static.txt" 2>"$tmp/static.err" ||
  { cat "$tmp/static.err" >&2; fail "minimal (static) failed"; }
[ -s "$tmp/shared.txt" ] || fail "minimal printed no text"
cmp -s "$tmp/shared.txt" "$tmp/static.txt" || fail "shared and static builds generate different text"
version=$(LD_LIBRARY_PATH=$lib "${wrapper[@]}" "$root$prefix/bin/edgespec" --version) || fail "installed CLI does not run"
[[ $version == "edgespec "* ]] || fail "installed CLI's --version: $version"
[ "$version" = "$("${wrapper[@]}" "$cli" --version)" ] || fail "installed CLI's version differs from the build's"
echo "install_test: ok ($(wc -c <"$tmp/shared.txt") bytes of text)"
