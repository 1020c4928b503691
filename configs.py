# Kernel families compiled into tk_ops._C by `pip install --no-build-isolation .`.
# Each name is a folder under kernels/ holding the family's sources (today: gemm, attention, based, mamba2, fftconv).
# Building fewer families makes the install faster; ops of a family left out raise an error
# that says to add it here and reinstall.
KERNELS = ["gemm", "attention", "based", "mamba2", "fftconv"]
