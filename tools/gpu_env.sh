# Source this on a GPU machine that has the NVIDIA driver but may lack the
# Vulkan loader, pip access or this package (DESIGN.md's recipe):
#   . tools/gpu_env.sh
# Uses .gl/*.deb (the loader packages) and .whl/*.whl (wheels) when they were
# carried next to the checkout, else apt-get/pip as usual.
if ! ldconfig -p | grep -q libvulkan.so.1; then
  if ls .gl/*.deb >/dev/null 2>&1; then
    for f in .gl/*.deb; do dpkg -x "$f" /; done
  else
    (cd /tmp && apt-get download libvulkan1 libglvnd0 libegl1 libgl1 libglx0 libgles2 libopengl0 \
       && for f in ./*.deb; do dpkg -x "$f" /; done)
  fi
  ldconfig
fi
if [ -z "${VK_DRIVER_FILES:-}" ] && [ -f /usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json ]; then
  export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json
fi
if ls .whl/*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target /tmp/vyre-site .whl/*.whl && export PYTHONPATH=/tmp/vyre-site${PYTHONPATH:+:$PYTHONPATH}
fi
python3 -c "import vyre_xdsl" 2>/dev/null ||
  python3 -m pip install -q --no-deps --no-build-isolation --no-index -e . ||
  python3 -m pip install -q --no-deps --no-build-isolation -e .
