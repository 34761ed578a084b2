#!/usr/bin/env bash
# Runs a benchmark script alternately in a checkout of an earlier commit and in the working
# tree, so that machine drift hits both alike (the figure that counts is the ratio each run
# prints against AllenNLP, side by side with the other code's).
#
#   bash benchmarks/compare_commits.sh BASE_COMMIT ROUNDS benchmarks/embed_speed.py --batch-sizes 1 64 --precisions
#
# The earlier commit is checked out with `git worktree` into a temporary directory (removed at
# the end, with ../shared linked beside it) and imported from there through PYTHONPATH; both
# use this checkout's .venv.
set -euo pipefail
cd "$(dirname "$0")/.."
base=$1 rounds=$2 script=$3
shift 3
python=${PYTHON:-$PWD/.venv/bin/python}
# The checkout gets ../shared beside it, as this one has, for the benchmarks that read data.
parent=$(mktemp -d)
checkout=$parent/checkout
ln -s "$(cd ../shared && pwd)" "$parent/shared"
trap 'git worktree remove --force "$checkout"; rm -rf "$parent"' EXIT
git worktree add --detach "$checkout" "$base" >/dev/null
for round in $(seq "$rounds"); do
  for tree in "$checkout" "$PWD"; do
    label=$([ "$tree" = "$PWD" ] && echo "working tree" || echo "$base")
    echo "=== round $round: $label"
    (cd "$tree" && PYTHONPATH="$tree" "$python" "$script" "$@")
  done
done
