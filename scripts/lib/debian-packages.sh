# Sourced by scripts/install-deps and lab/setup: installs Debian packages by name.
#
# Whether a package is there is asked of dpkg by the package's own name, never guessed from files
# that a neighbouring package may also ship (`libclang-cpp14` puts a `libclang-cpp.so.14` under
# /usr/lib/llvm-14/lib, which a glob for libclang matches, yet it is not the libclang that bindgen
# loads). `debian_missing_packages` is separate from the install so tests can drive it with a
# stand-in `dpkg-query` on PATH.

# Prints, one per line, each named package that dpkg does not report as installed.
debian_missing_packages() {
  local pkg status
  for pkg in "$@"; do
    status=$(dpkg-query -W -f='${db:Status-Status}' "$pkg" 2>/dev/null || true)
    [ "$status" = installed ] || echo "$pkg"
  done
}

# Installs every named package that is missing (nothing when all are there). $1 names the caller
# for messages. Needs root when something is missing.
ensure_debian_packages() {
  local who=$1; shift
  local missing
  missing=$(debian_missing_packages "$@" | sort -u | tr '\n' ' ')
  missing=${missing% }
  [ -n "$missing" ] || return 0
  if [ "$(id -u)" != 0 ]; then
    echo "$who: missing Debian packages ($missing) and not root: install them with apt-get" >&2
    return 1
  fi
  echo "$who: installing Debian packages: $missing" >&2
  export DEBIAN_FRONTEND=noninteractive
  # A fresh machine has no package lists yet; an old list may name versions that are gone.
  apt-get update -q >&2 || { echo "$who: apt-get update failed" >&2; return 1; }
  # shellcheck disable=SC2086 # one word per package
  apt-get install -y -q --no-install-recommends $missing >&2 || {
    echo "$who: apt-get install failed for: $missing" >&2
    return 1
  }
  local still
  still=$(debian_missing_packages $missing | tr '\n' ' ')
  [ -z "$still" ] || { echo "$who: still not installed after apt-get: $still" >&2; return 1; }
}
