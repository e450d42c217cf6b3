#!/usr/bin/env bash
# Unpacks the Debian source package that built an installed -dev package, for a Windows
# cross-build (Debian ships no Windows builds of absl, protobuf, gRPC and their dependencies).
#
#   tools/windows/debian-source.sh DEV_PACKAGE WORK_DIR     -> prints the unpacked tree's path
#
# The source comes from the system's Debian mirror through a private deb-src list and private
# apt state under WORK_DIR/apt: the system's apt configuration is not touched. The tree is
# WORK_DIR/<source>-<upstream version> with Debian's patches applied; a second call reuses it.
set -euo pipefail
dev_package=$1
work=$2
source_package=$(dpkg-query -W -f '${source:Package}' "$dev_package")
version=$(dpkg-query -W -f '${source:Version}' "$dev_package")
upstream=${version#*:}
upstream=${upstream%-*}
tree="$work/$source_package-$upstream"
if [[ -f "$tree/.ddo-unpacked" ]]; then
  echo "$tree"
  exit 0
fi
apt_dir="$work/apt"
mkdir -p "$apt_dir/lists/partial" "$apt_dir/cache/archives/partial" "$apt_dir/etc"
# The system's Debian mirror: the first "URIs:" of a deb822 file, or of a one-line "deb" entry.
mirror=$( { sed -n 's/^URIs:[[:space:]]*//p' /etc/apt/sources.list.d/*.sources 2>/dev/null
            sed -n 's/^deb[[:space:]]\+\(\[[^]]*\][[:space:]]\+\)\?\([^[:space:]]\+\).*/\2/p' \
              /etc/apt/sources.list 2>/dev/null; } | grep -v security | head -n 1 || true)
security=$(sed -n 's/^URIs:[[:space:]]*//p' /etc/apt/sources.list.d/*.sources 2>/dev/null |
           grep security | head -n 1 || true)
codename=$(. /etc/os-release && echo "$VERSION_CODENAME")
signed="deb-src [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg]"
{
  echo "$signed ${mirror:-http://deb.debian.org/debian} $codename main"
  echo "$signed ${mirror:-http://deb.debian.org/debian} $codename-updates main"
  echo "$signed ${security:-http://deb.debian.org/debian-security} $codename-security main"
} > "$apt_dir/etc/sources.list"
options=(-o "Dir::Etc::SourceList=$apt_dir/etc/sources.list" -o "Dir::Etc::SourceParts=-"
         -o "Dir::State::Lists=$apt_dir/lists" -o "Dir::Cache=$apt_dir/cache"
         -o "APT::Sandbox::User=root" -q)
apt-get "${options[@]}" update >/dev/null
# The installed version's source, or (when the archive has moved past it, as a security update
# does) the newest of the same package.
if ! (cd "$work" && apt-get "${options[@]}" source --download-only "$source_package=$version" \
        >/dev/null 2>&1); then
  fetched=""
  for version in $(apt-cache "${options[@]}" showsrc "$source_package" |
                   sed -n 's/^Version: //p' | sort -rV); do
    if (cd "$work" && apt-get "${options[@]}" source --download-only \
          "$source_package=$version" >/dev/null 2>&1); then
      fetched=$version
      break
    fi
  done
  [[ -n "$fetched" ]] || { echo "debian-source: no source of $source_package to fetch" >&2; exit 1; }
  echo "debian-source: $dev_package's source $version (the installed one is gone)" >&2
  upstream=${version#*:}
  upstream=${upstream%-*}
  tree="$work/$source_package-$upstream"
fi
rm -rf "$tree"
mkdir -p "$tree"
tarball=$(ls "$work/${source_package}_${upstream}".orig.tar.* | head -n 1)
tar -xf "$tarball" -C "$tree" --strip-components=1
# Debian's patches (quilt series), as the -dev package was built.
debian=$(ls "$work/${source_package}_${version#*:}".debian.tar.* 2>/dev/null | head -n 1 || true)
if [[ -n "$debian" ]]; then
  tar -xf "$debian" -C "$tree"
  if [[ -f "$tree/debian/patches/series" ]]; then
    while read -r patch _; do
      [[ -z "$patch" || "$patch" == \#* ]] && continue
      patch -s -d "$tree" -p1 < "$tree/debian/patches/$patch"
    done < "$tree/debian/patches/series"
  fi
fi
touch "$tree/.ddo-unpacked"
echo "$tree"
