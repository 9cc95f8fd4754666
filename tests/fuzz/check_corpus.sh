#!/bin/sh
# The committed seed corpus (and the dictionaries it writes) is what its generator makes today (issue 37, item 11): after a change
# to a wire format or to config/, seeds made by the old encoders would no longer reach the code
# they were made for, and nothing would say so.
#   check_corpus.sh GENERATOR REPO_ROOT
set -eu
gen=$1
root=$2
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
mkdir -p "$scratch/tests/fuzz"
cp "$root/tests/fuzz/CMakeLists.txt" "$scratch/tests/fuzz/"
ln -s "$root/config" "$scratch/config"
"$gen" "$scratch" >/dev/null
status=0
for dir in "$scratch"/tests/fuzz/corpus/*/; do
  target=$(basename "$dir")
  if ! diff -r "$dir" "$root/tests/fuzz/corpus/$target" >/dev/null; then
    echo "tests/fuzz/corpus/$target is not what tollgate-fuzz-corpus makes now:"
    diff -rq "$dir" "$root/tests/fuzz/corpus/$target" | sed 's/^/  /' || true
    status=1
  fi
done
for dict in "$scratch"/tests/fuzz/dicts/*.dict; do
  name=$(basename "$dict")
  if ! diff "$dict" "$root/tests/fuzz/dicts/$name" >/dev/null; then
    echo "tests/fuzz/dicts/$name is not what tollgate-fuzz-corpus makes now:"
    diff "$dict" "$root/tests/fuzz/dicts/$name" | sed 's/^/  /' || true
    status=1
  fi
done
[ "$status" = 0 ] || echo "regenerate it: build/tests/fuzz/tollgate-fuzz-corpus . (tests/fuzz/README.md), and commit the result"
exit "$status"
