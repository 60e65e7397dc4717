#!/usr/bin/env bash
# The library path, as a user takes it (make test-library; CI runs it after make test): the
# project's wheel, built from this checkout, installed (not editable) with its spark extra
# into a new virtualenv; then, from a folder outside the repository, an example pipeline
# run through the launcher on our SparkRunner (local[2]), its output compared with the
# DirectRunner's, and a TestStream test run by pytest through the testing kit (DirectRunner
# and SparkRunner). The project's own virtualenv (make install) builds the wheel.
set -euo pipefail
cd "$(dirname "$0")/.."
REPO=$(pwd)
PY="$REPO/.venv/bin/python"
PYTHON=${PYTHON:-python3}
WORK=$(mktemp -d "${TMPDIR:-/tmp}/beam-spark-library.XXXXXX")
trap 'rm -rf "$WORK"' EXIT
began=$(date +%s)
step() { echo "library path: $1 ($(( $(date +%s) - began )) s)"; }

step "the wheel"
"$PY" -m pip wheel --quiet --no-deps --no-build-isolation --wheel-dir "$WORK/dist" "$REPO"
wheel=$(ls "$WORK"/dist/beam_spark_dataflow-*.whl)

step "a new virtualenv, the wheel with its spark extra, and pytest"
"$PYTHON" -m venv "$WORK/venv"
"$WORK/venv/bin/python" -m pip install --quiet --disable-pip-version-check \
  "${wheel}[spark]" 'pytest>=8,<9.2'
mkdir "$WORK/user"
cp examples/word_count.py examples/test_late_panes.py "$WORK/user/"
cd "$WORK/user"
where=$("$WORK/venv/bin/python" -c 'import runners; print(runners.__file__)')
case "$where" in
  "$WORK/venv/"*) ;;
  *) echo "library path: the virtualenv imports $where, not the installed wheel" >&2; exit 1 ;;
esac
printf 'the quick fox\nthe lazy dog\nthe end of the day\n' > in.txt

step "the example pipeline on the DirectRunner"
"$WORK/venv/bin/python" word_count.py --input in.txt --output direct.txt
step "the example pipeline on our SparkRunner, through the launcher"
"$WORK/venv/bin/beam-spark" run word_count.py --input in.txt --output spark.txt \
  --runner SparkRunner --spark_master_url 'local[2]'
if ! diff <(sort direct.txt) <(sort spark.txt); then
  echo "library path: the SparkRunner's counts differ from the DirectRunner's" >&2
  exit 1
fi
echo "library path: the same $(wc -l < spark.txt) counts on both runners"

step "a TestStream test through the testing kit"
"$WORK/venv/bin/python" -m pytest -p no:cacheprovider -v test_late_panes.py
step "done"
