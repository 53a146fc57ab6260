#!/bin/sh
# Runs pjdfstest files inside the sandbox, each in a fresh directory on the
# file system under test, and prints one line per failed assertion:
#   <file> <assertion number>
# followed by "done <file>" for every file that ran.
# usage: pjdfstest-inside.sh PJDFSTEST_DIR WORK_DIR FILE...
# (FILE relative to PJDFSTEST_DIR/tests, e.g. rename/00.t)
set -u
pjd=$1
work=$2
shift 2
mkdir -p "$work"
for t in "$@"; do
  d=$(mktemp -d "$work/t.XXXXXX")
  (cd "$d" && timeout 600 sh "$pjd/tests/$t" 2>/dev/null) |
    awk -v t="$t" '/^not ok/ { print t, $3 }'
  chmod -R u+rwx "$d" 2>/dev/null
  rm -rf "$d"
  echo "done $t"
done
