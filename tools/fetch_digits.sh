#!/usr/bin/env bash
# Fetch the 8x8 handwritten digits (1,797 images, the UCI test set that scikit-learn ships)
# from Debian's python3-sklearn package. Only the package file is downloaded (apt-get
# download: nothing is installed) and only sklearn/datasets/data/digits.csv.gz is kept.
#
#   tools/fetch_digits.sh [DEST]        default DEST: data/digits.csv.gz
#
# The examples and tests read tests/data/digits.csv.gz, a copy committed from
# python3-sklearn 1.2.1+dfsg-1 (BSD-3-Clause, see tests/data/README.md); this script is how
# that copy was made and how to check it (the decompressed CSV's sha256 is compared).
set -euo pipefail
dest=${1:-data/digits.csv.gz}
member=./usr/lib/python3/dist-packages/sklearn/datasets/data/digits.csv.gz
csv_sha256=6ebb3d2fee246a4e99363262ddf8a00a3c41bee6014c373ed9d9216ba7f651b8 # python3-sklearn 1.2.1+dfsg-1

for tool in apt-get dpkg-deb tar gzip sha256sum; do
  command -v "$tool" >/dev/null 2>&1 || { echo "fetch_digits: needs $tool (Debian/Ubuntu)" >&2; exit 1; }
done
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
chmod 755 "$tmp" # apt's _apt user downloads into it
(cd "$tmp" && apt-get download -q python3-sklearn >/dev/null 2>"$tmp/apt.err") || {
  cat "$tmp/apt.err" >&2
  echo "fetch_digits: apt-get download python3-sklearn failed (run apt-get update first?)" >&2
  exit 1
}
deb=$(ls "$tmp"/python3-sklearn_*.deb)
dpkg-deb --fsys-tarfile "$deb" | tar -x -C "$tmp" "$member"
got=$(gzip -dc "$tmp/$member" | sha256sum | cut -d' ' -f1)
lines=$(gzip -dc "$tmp/$member" | wc -l)
if [ "$lines" -ne 1797 ]; then
  echo "fetch_digits: $(basename "$deb") holds $lines lines, expected 1797" >&2
  exit 1
fi
if [ "$got" != "$csv_sha256" ]; then
  echo "fetch_digits: warning: the CSV in $(basename "$deb") differs from the committed copy" \
       "(sha256 $got)" >&2
fi
mkdir -p "$(dirname "$dest")"
cp "$tmp/$member" "$dest"
echo "fetch_digits: $dest ($(basename "$deb"), 1797 images)"
