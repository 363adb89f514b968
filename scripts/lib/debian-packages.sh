# Sourced by scripts/install-deps and lab/setup: installs Debian packages by name, and finds the
# host's Debian mirror for a suite that its apt sources do not list (lab/setup's pinned kernel).
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

# Prints the URI of the host's own Debian mirror that serves SUITE, as its apt sources name it
# (deb822 `.sources` files or one-line `sources.list`): the security archive's for a `*-security`
# suite, the main archive's otherwise. Nothing when the host's sources name no such archive.
debian_mirror() {
  local archive=debian
  case $1 in *-security) archive=debian-security ;; esac
  awk -v a="/$archive/?\$" '/^URIs:/ && $2 ~ a {print $2; exit} /^deb / && $2 !~ /^\[/ && $2 ~ a {print $2; exit}' \
    /etc/apt/sources.list.d/*.sources /etc/apt/sources.list 2>/dev/null || true
}

# debian_suite_apt DIR SUITE: a package list of SUITE alone (from the host's mirror for it, see
# debian_mirror) kept in DIR, for looking up and downloading a few packages by exact version
# without touching the host's apt sources. Sets DEBIAN_SUITE_APT to the options that make
# apt-get and apt-cache use it.
debian_suite_apt() {
  local dir=$1 suite=$2 mirror
  mirror=$(debian_mirror "$suite")
  [ -n "$mirror" ] || { echo "the host's apt sources name no Debian mirror for $suite" >&2; return 1; }
  mkdir -p "$dir/lists/partial" "$dir/archives/partial"
  echo "deb $mirror $suite main" >"$dir/sources.list"
  DEBIAN_SUITE_APT=(-o "Dir::Etc::SourceList=$dir/sources.list" -o Dir::Etc::SourceParts=/dev/null
    -o "Dir::State::Lists=$dir/lists" -o "Dir::Cache=$dir")
  apt-get "${DEBIAN_SUITE_APT[@]}" update -q >&2 || { echo "apt-get update for $suite failed" >&2; return 1; }
}
