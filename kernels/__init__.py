"""Custom kernels: CUDA sources (*.cu, plain CUDA) with their load_inline loader (cuda_build),
the CUDA softmax callable (cuda_softmax), and Triton kernels."""
