#!/usr/bin/env bash
# Packs what a GPU machine without network access needs to run the GPU tests and benchmarks,
# into .whl/ (ignored by git): AllenNLP 2.10 and its runtime dependencies for CPython 3.12 as an
# unpacked, trimmed site directory (gpusite.tar.xz, ~23 MB), and the shared fixtures and text
# the tests and benchmarks read. The machine must already have torch, torchvision, numpy, h5py,
# scipy, scikit-learn, transformers' other dependencies and pytest (the lent H100/H200 image
# has them). Run from the repository root, with network access to the package index:
#
#   bash benchmarks/gpu_environment.sh
#
# and on the GPU machine, from the repository root (a copy with .whl/ beside it):
#
#   tar xJf .whl/gpusite.tar.xz -C /tmp && export PYTHONPATH=/tmp/gpusite:$PWD
#   cp -r .whl/shared ../shared
#   python3 -m pytest tests/test_cuda.py
#   python3 benchmarks/embed_speed.py --device cuda --batch-sizes 1 16 64 256
set -euo pipefail

PYTHON_VERSION=3.12
OUT=.whl
BUILD=$(mktemp -d)
trap 'rm -rf "$BUILD"' EXIT

# The run-time set (shipped in the wheel) and the test oracles' pins.
PINS="elmo_plugin/requirements.txt requirements.txt"
# Pinned as there; what the GPU image already has is left out.
PACKAGES="allennlp base58 blis boto3 botocore cached_path catalogue cloudpathlib confection cymem
  dill google-api-core google-auth google-cloud-core google-cloud-storage google-crc32c
  google-resumable-media googleapis-common-protos proto-plus pyasn1 pyasn1_modules jmespath jsonnet
  lmdb more-itertools murmurhash nltk overrides preshed pydantic pydantic_core annotated-types
  typing-inspection s3transfer smart_open spacy spacy-legacy spacy-loggers srsly tensorboardX
  termcolor thinc wasabi weasel transformers tokenizers huggingface_hub cryptography cffi pycparser wrapt
  protobuf defusedxml"
PLATFORMS="--platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64
  --platform manylinux_2_24_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64
  --platform manylinux1_x86_64"
WHEEL_ARGUMENTS="--no-deps --only-binary=:all: --python-version $PYTHON_VERSION --implementation cp $PLATFORMS"

mkdir -p "$BUILD/wheels" "$OUT"
for package in $PACKAGES; do
  pin=$(cat $PINS | grep -i -E "^${package}==" | head -1 | cut -d' ' -f1)
  python3 -m pip download -q $WHEEL_ARGUMENTS -d "$BUILD/wheels" "${pin:?$package is not pinned in $PINS}"
done
# fairscale is published as source only; it builds into a pure-Python wheel.
python3 -m pip wheel -q --no-deps --no-build-isolation -w "$BUILD/wheels" \
  "$(cat $PINS | grep -E '^fairscale==' | cut -d' ' -f1)"

# Unpacked rather than installed there: pip --target would skip the second package that
# shares the `google` namespace, so every wheel is unzipped over the same tree.
SITE="$BUILD/gpusite"
mkdir -p "$SITE"
for wheel in "$BUILD"/wheels/*.whl; do
  python3 -m zipfile -e "$wheel" "$SITE"
done
# Trimmed to fit the 64 MB a GPU call carries: spaCy's languages other than English,
# botocore's service descriptions (allennlp only imports boto3), debug symbols.
find "$SITE/spacy/lang" -mindepth 1 -maxdepth 1 -type d ! -name en ! -name xx -exec rm -rf {} +
find "$SITE/botocore/data" -mindepth 1 -maxdepth 1 -type d -exec rm -rf {} +
find "$SITE" -name '*.so' -exec strip --strip-unneeded {} +
find "$SITE" -name __pycache__ -type d -prune -exec rm -rf {} +
tar cJf "$OUT/gpusite.tar.xz" -C "$BUILD" gpusite

rm -rf "$OUT/shared"
mkdir -p "$OUT/shared/data/lm_eval"
cp -r ../shared/fixtures "$OUT/shared/"
cp ../shared/data/lm_eval/wikitext2.valid.txt "$OUT/shared/data/lm_eval/"
cp ../shared/data/brown.zip "$OUT/shared/data/"  # train_bilm.py speed --device cuda
du -sh "$OUT"
