"""CUDA C++ softmax variants, compiled at run time through CuPy (NVRTC, nvcc as fallback)."""
