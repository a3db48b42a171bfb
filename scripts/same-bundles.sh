#!/usr/bin/env bash
# Lowers every preset in six cuts with two rdu binaries and compares the bundles byte for byte:
# a change that must not change behaviour (issue 50's rule) leaves every bundle identical.
#   scripts/same-bundles.sh BEFORE_RDU AFTER_RDU [WORKDIR]
# Prints one line per pair that differs (or that only one binary refuses) and a tally; exits 1
# if any differs. Pairs both binaries refuse (a width that does not divide) are listed, not failed.
set -u
before=${1:?usage: same-bundles.sh BEFORE_RDU AFTER_RDU [WORKDIR]}
after=${2:?usage: same-bundles.sh BEFORE_RDU AFTER_RDU [WORKDIR]}
work=${3:-$(mktemp -d)}
mkdir -p "$work"
diffs=0
n=0
for p in $("$before" presets | awk '{print $1}'); do
  for cut in "decode" "tp --tp 8" "batched --batch 4" "prefill --chunk 64" "verify --draft-tokens 4" \
    "batched-tp --batch 4 --tp 4"; do
    tag="$p-${cut// /_}"
    # shellcheck disable=SC2086
    "$before" lower "$p" --cut $cut --ctx 1024 -o "$work/b-$tag" >/dev/null 2>"$work/b-$tag.err"
    rb=$?
    # shellcheck disable=SC2086
    "$after" lower "$p" --cut $cut --ctx 1024 -o "$work/a-$tag" >/dev/null 2>"$work/a-$tag.err"
    ra=$?
    n=$((n + 1))
    if [ "$rb" != "$ra" ]; then
      echo "only one refuses: $tag (before $rb, after $ra)"
      diffs=$((diffs + 1))
    elif [ "$rb" != 0 ]; then
      echo "both refuse: $tag"
    elif ! diff -r "$work/b-$tag" "$work/a-$tag" >/dev/null; then
      echo "differs: $tag"
      diffs=$((diffs + 1))
    fi
    rm -rf "$work/b-$tag" "$work/a-$tag"
  done
done
echo "$n pairs compared, $diffs differ"
[ "$diffs" = 0 ]
