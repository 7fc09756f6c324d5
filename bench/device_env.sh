# Sourced by the bench/cuda_*_suite.sh scripts on a CUDA machine without internet (the device tool's H200): installs
# the tests' missing wheels from .whl (soundfile, cffi, pycparser; scipy where the image lacks it) into /tmp/site and
# sets the environment the tests and benches run in. The tiny parity models (../shared/parity does not travel) are
# read from a copy in .parity (untracked) when there is one.
if ls .whl/*.whl >/dev/null 2>&1; then
  wheels=(.whl/soundfile* .whl/cffi* .whl/pycparser*)
  python3 -c "import scipy" 2>/dev/null || wheels+=(.whl/scipy*)
  python3 -m pip install -q --no-index --no-deps --target /tmp/site "${wheels[@]}" || exit 1
fi
export PYTHONPATH=/tmp/site:$PWD OMP_WAIT_POLICY=PASSIVE PYTHONUNBUFFERED=1 COSYVOICE_CACHE_DIR=/tmp/cosyvoice-cache
if [ -d .parity ]; then export COSYVOICE_PARITY_DIR=$PWD/.parity; fi
